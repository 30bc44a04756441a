// Collective communication between the ranks of a job.
//
// Buffers are `count` elements of a DType (fp32, or bf16/fp16 stored as 16 bits): the wire
// format is the storage format, so a bf16 gradient reduction moves half the bytes. Sums of
// 16-bit types accumulate each pairwise addition in fp32 and round back (the MPI
// implementation registers its own MPI_Op for that).
//
// One interface, three implementations behind the same calls: MPI (host buffers,
// make_mpi_communicator), NCCL (device buffers, its id broadcast with broadcast_bytes;
// nccl_communicator.hpp) and host staging (device -> pinned host -> MPI;
// staged_communicator.hpp); make_communicator (comm_select.hpp) picks one. Every call is
// counted per collective kind, as the bytes this rank sends under the usual ring/
// recursive algorithms, so the per-step volumes of each ZeRO stage can be checked against
// theory (docs/architecture.md):
//   all_reduce(n)        2 * n * (N-1)/N elements (times the element size)
//   reduce_scatter(n/N)  n * (N-1)/N      (n = total elements, n/N per rank)
//   all_gather(n/N)      n * (N-1)/N
//   broadcast(n)         n  (root), 0 others
// Host scalars (loss, grad-norm partial sums, flags) go through all_reduce_scalars and are
// counted apart, under "scalar", so they do not blur the model-state volumes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <string>

#include <mpi.h>

#include "ztrain/core/dtype.hpp"

namespace zt {

enum class ReduceOp { kSum, kMax };

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier, kScalar };
const char* collective_name(CollectiveKind kind);

/// Bytes and calls per collective kind since the last reset.
struct CommStats {
    struct Entry {
        uint64_t bytes = 0;
        uint64_t calls = 0;
    };
    std::map<CollectiveKind, Entry> by_kind;
    /// Started collectives, as waited for: how many, how many had already finished when
    /// waited for, the time the caller spent in wait(), and the time they ran in the
    /// progress engine (0 where none runs them). run_s - wait_s of those is the
    /// communication hidden behind compute.
    struct Overlap {
        uint64_t waited = 0;
        uint64_t done_before_wait = 0;
        double wait_s = 0;
        double run_s = 0;
    } overlap;
    uint64_t bytes(CollectiveKind k) const {
        auto it = by_kind.find(k);
        return it == by_kind.end() ? 0 : it->second.bytes;
    }
    uint64_t calls(CollectiveKind k) const {
        auto it = by_kind.find(k);
        return it == by_kind.end() ? 0 : it->second.calls;
    }
};

/// A collective started with a start_* call; finish it with Communicator::wait. The handle
/// is opaque: each implementation maps it to its own request (MPI_Request, CUDA event, ...).
class CommRequest {
  public:
    CommRequest() = default;
    explicit CommRequest(int64_t handle) : m_handle(handle) {}
    bool active() const { return m_handle >= 0; }
    int64_t handle() const { return m_handle; }
    void reset() { m_handle = -1; }

  private:
    int64_t m_handle = -1;
};

/// The collective interface the parallel strategies are written against. Buffers are float
/// elements of the implementation's memory space (host for MPI, device for NCCL); the byte
/// and scalar calls (broadcast_bytes, all_gather_bytes, all_reduce_scalars) take host memory
/// in every implementation. Every call is recorded in stats() by the base class.
class Communicator {
  public:
    virtual ~Communicator() = default;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    virtual std::string name() const = 0;
    /// Whether started collectives run in a communication thread (the progress engine).
    virtual bool has_communication_thread() const { return false; }
    int rank() const { return m_rank; }
    int size() const { return m_size; }
    /// Rank and size among the ranks sharing this node (MPI_COMM_TYPE_SHARED split):
    /// the local rank picks the GPU and divides the cores.
    int local_rank() const { return m_local_rank; }
    int local_size() const { return m_local_size; }

    void all_reduce(void* buf, size_t count, ReduceOp op = ReduceOp::kSum, DType dt = DType::kF32);
    /// in: size() * count_per_rank elements; out: count_per_rank (this rank's block).
    void reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op = ReduceOp::kSum,
                        DType dt = DType::kF32);
    /// in: count_per_rank elements (null: taken in place from out + rank * count_per_rank);
    /// out: size() * count_per_rank elements.
    void all_gather(const void* in, void* out, size_t count_per_rank, DType dt = DType::kF32);
    void broadcast(float* buf, size_t count, int root);
    /// Raw bytes from root (e.g. an NCCL unique id during bootstrap).
    void broadcast_bytes(void* buf, size_t bytes, int root);
    /// Host bytes from every rank: out holds size() * bytes_per_rank (small records only).
    void all_gather_bytes(const void* in, void* out, size_t bytes_per_rank);
    void barrier();
    /// Small host reductions (loss sums, norms, flags), counted under "scalar".
    void all_reduce_scalars(double* values, size_t count, ReduceOp op = ReduceOp::kSum);

    /// Started collectives, completed by wait(). MPI runs a started reduce-scatter at the
    /// wait, because Open MPI's non-blocking one adds in another order than the blocking one
    /// (see mpi_communicator.cpp); its started all-reduce gave the blocking one's fp32 sums
    /// bit for bit in a probe at 4 ranks.
    CommRequest start_all_reduce(void* buf, size_t count, ReduceOp op = ReduceOp::kSum, DType dt = DType::kF32);
    CommRequest start_reduce_scatter(const void* in, void* out, size_t count_per_rank,
                                     ReduceOp op = ReduceOp::kSum, DType dt = DType::kF32);
    CommRequest start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt = DType::kF32);
    /// Completes a started collective and resets the request (no-op when inactive).
    void wait(CommRequest& request);
    /// Whether wait(request) would return at once because the collective already ran (in a
    /// communication thread); false when not known without blocking. Never blocks.
    bool finished(const CommRequest& request) const { return !request.active() || do_finished(request); }

    /// For an error that is unwinding, before the buffers of the collectives this rank has
    /// started are freed: ends them. NCCL aborts them without waiting for the other ranks
    /// (they may never join, and a device sync or free would hang on them); the communicator
    /// is unusable afterwards. MPI cannot cancel a collective, and one still running writes
    /// and reads its buffers: it completes them (the peers started the same ones and progress
    /// them in whatever MPI call they wait in), for at most `timeout_s` seconds (0: no limit),
    /// past which it aborts the job rather than free a buffer MPI still uses.
    virtual void end_outstanding(double timeout_s) noexcept { (void)timeout_s; }
    /// For the collective watchdog's thread: why this rank's collectives are failing or stuck
    /// on the device (an asynchronous error, or one enqueued more than timeout_s ago and not
    /// finished), naming the collective; empty when neither. Host collectives block the
    /// caller and are watched through pending_collective() instead, hence the default.
    virtual std::string device_stall(double timeout_s) noexcept {
        (void)timeout_s;
        return {};
    }

    const CommStats& stats() const { return m_stats; }
    void reset_stats() { m_stats = CommStats{}; }

    /// The collective this rank is blocked in right now (null when none) and since when
    /// (steady-clock nanoseconds). Read by a watchdog thread, hence atomic.
    const char* pending_collective() const { return m_pending.load(std::memory_order_acquire); }
    int64_t pending_since_ns() const { return m_pending_since_ns.load(std::memory_order_acquire); }

  protected:
    Communicator(int rank, int size, int local_rank, int local_size)
        : m_rank(rank), m_size(size), m_local_rank(local_rank), m_local_size(local_size) {}

    // What an implementation provides. Called only when size() > 1; the base class handles
    // the one-rank case (copies) and the accounting.
    virtual void do_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) = 0;
    virtual void do_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op, DType dt) = 0;
    virtual void do_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) = 0;
    virtual void do_broadcast_bytes(void* buf, size_t bytes, int root) = 0;
    virtual void do_all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) = 0;
    virtual void do_barrier() = 0;
    virtual void do_all_reduce_scalars(double* values, size_t count, ReduceOp op) = 0;
    virtual CommRequest do_start_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) = 0;
    virtual CommRequest do_start_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op,
                                                DType dt) = 0;
    virtual CommRequest do_start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) = 0;
    virtual void do_wait(CommRequest& request) = 0;
    virtual bool do_finished(const CommRequest& request) const {
        (void)request;
        return false;
    }
    /// broadcast() of a buffer in the implementation's memory space; host implementations
    /// keep this default, device ones override it (broadcast_bytes stays host memory).
    virtual void do_broadcast(void* buf, size_t bytes, int root) { do_broadcast_bytes(buf, bytes, root); }
    /// The one-rank case's copy between two buffers of the implementation's memory space.
    virtual void copy_local(const void* in, void* out, size_t bytes);
    /// For do_wait of an implementation that runs started collectives in the background:
    /// how long the one just waited for ran, and whether it had finished before the wait.
    void note_background_run(double run_s, bool done_before_wait) {
        m_stats.overlap.run_s += run_s;
        if (done_before_wait) ++m_stats.overlap.done_before_wait;
    }

  public:
    /// Marks this rank as blocked in `name` for the lifetime of the guard (pending_collective,
    /// which the watchdog polls): this communicator's own blocking calls, and waits on its
    /// ranks made outside it (a pipeline's point-to-point receives, parallel/pipeline_runner).
    class PendingGuard {
      public:
        PendingGuard(Communicator& c, const char* name);
        ~PendingGuard();
        PendingGuard(const PendingGuard&) = delete;
        PendingGuard& operator=(const PendingGuard&) = delete;

      private:
        Communicator& m_comm;
    };

  private:
    void record(CollectiveKind kind, uint64_t bytes);
    void copy_elements(const void* in, void* out, size_t n, DType dt);
    std::atomic<const char*> m_pending{nullptr};
    std::atomic<int64_t> m_pending_since_ns{0};
    int m_rank;
    int m_size;
    int m_local_rank;
    int m_local_size;
    CommStats m_stats;
};

/// MPI over host buffers. `comm` is duplicated, so ztrain's traffic never matches a user's
/// messages. MPI_COMM_NULL gives a one-rank communicator that never calls MPI (tools, unit
/// tests without MPI_Init).
/// Whether MPI lets a second thread make calls while the training thread makes its own
/// (MPI_THREAD_MULTIPLE): the progress engine and background checkpoint writes need it.
bool mpi_thread_multiple();

/// `progress_thread`: started collectives run in the process's progress engine (a
/// communication thread, src/comm/progress_engine.hpp) while the caller computes, instead of
/// when waited for; ignored (off) for one rank or without MPI_THREAD_MULTIPLE.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool progress_thread = false);

/// The ranks of an MPI communicator that share this node (the MPI_COMM_TYPE_SHARED split,
/// ordered by rank in `comm`): the one node query, for the communicators' local rank and
/// for the shard groups. Freed on destruction. MPI_COMM_NULL: one rank, no MPI calls.
class NodeComm {
  public:
    explicit NodeComm(MPI_Comm comm);
    ~NodeComm();
    NodeComm(const NodeComm&) = delete;
    NodeComm& operator=(const NodeComm&) = delete;
    MPI_Comm get() const { return m_comm; }
    int rank() const { return m_rank; }
    int size() const { return m_size; }

  private:
    MPI_Comm m_comm = MPI_COMM_NULL;
    int m_rank = 0;
    int m_size = 1;
};

/// A process-wide one-rank communicator for single-rank use.
Communicator& self_communicator();

/// MPI counts are int: throws zt::Error when one call would carry more than INT_MAX elements.
int checked_count(size_t count, const char* what);

}  // namespace zt
