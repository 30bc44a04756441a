// The Communicator base: accounting and the one-rank case, shared by every implementation.
#include "ztrain/comm/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

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

Communicator::PendingGuard::PendingGuard(Communicator& c, const char* name) : m_comm(c) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    m_comm.m_pending_since_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(),
                                    std::memory_order_release);
    m_comm.m_pending.store(name, std::memory_order_release);
}

Communicator::PendingGuard::~PendingGuard() { m_comm.m_pending.store(nullptr, std::memory_order_release); }

void Communicator::record(CollectiveKind kind, uint64_t bytes) {
    CommStats::Entry& e = m_stats.by_kind[kind];
    e.bytes += bytes;
    e.calls += 1;
}

namespace {
/// Ring volume for n elements spread over `size` ranks: n * (size-1)/size elements.
uint64_t ring_bytes(size_t n_total, int size, DType dt) {
    return static_cast<uint64_t>(n_total) * dtype_size(dt) * static_cast<uint64_t>(size - 1) /
           static_cast<uint64_t>(size);
}
}  // namespace

void Communicator::copy_local(const void* in, void* out, size_t bytes) { std::memcpy(out, in, bytes); }

void Communicator::copy_elements(const void* in, void* out, size_t n, DType dt) {
    if (in != nullptr && in != out) copy_local(in, out, n * dtype_size(dt));
}

void Communicator::all_reduce(void* buf, size_t count, ReduceOp op, DType dt) {
    record(CollectiveKind::kAllReduce, 2 * ring_bytes(count, m_size, dt));
    if (m_size > 1) {
        PendingGuard g(*this, "all_reduce");
        do_all_reduce(buf, count, op, dt);
    }
}

void Communicator::reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op, DType dt) {
    record(CollectiveKind::kReduceScatter, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size, dt));
    if (m_size > 1) {
        PendingGuard g(*this, "reduce_scatter");
        do_reduce_scatter(in, out, count_per_rank, op, dt);
    } else {
        copy_elements(in, out, count_per_rank, dt);
    }
}

void Communicator::all_gather(const void* in, void* out, size_t count_per_rank, DType dt) {
    record(CollectiveKind::kAllGather, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size, dt));
    if (m_size > 1) {
        PendingGuard g(*this, "all_gather");
        do_all_gather(in, out, count_per_rank, dt);
    } else {
        copy_elements(in, out, count_per_rank, dt);
    }
}

void Communicator::broadcast(float* buf, size_t count, int root) {
    record(CollectiveKind::kBroadcast, m_rank == root ? count * sizeof(float) : 0);
    if (m_size > 1) {
        PendingGuard g(*this, "broadcast");
        do_broadcast(buf, count * sizeof(float), root);
    }
}

void Communicator::broadcast_bytes(void* buf, size_t bytes, int root) {
    record(CollectiveKind::kBroadcast, m_rank == root ? bytes : 0);
    if (m_size > 1) {
        PendingGuard g(*this, "broadcast");
        do_broadcast_bytes(buf, bytes, root);
    }
}

void Communicator::all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) {
    record(CollectiveKind::kScalar, bytes_per_rank * static_cast<size_t>(m_size - 1));
    if (m_size > 1) {
        PendingGuard g(*this, "all_gather_bytes");
        do_all_gather_bytes(in, out, bytes_per_rank);
    } else {
        std::memcpy(out, in, bytes_per_rank);
    }
}

void Communicator::barrier() {
    record(CollectiveKind::kBarrier, 0);
    if (m_size > 1) {
        PendingGuard g(*this, "barrier");
        do_barrier();
    }
}

void Communicator::all_reduce_scalars(double* values, size_t count, ReduceOp op) {
    record(CollectiveKind::kScalar, 2 * static_cast<uint64_t>(count) * sizeof(double) *
                                        static_cast<uint64_t>(m_size - 1) / static_cast<uint64_t>(m_size));
    if (m_size > 1) {
        PendingGuard g(*this, "all_reduce (scalars)");
        do_all_reduce_scalars(values, count, op);
    }
}

CommRequest Communicator::start_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) {
    record(CollectiveKind::kAllReduce, 2 * ring_bytes(count, m_size, dt));
    if (m_size == 1) return CommRequest{};
    return do_start_all_reduce(buf, count, op, dt);
}

CommRequest Communicator::start_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op,
                                               DType dt) {
    record(CollectiveKind::kReduceScatter, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size, dt));
    if (m_size == 1) {
        copy_elements(in, out, count_per_rank, dt);
        return CommRequest{};
    }
    return do_start_reduce_scatter(in, out, count_per_rank, op, dt);
}

CommRequest Communicator::start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) {
    record(CollectiveKind::kAllGather, ring_bytes(count_per_rank * static_cast<size_t>(m_size), m_size, dt));
    if (m_size == 1) {
        copy_elements(in, out, count_per_rank, dt);
        return CommRequest{};
    }
    return do_start_all_gather(in, out, count_per_rank, dt);
}

void Communicator::wait(CommRequest& request) {
    if (!request.active()) return;
    PendingGuard g(*this, "wait (non-blocking collective)");
    const auto t0 = std::chrono::steady_clock::now();
    do_wait(request);
    m_stats.overlap.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++m_stats.overlap.waited;
    request.reset();
}

}  // namespace zt
