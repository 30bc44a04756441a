// The device communicators on a GPU: the shared collective suite on device buffers through
// make_communicator("cuda") (NCCL with a GPU per rank, host staging when ranks share one),
// the staged communicator over CUDA memory explicitly, and the pipeline's NCCL point-to-point
// link. Skips without CUDA or a GPU;
// labelled gpu as well as mpi.
#include <gtest/gtest.h>

#include "ztrain/config.hpp"

#if ZT_HAVE_CUDA
#include <cuda_runtime.h>

#include "collective_suite.hpp"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/comm/comm_select.hpp"
#include "ztrain/memory/device_memory.hpp"
#include "ztrain/comm/nccl_communicator.hpp"
#include "ztrain/comm/point_to_point.hpp"
#include "ztrain/comm/staged_communicator.hpp"
#include "ztrain/core/error.hpp"

namespace zt::test {
namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw zt::Error(zt::str(what, ": ", cudaGetErrorString(e)));
}

/// Device buffers; copies on the legacy default stream, the communicators' compute stream
/// here (null), so a download after wait() sees the collective's result.
class CudaTestMemory final : public TestMemory {
  public:
    void* alloc(size_t bytes) override {
        void* p = nullptr;
        check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
        check(cudaMemset(p, 0, bytes > 0 ? bytes : 1), "cudaMemset");
        return p;
    }
    void free(void* p) override { cudaFree(p); }
    void upload(void* dst, const void* src, size_t bytes) override {
        check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload");
    }
    void download(void* dst, const void* src, size_t bytes) override {
        check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download");
    }
};

bool have_gpu() { return cuda_device_count() > 0; }

std::unique_ptr<Communicator> make_auto() {
    if (!have_gpu()) return nullptr;
    return make_communicator("cuda", MPI_COMM_WORLD, nullptr);
}

std::unique_ptr<Communicator> make_staged_cuda() {
    if (!have_gpu()) return nullptr;
    auto mpi = make_mpi_communicator(MPI_COMM_WORLD);
    cuda_set_device(local_device(mpi->local_rank(), cuda_device_count()));
    return make_staged_communicator(std::move(mpi), make_cuda_device_memory(nullptr));
}

/// NCCL itself, over groups of ranks that each hold a distinct GPU (ranks with the same
/// local_rank / device_count): real multi-rank NCCL with several GPUs, one-rank NCCL (init,
/// streams, the local copy) on a one-GPU machine, where make_auto stages instead.
std::unique_ptr<Communicator> make_nccl_groups() {
    if (!have_gpu() || !nccl_built()) return nullptr;
    auto world = make_mpi_communicator(MPI_COMM_WORLD);
    MPI_Comm group = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world->local_rank() / cuda_device_count(), world->rank(), &group);
    auto host = make_mpi_communicator(group);  // duplicates `group`
    MPI_Comm_free(&group);
    return make_nccl_communicator(std::move(host), nullptr);
}

std::unique_ptr<TestMemory> cuda_memory() { return std::make_unique<CudaTestMemory>(); }

INSTANTIATE_TEST_SUITE_P(Device, CollectiveSuite,
                         ::testing::Values(CommCase{"auto", make_auto, cuda_memory},
                                           CommCase{"staged_cuda", make_staged_cuda, cuda_memory},
                                           CommCase{"nccl_groups", make_nccl_groups, cuda_memory}),
                         case_name);

TEST(DeviceCommunicator, AutoPicksNcclOnlyWithAGpuPerRank) {
    if (!have_gpu()) GTEST_SKIP() << "no GPU";
    auto comm = make_auto();
    const bool shared = comm->local_size() > cuda_device_count();
    EXPECT_EQ(comm->name(), shared ? "staged(cuda)" : "nccl");
}

// The pipeline's NCCL link (comm/point_to_point.hpp) between ranks that each hold a distinct
// GPU: a ring of device buffers, each rank's sent values arriving at its successor. NCCL
// cannot pair a rank with itself outside a group call, so it needs two GPUs.
TEST(NcclPointToPoint, RingPassesDeviceBuffers) {
    if (!have_gpu() || !nccl_point_to_point_built()) GTEST_SKIP() << "no GPU or no NCCL";
    auto world = make_mpi_communicator(MPI_COMM_WORLD);
    MPI_Comm group = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world->local_rank() / cuda_device_count(), world->rank(), &group);
    int n = 0;
    MPI_Comm_size(group, &n);
    if (n < 2) {
        MPI_Comm_free(&group);
        GTEST_SKIP() << "needs 2 GPUs (ranks of a ring on distinct GPUs)";
    }
    cuda_set_device(local_device(world->local_rank(), cuda_device_count()));
    auto link = make_nccl_point_to_point(group, nullptr);
    const int me = link->rank();
    CudaTestMemory mem;
    const size_t count = 4096;
    std::vector<float> host(count, static_cast<float>(me + 1));
    void* out = mem.alloc(count * sizeof(float));
    void* in = mem.alloc(count * sizeof(float));
    mem.upload(out, host.data(), count * sizeof(float));
    SendRequest r = link->start_send(out, count * sizeof(float), (me + 1) % n, 0);
    link->recv(in, count * sizeof(float), (me + n - 1) % n, 0);
    link->wait(r);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    mem.download(host.data(), in, count * sizeof(float));
    const int prev = (me + n - 1) % n;
    for (float v : host) ASSERT_EQ(v, static_cast<float>(prev + 1)) << "from rank " << prev;
    link.reset();
    mem.free(out);
    mem.free(in);
    MPI_Comm_free(&group);
}

}  // namespace
}  // namespace zt::test

#else
TEST(DeviceCommunicator, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA"; }
#endif
