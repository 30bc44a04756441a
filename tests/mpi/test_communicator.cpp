// The MPI communicator on the shared collective suite (tests/support/collective_suite.hpp):
// blocking and non-blocking collectives on odd counts in every dtype, byte accounting; and
// what an error unwinding does to collectives already started.
#include "collective_suite.hpp"

namespace zt::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Mpi, CollectiveSuite,
                         ::testing::Values(CommCase{"mpi", [] { return make_mpi_communicator(MPI_COMM_WORLD); },
                                                    [] { return std::make_unique<HostTestMemory>(); }}),
                         case_name);

// An error unwinding calls end_outstanding before the buffers of started collectives are
// freed: MPI cannot cancel them, so they must be complete when it returns. Large enough
// (4 MiB per rank) that Open MPI moves it by rendezvous, which progresses only inside MPI
// calls: a no-op end_outstanding leaves the gather unfinished.
TEST(MpiEndOutstanding, CompletesAStartedGatherSoItsBuffersMayBeFreed) {
    std::unique_ptr<Communicator> comm = make_mpi_communicator(MPI_COMM_WORLD);
    const int N = comm->size();
    const int me = comm->rank();
    const size_t per = size_t{1} << 20;
    std::vector<float> in(per, static_cast<float>(me + 1));
    std::vector<float> out(per * static_cast<size_t>(N), -1.f);
    (void)comm->start_all_gather(in.data(), out.data(), per);  // never waited for: the error path
    comm->end_outstanding(60.0);
    for (int rank = 0; rank < N; ++rank) {
        const size_t at = per * static_cast<size_t>(rank);
        EXPECT_EQ(out[at], static_cast<float>(rank + 1)) << "first element of rank " << rank << "'s block";
        EXPECT_EQ(out[at + per - 1], static_cast<float>(rank + 1)) << "last element of rank " << rank << "'s block";
    }
    // The request is gone: the communicator's teardown has nothing left to wait for.
    comm.reset();
    MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace zt::test
