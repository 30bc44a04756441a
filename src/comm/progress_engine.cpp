// The progress engine (progress_engine.hpp).
#include "progress_engine.hpp"

#include <chrono>
#include <utility>

namespace zt {
namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

ProgressEngine::ProgressEngine() : m_thread([this] { run(); }) {}

ProgressEngine::~ProgressEngine() {
    {
        const std::lock_guard<std::mutex> lock(m_mutex);
        m_stop = true;
    }
    m_cv.notify_all();
    m_thread.join();
}

ProgressEngine::Ticket ProgressEngine::submit(std::function<void()> job) {
    Ticket t = 0;
    {
        const std::lock_guard<std::mutex> lock(m_mutex);
        t = m_next++;
        m_queued[t].queued_ns = now_ns();
        m_queue.emplace_back(t, std::move(job));
    }
    m_cv.notify_all();
    return t;
}

ProgressEngine::JobTimes ProgressEngine::wait(Ticket ticket) {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_cv.wait(lock, [&] { return m_done.count(ticket) > 0; });
    auto it = m_done.find(ticket);
    Done done = std::move(it->second);
    m_done.erase(it);
    lock.unlock();
    if (done.error) std::rethrow_exception(done.error);
    return done.times;
}

bool ProgressEngine::finished(Ticket ticket) const {
    const std::lock_guard<std::mutex> lock(m_mutex);
    return m_done.count(ticket) > 0;
}

void ProgressEngine::run() {
    std::unique_lock<std::mutex> lock(m_mutex);
    for (;;) {
        m_cv.wait(lock, [&] { return m_stop || !m_queue.empty(); });
        if (m_queue.empty()) return;  // stopping, nothing left
        auto [ticket, job] = std::move(m_queue.front());
        m_queue.pop_front();
        JobTimes times = m_queued[ticket];
        m_queued.erase(ticket);
        lock.unlock();
        times.started_ns = now_ns();
        std::exception_ptr error;
        try {
            job();
        } catch (...) {
            error = std::current_exception();
        }
        times.finished_ns = now_ns();
        lock.lock();
        m_done[ticket] = Done{times, error};
        m_cv.notify_all();
    }
}

}  // namespace zt
