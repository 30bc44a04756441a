// ZT_NCCL_CHECK: an NCCL call checked like ZT_CUDA_CHECK (the call, file and line in the
// message), and the bootstrap of an NCCL communicator. Private to comm/cuda.
#pragma once

#include <nccl.h>

#include <string>

#include "ztrain/cuda_runtime/cuda_check.hpp"

namespace zt::detail {
inline bool nccl_ok(ncclResult_t r) { return r == ncclSuccess; }
inline std::string nccl_error_string(ncclResult_t r) {
    const char* last = ncclGetLastError(nullptr);
    return str(ncclGetErrorString(r), last != nullptr && *last != '\0' ? str(" (", last, ")") : std::string());
}
}  // namespace zt::detail

/// Checks an NCCL call (ncclSuccess), naming the call, file and line like ZT_CUDA_CHECK.
#define ZT_NCCL_CHECK(expr) ZT_CHECK_GEN(expr, ::zt::detail::nccl_ok, ::zt::detail::nccl_error_string, "NCCL")

namespace zt::detail {
/// ncclCommInitRank for `rank` of `size`: rank 0 makes the unique id and sends it with its
/// status through `broadcast(buf, bytes)` (from rank 0, collective), so a failure there fails
/// every rank instead of leaving them waiting in ncclCommInitRank.
template <typename Broadcast>
ncclComm_t init_nccl_comm(int rank, int size, Broadcast broadcast) {
    struct {
        ncclUniqueId id;
        int ok;
    } boot{};
    if (rank == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
    broadcast(&boot, sizeof boot);
    ZT_REQUIRE(boot.ok == 1, "NCCL: rank 0 could not create the unique id (ncclGetUniqueId)");
    ncclComm_t comm = nullptr;
    ZT_NCCL_CHECK(ncclCommInitRank(&comm, size, boot.id, rank));
    return comm;
}
}  // namespace zt::detail
