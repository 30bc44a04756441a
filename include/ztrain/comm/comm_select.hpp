// Which communicator a run uses, decided the same way on every rank.
//
//   cpu backend                                   -> mpi     (host buffers)
//   cuda backend, every rank on its own GPU       -> nccl
//   cuda backend, ranks sharing a GPU (or no NCCL) -> staged  (device -> pinned host -> MPI)
//
// NCCL refuses two ranks on one device and every rank must use the same kind, so the
// decision is made from every rank's report (gathered over MPI) by one pure function.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "ztrain/comm/communicator.hpp"
// local_device, named in the contract below, is the CUDA runtime helpers'.
#include "ztrain/cuda_runtime/device.hpp"

namespace zt {

enum class CommKind { kMpi, kNccl, kStaged };
const char* comm_kind_name(CommKind kind);  ///< "mpi", "nccl", "staged"

/// What one rank sees: the ranks on its node, the GPUs visible to it, and the UUID of the
/// GPU it will use (all zero when unknown).
struct RankDevices {
    int32_t local_size = 1;
    int32_t device_count = 0;
    std::array<uint8_t, 16> uuid{};
};

struct CommChoice {
    CommKind kind = CommKind::kMpi;
    std::string reason;  ///< one line for the log
};

/// The decision from every rank's report (index = rank). Ranks share a GPU when two report
/// the same UUID, or, where a UUID is unknown, when a node has more ranks than GPUs.
/// Throws InputError when a cuda run has a rank that sees no GPU.
CommChoice choose_comm(bool cuda_backend, const std::vector<RankDevices>& ranks, bool nccl_available);

/// Collective: gathers `mine` from every rank of `comm` and decides; the same answer on all.
CommChoice agree_comm(Communicator& comm, bool cuda_backend, const RankDevices& mine, bool nccl_available);

/// Where this rank sits on its node, for a communicator over part of the job (a shard or
/// replica group, whose own node split says nothing about the node): its node-local rank
/// picks the device, the node's rank count says whether ranks share GPUs. -1: `comm`'s own.
struct NodePlacement {
    int local_rank = -1;
    int local_size = -1;
};

/// The communicator for a run over `comm` (collective). `backend` is the resolved backend,
/// "cpu" or "cuda"; `compute_stream` is the CUDA backend's stream (ignored on the cpu).
/// For cuda it selects this rank's device (local_device) first. With a non-empty `label`,
/// rank 0 of `comm` prints the choice, naming it.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, MPI_Comm comm, void* compute_stream,
                                                const NodePlacement& node = {}, const std::string& label = "run");

}  // namespace zt
