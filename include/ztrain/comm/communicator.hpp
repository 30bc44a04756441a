// Collective communication between the ranks of a job.
//
// One interface, several implementations: MpiCommunicator (host buffers; this file's
// factory), later an NCCL one (device buffers) behind the same calls. Every call is
// counted per collective kind, as the bytes this rank sends under the usual ring/
// recursive algorithms, so the per-step volumes of each ZeRO stage can be checked against
// theory (see README):
//   all_reduce(n)        2 * n * (N-1)/N elements
//   reduce_scatter(n/N)  n * (N-1)/N      (n = total elements, n/N per rank)
//   all_gather(n/N)      n * (N-1)/N
//   broadcast(n)         n  (root), 0 others
// Host scalars (loss, grad-norm partial sums, flags) go through all_reduce_scalars and are
// counted apart, under "scalar", so they do not blur the model-state volumes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <mpi.h>

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
    uint64_t bytes(CollectiveKind k) const {
        auto it = by_kind.find(k);
        return it == by_kind.end() ? 0 : it->second.bytes;
    }
    uint64_t calls(CollectiveKind k) const {
        auto it = by_kind.find(k);
        return it == by_kind.end() ? 0 : it->second.calls;
    }
};

/// A collective started with a start_* call; finish with Communicator::wait.
class CommRequest {
  public:
    CommRequest() = default;
    bool active() const { return m_request != MPI_REQUEST_NULL; }

  private:
    friend class Communicator;
    MPI_Request m_request = MPI_REQUEST_NULL;
};

class Communicator {
  public:
    /// Wraps `comm` (duplicated, so ztrain's traffic never matches a user's messages).
    /// MPI_COMM_NULL gives a one-rank communicator that never calls MPI (tools, unit tests).
    explicit Communicator(MPI_Comm comm);
    ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    int rank() const { return m_rank; }
    int size() const { return m_size; }
    /// Rank and size among the ranks sharing this node (MPI_COMM_TYPE_SHARED split):
    /// the local rank picks the GPU and divides the cores.
    int local_rank() const { return m_local_rank; }
    int local_size() const { return m_local_size; }
    MPI_Comm handle() const { return m_comm; }

    void all_reduce(float* buf, size_t count, ReduceOp op = ReduceOp::kSum);
    /// in: size() * count_per_rank elements; out: count_per_rank (this rank's block).
    void reduce_scatter(const float* in, float* out, size_t count_per_rank, ReduceOp op = ReduceOp::kSum);
    /// in: count_per_rank elements (may be null: then taken in place from out + rank*count);
    /// out: size() * count_per_rank elements.
    void all_gather(const float* in, float* out, size_t count_per_rank);
    void broadcast(float* buf, size_t count, int root);
    void broadcast_bytes(void* buf, size_t bytes, int root);
    void barrier();
    /// Small host reductions (loss sums, norms, flags), counted under "scalar".
    void all_reduce_scalars(double* values, size_t count, ReduceOp op = ReduceOp::kSum);

    CommRequest start_all_reduce(float* buf, size_t count, ReduceOp op = ReduceOp::kSum);
    CommRequest start_reduce_scatter(const float* in, float* out, size_t count_per_rank,
                                     ReduceOp op = ReduceOp::kSum);
    CommRequest start_all_gather(const float* in, float* out, size_t count_per_rank);
    /// Completes a started collective (no-op on an inactive request).
    void wait(CommRequest& request);

    const CommStats& stats() const { return m_stats; }
    void reset_stats() { m_stats = CommStats{}; }

  private:
    void record(CollectiveKind kind, uint64_t bytes);
    MPI_Comm m_comm = MPI_COMM_NULL;
    int m_rank = 0;
    int m_size = 1;
    int m_local_rank = 0;
    int m_local_size = 1;
    CommStats m_stats;
};

/// A process-wide one-rank communicator (MPI_COMM_NULL based) for single-rank use.
Communicator& self_communicator();

/// Messages may hold more than INT_MAX elements on large models; MPI counts are int.
/// Throws zt::Error when a single call would exceed it (callers chunk by unit).
int checked_count(size_t count, const char* what);

}  // namespace zt
