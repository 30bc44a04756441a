// The progress engine: a communication thread that runs one communicator's started host
// collectives while the training thread computes (private to comm/). Each communicator that
// asks for one has its own (the shard group's, and with replicas the replica group's), so
// a slow network all-reduce across groups never holds up the group's gathers on the node.
//
// Open MPI makes no progress on a started collective outside MPI calls (no progress thread
// in Debian's build), so a collective started at a unit boundary would otherwise move only
// when the rank waits for it. The engine runs each started collective as the *blocking* MPI
// call, on a duplicate communicator of its own, in the order the collectives were started:
// results are the blocking calls' bit for bit (a reduce-scatter adds in the blocking order),
// and since every rank starts the same collectives in the same order, every rank's engine
// runs them in the same order. The training thread's own blocking calls use the original
// communicator, so the two threads never share a communicator (MPI_THREAD_MULTIPLE).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace zt {

class ProgressEngine {
  public:
    /// When a collective was handed over, began running, and finished (steady-clock ns).
    struct JobTimes {
        int64_t queued_ns = 0;
        int64_t started_ns = 0;
        int64_t finished_ns = 0;
    };
    using Ticket = uint64_t;

    ProgressEngine();
    ~ProgressEngine();
    ProgressEngine(const ProgressEngine&) = delete;
    ProgressEngine& operator=(const ProgressEngine&) = delete;

    /// Queues `job` behind every job submitted before it.
    Ticket submit(std::function<void()> job);
    /// Blocks until the job has run; returns its times and forgets it; rethrows its error.
    JobTimes wait(Ticket ticket);
    /// Whether the job has run (waiting for it would not block).
    bool finished(Ticket ticket) const;

  private:
    void run();

    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<std::pair<Ticket, std::function<void()>>> m_queue;
    struct Done {
        JobTimes times;
        std::exception_ptr error;
    };
    std::map<Ticket, JobTimes> m_queued;  ///< submitted, not yet finished
    std::map<Ticket, Done> m_done;        ///< finished, not yet waited for
    Ticket m_next = 0;
    bool m_stop = false;
    std::thread m_thread;
};

}  // namespace zt
