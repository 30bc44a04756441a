// One checkpoint write at a time on a thread of its own (checkpoint.async): the training
// loop hands it a job that writes a captured CheckpointSnapshot and goes on training.
//
// HDF5 (Debian's build is not thread-safe) is touched by one thread at a time because the
// owner never calls HDF5 while a job may run: a save or the end of training first waits
// for the job in flight (collect), and checkpoints are loaded only before the first save.
//
// A job may be paced (ckpt/write_pacer.hpp): spread over a target duration so its memory
// traffic disturbs the training steps less. Whoever waits for it hurries it first: collect
// and the destructor end the pacing at once, so no save, stop or exit waits for a sleep.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/write_pacer.hpp"

namespace zt {

class BackgroundWriter {
  public:
    /// Writes a checkpoint, pacing its data pass through `pacer` (write_checkpoint's).
    using Job = std::function<CheckpointWriteReport(WritePacer& pacer)>;

    BackgroundWriter() = default;
    /// Hurries and waits for a job in flight (it may be a collective the other ranks'
    /// writers are in).
    ~BackgroundWriter();
    BackgroundWriter(const BackgroundWriter&) = delete;
    BackgroundWriter& operator=(const BackgroundWriter&) = delete;

    /// Runs `job` on the writer thread, paced over `pace_target_s` seconds (0: at full
    /// speed). Requires !in_flight() (collect the previous first). The report's pace
    /// fields (target, slept, hurried) and writer_cpu_s are filled in here.
    void start(Job job, double pace_target_s = 0);
    /// A job was started and its outcome not yet collected.
    bool in_flight() const { return m_thread.joinable(); }
    /// The job in flight is still running (collect would block).
    bool running() const { return in_flight() && !m_done.load(std::memory_order_acquire); }
    /// Ends the pacing of the job in flight (no-op when none): it runs at full speed from now.
    void hurry();
    /// Hurries and waits for the job in flight; returns its report, or rethrows what it threw.
    CheckpointWriteReport collect();

  private:
    std::unique_ptr<WritePacer> m_pacer;  ///< the job in flight's; replaced only by start()
    std::thread m_thread;
    std::atomic<bool> m_done{false};
    CheckpointWriteReport m_report;
    std::exception_ptr m_error;
};

}  // namespace zt
