// MPI implementation of the Communicator for host buffers.
//
// Non-blocking forms use MPI-3 non-blocking collectives. Open MPI progresses them only
// inside MPI calls, so on the CPU their value is ordering freedom rather than true overlap;
// the NCCL communicator (GPU) overlaps for real on its own stream.
#include "ztrain/comm/communicator.hpp"

#include <algorithm>
#include <climits>

#include "ztrain/core/error.hpp"

namespace zt {

const char* collective_name(CollectiveKind kind) {
    switch (kind) {
        case CollectiveKind::kAllReduce: return "all_reduce";
        case CollectiveKind::kReduceScatter: return "reduce_scatter";
        case CollectiveKind::kAllGather: return "all_gather";
        case CollectiveKind::kBroadcast: return "broadcast";
        case CollectiveKind::kBarrier: return "barrier";
        case CollectiveKind::kScalar: return "scalar";
    }
    return "?";
}

int checked_count(size_t count, const char* what) {
    if (count > static_cast<size_t>(INT_MAX)) {
        throw Error(str(what, ": ", count, " elements exceed one MPI message (INT_MAX)"));
    }
    return static_cast<int>(count);
}

namespace {
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }
}  // namespace

Communicator::Communicator(MPI_Comm comm) {
    if (comm == MPI_COMM_NULL) return;  // a one-rank communicator that never calls MPI
    ZT_MPI_CHECK(MPI_Comm_dup(comm, &m_comm));
    ZT_MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
    ZT_MPI_CHECK(MPI_Comm_size(m_comm, &m_size));
    MPI_Comm local = MPI_COMM_NULL;
    ZT_MPI_CHECK(MPI_Comm_split_type(m_comm, MPI_COMM_TYPE_SHARED, m_rank, MPI_INFO_NULL, &local));
    ZT_MPI_CHECK(MPI_Comm_rank(local, &m_local_rank));
    ZT_MPI_CHECK(MPI_Comm_size(local, &m_local_size));
    ZT_MPI_CHECK(MPI_Comm_free(&local));
}

Communicator& self_communicator() {
    static Communicator self(MPI_COMM_NULL);
    return self;
}

Communicator::~Communicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
}

void Communicator::record(CollectiveKind kind, uint64_t bytes) {
    CommStats::Entry& e = m_stats.by_kind[kind];
    e.bytes += bytes;
    e.calls += 1;
}

namespace {
/// Ring volume for n elements spread over `size` ranks: n * (size-1)/size floats.
uint64_t ring_bytes(size_t n_total, int size) {
    return static_cast<uint64_t>(n_total) * sizeof(float) * static_cast<uint64_t>(size - 1) /
           static_cast<uint64_t>(size);
}
}  // namespace

void Communicator::all_reduce(float* buf, size_t count, ReduceOp op) {
    record(CollectiveKind::kAllReduce, 2 * ring_bytes(count, m_size));
    if (m_size == 1) return;
    ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, checked_count(count, "all_reduce"), MPI_FLOAT, mpi_op(op), m_comm));
}

void Communicator::reduce_scatter(const float* in, float* out, size_t count_per_rank, ReduceOp op) {
    record(CollectiveKind::kReduceScatter, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size));
    if (m_size == 1) {
        if (in != out) std::copy(in, in + count_per_rank, out);
        return;
    }
    ZT_MPI_CHECK(MPI_Reduce_scatter_block(in, out, checked_count(count_per_rank, "reduce_scatter"), MPI_FLOAT,
                                          mpi_op(op), m_comm));
}

void Communicator::all_gather(const float* in, float* out, size_t count_per_rank) {
    record(CollectiveKind::kAllGather, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size));
    const int n = checked_count(count_per_rank, "all_gather");
    if (m_size == 1) {
        if (in != nullptr && in != out) std::copy(in, in + count_per_rank, out);
        return;
    }
    if (in == nullptr) {
        ZT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, MPI_FLOAT, m_comm));
    } else {
        ZT_MPI_CHECK(MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, m_comm));
    }
}

void Communicator::broadcast(float* buf, size_t count, int root) {
    record(CollectiveKind::kBroadcast, m_rank == root ? count * sizeof(float) : 0);
    if (m_size == 1) return;
    ZT_MPI_CHECK(MPI_Bcast(buf, checked_count(count, "broadcast"), MPI_FLOAT, root, m_comm));
}

void Communicator::broadcast_bytes(void* buf, size_t bytes, int root) {
    record(CollectiveKind::kBroadcast, m_rank == root ? bytes : 0);
    if (m_size == 1) return;
    ZT_MPI_CHECK(MPI_Bcast(buf, checked_count(bytes, "broadcast"), MPI_BYTE, root, m_comm));
}

void Communicator::barrier() {
    record(CollectiveKind::kBarrier, 0);
    if (m_size == 1) return;
    ZT_MPI_CHECK(MPI_Barrier(m_comm));
}

void Communicator::all_reduce_scalars(double* values, size_t count, ReduceOp op) {
    record(CollectiveKind::kScalar, 2 * static_cast<uint64_t>(count) * sizeof(double) *
                                       static_cast<uint64_t>(m_size - 1) / static_cast<uint64_t>(m_size));
    if (m_size == 1) return;
    ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, checked_count(count, "all_reduce_scalars"), MPI_DOUBLE,
                               mpi_op(op), m_comm));
}

CommRequest Communicator::start_all_reduce(float* buf, size_t count, ReduceOp op) {
    record(CollectiveKind::kAllReduce, 2 * ring_bytes(count, m_size));
    CommRequest r;
    if (m_size == 1) return r;
    ZT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, checked_count(count, "all_reduce"), MPI_FLOAT, mpi_op(op),
                                m_comm, &r.m_request));
    return r;
}

CommRequest Communicator::start_reduce_scatter(const float* in, float* out, size_t count_per_rank, ReduceOp op) {
    record(CollectiveKind::kReduceScatter, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size));
    CommRequest r;
    if (m_size == 1) {
        if (in != out) std::copy(in, in + count_per_rank, out);
        return r;
    }
    ZT_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, checked_count(count_per_rank, "reduce_scatter"), MPI_FLOAT,
                                           mpi_op(op), m_comm, &r.m_request));
    return r;
}

CommRequest Communicator::start_all_gather(const float* in, float* out, size_t count_per_rank) {
    record(CollectiveKind::kAllGather, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size));
    CommRequest r;
    const int n = checked_count(count_per_rank, "all_gather");
    if (m_size == 1) {
        if (in != nullptr && in != out) std::copy(in, in + count_per_rank, out);
        return r;
    }
    if (in == nullptr) {
        ZT_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, MPI_FLOAT, m_comm, &r.m_request));
    } else {
        ZT_MPI_CHECK(MPI_Iallgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, m_comm, &r.m_request));
    }
    return r;
}

void Communicator::wait(CommRequest& request) {
    if (!request.active()) return;
    ZT_MPI_CHECK(MPI_Wait(&request.m_request, MPI_STATUS_IGNORE));
}

}  // namespace zt
