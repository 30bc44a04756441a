// The host-staged communicator over host "device" memory (copies deferred to synchronize(),
// as on a stream): the shared collective suite, plus what staging adds.
#include "collective_suite.hpp"
#include "ztrain/memory/device_memory.hpp"
#include "ztrain/comm/staged_communicator.hpp"

namespace zt::test {
namespace {

std::unique_ptr<Communicator> make_staged(MPI_Comm comm) {
    return make_staged_communicator(make_mpi_communicator(comm), make_host_device_memory(HostCopyTiming::kAtSynchronize));
}

INSTANTIATE_TEST_SUITE_P(Staged, CollectiveSuite,
                         ::testing::Values(CommCase{"staged", [] { return make_staged(MPI_COMM_WORLD); },
                                                    [] { return std::make_unique<HostTestMemory>(); }}),
                         case_name);

TEST(StagedCommunicator, InputReusableAsSoonAsStarted) {
    auto comm = make_staged(MPI_COMM_WORLD);
    const int N = comm->size();
    const size_t per = 5;
    std::vector<float> in(per * static_cast<size_t>(N)), out(per), mine(per), all(per * static_cast<size_t>(N));
    for (size_t i = 0; i < in.size(); ++i) in[i] = test_value(comm->rank(), i);
    for (size_t i = 0; i < per; ++i) mine[i] = test_value(comm->rank(), i);
    CommRequest rs = comm->start_reduce_scatter(in.data(), out.data(), per);
    CommRequest ag = comm->start_all_gather(mine.data(), all.data(), per);
    std::fill(in.begin(), in.end(), 1000.f);  // the caller's next micro-step overwrites them
    std::fill(mine.begin(), mine.end(), 1000.f);
    comm->wait(ag);
    comm->wait(rs);
    for (size_t i = 0; i < per; ++i) {
        float want = 0.f;
        for (int r = 0; r < N; ++r) want += test_value(r, static_cast<size_t>(comm->rank()) * per + i);
        EXPECT_EQ(out[i], want) << i;
    }
    for (int r = 0; r < N; ++r) {
        for (size_t i = 0; i < per; ++i) EXPECT_EQ(all[static_cast<size_t>(r) * per + i], test_value(r, i));
    }
}

TEST(StagedCommunicator, OneRankCopiesThroughDeviceMemory) {
    auto comm = make_staged(MPI_COMM_SELF);
    ASSERT_EQ(comm->size(), 1);
    std::vector<float> in = {1.f, 2.f, 3.f}, out(3, 0.f), all(3, 0.f);
    comm->reduce_scatter(in.data(), out.data(), 3);
    comm->all_gather(in.data(), all.data(), 3);
    EXPECT_EQ(out, in);
    EXPECT_EQ(all, in);
}

TEST(StagedCommunicator, UnfinishedRequestsAreSafeAtDestruction) {
    auto comm = make_staged(MPI_COMM_WORLD);
    std::vector<float> buf(100, 1.f);
    CommRequest r = comm->start_all_reduce(buf.data(), buf.size());
    (void)r;
    comm.reset();  // completes the MPI request before freeing the staging buffer
    SUCCEED();
}

TEST(StagedCommunicator, NameSaysStagedAndMemory) {
    auto comm = make_staged(MPI_COMM_WORLD);
    EXPECT_EQ(comm->name(), "staged(host)");
}

}  // namespace
}  // namespace zt::test
