#include "ztrain/ckpt/background_writer.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

#include <utility>

#include "ztrain/core/error.hpp"

namespace zt {

BackgroundWriter::~BackgroundWriter() {
    hurry();
    if (m_thread.joinable()) m_thread.join();
}

void BackgroundWriter::hurry() {
    if (in_flight()) m_pacer->hurry();
}

void BackgroundWriter::start(Job job, double pace_target_s) {
    ZT_REQUIRE(!in_flight(), "BackgroundWriter::start: the previous write was not collected");
    m_done.store(false, std::memory_order_release);
    m_error = nullptr;
    m_pacer = std::make_unique<WritePacer>(pace_target_s);  // its clock starts with the job
    m_thread = std::thread([this, pacer = m_pacer.get(), job = std::move(job)] {
        // Below the training threads: the write's CPU work (hashing, HDF5's structure) takes
        // the cycles training leaves idle first, and its I/O waits (direct writes, fsync)
        // cost nothing. Best effort: a failure leaves the thread at normal priority.
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
        try {
            m_report = job(*pacer);
            m_report.pace_target_s = pacer->target_s();
            m_report.paced_s = pacer->slept_s();
            m_report.hurried = pacer->cut_short();
            timespec cpu{};
            ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
            m_report.writer_cpu_s = static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec);
        } catch (...) {
            m_error = std::current_exception();
        }
        m_done.store(true, std::memory_order_release);
    });
}

CheckpointWriteReport BackgroundWriter::collect() {
    ZT_REQUIRE(in_flight(), "BackgroundWriter::collect: no write in flight");
    hurry();  // someone waits for it now: no more sleeps
    m_thread.join();
    if (m_error) std::rethrow_exception(std::exchange(m_error, nullptr));
    return m_report;
}

}  // namespace zt
