// Choosing the communicator of a run (see include/ztrain/comm/comm_select.hpp).
#include "ztrain/comm/comm_select.hpp"

#include <cstdio>
#include <type_traits>

#include "ztrain/memory/device_memory.hpp"
#include "ztrain/comm/nccl_communicator.hpp"
#include "ztrain/comm/staged_communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/cuda_runtime/device.hpp"

namespace zt {
namespace {

bool known(const std::array<uint8_t, 16>& uuid) {
    for (uint8_t b : uuid) {
        if (b != 0) return true;
    }
    return false;
}

/// Why ranks cannot each have a GPU of their own ("" when they can).
std::string sharing(const std::vector<RankDevices>& ranks) {
    for (size_t a = 0; a < ranks.size(); ++a) {
        const RankDevices& r = ranks[a];
        if (!known(r.uuid) && r.local_size > r.device_count) {
            return str("rank ", a, "'s node runs ", r.local_size, " ranks on ", r.device_count, " GPU(s)");
        }
        for (size_t b = a + 1; b < ranks.size(); ++b) {
            if (known(r.uuid) && r.uuid == ranks[b].uuid) return str("ranks ", a, " and ", b, " share one GPU");
        }
    }
    return {};
}

}  // namespace

const char* comm_kind_name(CommKind kind) {
    switch (kind) {
        case CommKind::kMpi: return "mpi";
        case CommKind::kNccl: return "nccl";
        case CommKind::kStaged: return "staged";
    }
    return "?";
}

CommChoice choose_comm(bool cuda_backend, const std::vector<RankDevices>& ranks, bool nccl_available) {
    if (!cuda_backend) return {CommKind::kMpi, "cpu backend: MPI on host memory"};
    for (size_t r = 0; r < ranks.size(); ++r) {
        ZT_INPUT_CHECK(ranks[r].device_count > 0, "backend = cuda, but rank ", r, " sees no GPU");
    }
    const std::string shared = sharing(ranks);
    if (!shared.empty()) {
        return {CommKind::kStaged, shared + " (NCCL needs a GPU per rank): staging through host memory and MPI"};
    }
    if (!nccl_available) return {CommKind::kStaged, "built without NCCL: staging through host memory and MPI"};
    return {CommKind::kNccl, str("NCCL, one GPU per rank over ", ranks.size(), " rank(s)")};
}

CommChoice agree_comm(Communicator& comm, bool cuda_backend, const RankDevices& mine, bool nccl_available) {
    static_assert(std::is_trivially_copyable_v<RankDevices>, "sent as bytes");
    std::vector<RankDevices> all(static_cast<size_t>(comm.size()));
    comm.all_gather_bytes(&mine, all.data(), sizeof mine);
    return choose_comm(cuda_backend, all, nccl_available);
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend, MPI_Comm comm, void* compute_stream,
                                                const NodePlacement& node, const std::string& label) {
    ZT_REQUIRE(backend == "cpu" || backend == "cuda", "make_communicator: backend '", backend, "'");
    std::unique_ptr<Communicator> mpi = make_mpi_communicator(comm);
    const bool cuda = backend == "cuda";
    RankDevices mine;
    mine.local_size = node.local_size > 0 ? node.local_size : mpi->local_size();
    mine.device_count = cuda ? cuda_device_count() : 0;
    int device = -1;
    if (mine.device_count > 0) {
        device = local_device(node.local_rank >= 0 ? node.local_rank : mpi->local_rank(), mine.device_count);
        mine.uuid = cuda_device_uuid(device);
    }
    const CommChoice choice = agree_comm(*mpi, cuda, mine, nccl_built());
    if (mpi->rank() == 0 && !label.empty()) {
        std::printf("ztrain: %s communicator %s: %s\n", label.c_str(), comm_kind_name(choice.kind),
                    choice.reason.c_str());
        std::fflush(stdout);
    }
    switch (choice.kind) {
        case CommKind::kMpi: return mpi;
        case CommKind::kNccl: return make_nccl_communicator(std::move(mpi), compute_stream, device);
        case CommKind::kStaged:
            cuda_set_device(device);
            return make_staged_communicator(std::move(mpi), make_cuda_device_memory(compute_stream));
    }
    return mpi;
}

}  // namespace zt
