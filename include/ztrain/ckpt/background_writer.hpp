// One checkpoint write at a time on a thread of its own (checkpoint.async): the training
// loop hands it a job that writes a captured CheckpointSnapshot and goes on training.
//
// HDF5 (Debian's build is not thread-safe) is touched by one thread at a time because the
// owner never calls HDF5 while a job may run: a save or the end of training first waits
// for the job in flight (collect), and checkpoints are loaded only before the first save.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <thread>

#include "ztrain/ckpt/checkpoint.hpp"

namespace zt {

class BackgroundWriter {
  public:
    using Job = std::function<CheckpointWriteReport()>;

    BackgroundWriter() = default;
    /// Waits for a job in flight (it may be a collective the other ranks' writers are in).
    ~BackgroundWriter();
    BackgroundWriter(const BackgroundWriter&) = delete;
    BackgroundWriter& operator=(const BackgroundWriter&) = delete;

    /// Runs `job` on the writer thread. Requires !in_flight() (collect the previous first).
    void start(Job job);
    /// A job was started and its outcome not yet collected.
    bool in_flight() const { return m_thread.joinable(); }
    /// The job in flight is still running (collect would block).
    bool running() const { return in_flight() && !m_done.load(std::memory_order_acquire); }
    /// Waits for the job in flight and returns its report, or rethrows what it threw.
    CheckpointWriteReport collect();

  private:
    std::thread m_thread;
    std::atomic<bool> m_done{false};
    CheckpointWriteReport m_report;
    std::exception_ptr m_error;
};

}  // namespace zt
