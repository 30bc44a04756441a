// Choosing the communicator: the pure decision, its agreement across ranks, and the
// factory on this machine.
#include <gtest/gtest.h>

#include <vector>

#include "ztrain/comm/comm_select.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#if ZT_HAVE_CUDA
#include "ztrain/cuda_runtime/device.hpp"
#endif

namespace zt {
namespace {

RankDevices node_rank(int local_size, int devices, uint8_t gpu = 0) {
    RankDevices r;
    r.local_size = local_size;
    r.device_count = devices;
    r.uuid[15] = gpu;  // 0: unknown
    return r;
}

TEST(ChooseComm, CpuBackendIsMpiWhateverTheDevices) {
    EXPECT_EQ(choose_comm(false, {node_rank(4, 0), node_rank(4, 0)}, true).kind, CommKind::kMpi);
    EXPECT_EQ(choose_comm(false, {node_rank(2, 8, 1), node_rank(2, 8, 1)}, true).kind, CommKind::kMpi);
}

TEST(ChooseComm, OneGpuPerRankIsNccl) {
    // Two nodes of two ranks, two GPUs each; UUIDs unknown and known.
    EXPECT_EQ(choose_comm(true, {node_rank(2, 2), node_rank(2, 2), node_rank(2, 2), node_rank(2, 2)}, true).kind,
              CommKind::kNccl);
    EXPECT_EQ(choose_comm(true, {node_rank(2, 2, 1), node_rank(2, 2, 2)}, true).kind, CommKind::kNccl);
    // More GPUs than ranks is fine.
    EXPECT_EQ(choose_comm(true, {node_rank(2, 8), node_rank(2, 8)}, true).kind, CommKind::kNccl);
}

TEST(ChooseComm, RanksSharingAGpuAreStaged) {
    const CommChoice c = choose_comm(true, {node_rank(4, 1), node_rank(4, 1), node_rank(4, 1), node_rank(4, 1)}, true);
    EXPECT_EQ(c.kind, CommKind::kStaged);
    EXPECT_NE(c.reason.find("4 ranks on 1 GPU"), std::string::npos) << c.reason;
    // One crowded node is enough to stage everywhere: every rank must use the same kind.
    EXPECT_EQ(choose_comm(true, {node_rank(1, 1), node_rank(3, 2), node_rank(3, 2), node_rank(3, 2)}, true).kind,
              CommKind::kStaged);
    // Same UUID on two ranks: shared, whatever the counts say.
    const CommChoice u = choose_comm(true, {node_rank(2, 2, 7), node_rank(2, 2, 7)}, true);
    EXPECT_EQ(u.kind, CommKind::kStaged);
    EXPECT_NE(u.reason.find("ranks 0 and 1 share one GPU"), std::string::npos) << u.reason;
}

TEST(ChooseComm, KnownDistinctUuidsOverrideCounts) {
    // CUDA_VISIBLE_DEVICES per task: each rank sees one GPU, but they are different GPUs.
    EXPECT_EQ(choose_comm(true, {node_rank(2, 1, 1), node_rank(2, 1, 2)}, true).kind, CommKind::kNccl);
}

TEST(ChooseComm, WithoutNcclStaged) {
    const CommChoice c = choose_comm(true, {node_rank(2, 2), node_rank(2, 2)}, false);
    EXPECT_EQ(c.kind, CommKind::kStaged);
    EXPECT_NE(c.reason.find("without NCCL"), std::string::npos) << c.reason;
}

TEST(ChooseComm, RankWithoutGpuIsBadInput) {
    try {
        choose_comm(true, {node_rank(2, 2), node_rank(2, 0)}, true);
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 sees no GPU"), std::string::npos) << e.what();
    }
}

TEST(ChooseComm, LocalDeviceWrapsOverTheNodesGpus) {
    EXPECT_EQ(local_device(0, 4), 0);
    EXPECT_EQ(local_device(5, 4), 1);
    EXPECT_EQ(local_device(3, 1), 0);
    EXPECT_THROW(local_device(0, 0), Error);
}

// Ranks that disagree locally still agree on one kind once the reports are gathered.
TEST(AgreeComm, EveryRankGetsTheSameKind) {
    auto comm = make_mpi_communicator(MPI_COMM_WORLD);
    const int me = comm->rank();
    // Rank 0 alone would pick NCCL (8 GPUs); the others share one GPU per node.
    const RankDevices mine = node_rank(comm->size(), me == 0 ? 8 : 1);
    const CommChoice c = agree_comm(*comm, true, mine, true);
    EXPECT_EQ(c.kind, CommKind::kStaged);
    double kind = static_cast<double>(c.kind), lo = kind;
    comm->all_reduce_scalars(&kind, 1, ReduceOp::kMax);
    EXPECT_EQ(kind, lo) << "ranks chose different kinds";
    // Each rank its own GPU (distinct UUIDs): NCCL everywhere.
    const RankDevices own = node_rank(comm->size(), 1, static_cast<uint8_t>(me + 1));
    EXPECT_EQ(agree_comm(*comm, true, own, true).kind, CommKind::kNccl);
    // One rank without a GPU: every rank rejects the run (none is left in a collective).
    EXPECT_THROW(agree_comm(*comm, true, node_rank(comm->size(), me == 1 ? 0 : 4), true), InputError);
}

TEST(MakeCommunicator, CpuIsMpi) {
    auto comm = make_communicator("cpu", MPI_COMM_WORLD, nullptr);
    EXPECT_EQ(comm->name(), "mpi");
    double one = 1.0;
    comm->all_reduce_scalars(&one, 1);
    EXPECT_EQ(one, comm->size());
}

TEST(MakeCommunicator, CudaWithoutGpuIsRejectedOnEveryRank) {
#if ZT_HAVE_CUDA
    if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: tests/mpi/test_nccl_communicator covers it";
#endif
    EXPECT_THROW(make_communicator("cuda", MPI_COMM_WORLD, nullptr), InputError);
}

}  // namespace
}  // namespace zt
