// The MPI communicator on the shared collective suite (tests/support/collective_suite.hpp):
// blocking and non-blocking collectives on odd counts in every dtype, byte accounting; and
// what an error unwinding does to collectives already started.
#include "collective_suite.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace zt::test {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Mpi, CollectiveSuite,
    ::testing::Values(CommCase{"mpi", [] { return make_mpi_communicator(MPI_COMM_WORLD); },
                               [] { return std::make_unique<HostTestMemory>(); }},
                      CommCase{"mpi_comm_thread", [] { return make_mpi_communicator(MPI_COMM_WORLD, true); },
                               [] { return std::make_unique<HostTestMemory>(); }}),
    case_name);

/// Values that make fp32 sums order-dependent: magnitudes spread over 2^-20..2^20.
std::vector<float> spread_values(int rank, size_t n) {
    std::vector<float> v(n);
    uint32_t x = 2463534242u + static_cast<uint32_t>(rank) * 7919u;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        const float unit = static_cast<float>(x % 1000003u) / 1000003.f - 0.5f;
        v[i] = std::ldexp(unit, static_cast<int>(x % 41u) - 20);
    }
    return v;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b, size_t* first_diff) {
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *first_diff = i;
            return false;
        }
    }
    return true;
}

// The communication thread runs the blocking calls: its started reduce-scatter and
// all-reduce give the blocking ones' fp32 sums bit for bit, at every world size (Open MPI's
// own non-blocking reduce-scatter does not at 3+ ranks).
TEST(MpiCommThread, StartedReductionsAreTheBlockingOnesBitForBit) {
    std::unique_ptr<Communicator> blocking = make_mpi_communicator(MPI_COMM_WORLD);
    std::unique_ptr<Communicator> engine = make_mpi_communicator(MPI_COMM_WORLD, true);
    const size_t N = static_cast<size_t>(blocking->size());
    const size_t per = 1000;
    const std::vector<float> in = spread_values(blocking->rank(), per * N);
    std::vector<float> want(per), got(per);
    blocking->reduce_scatter(in.data(), want.data(), per);
    CommRequest r = engine->start_reduce_scatter(in.data(), got.data(), per);
    engine->wait(r);
    size_t at = 0;
    EXPECT_TRUE(bits_equal(want, got, &at)) << "reduce_scatter element " << at << ": blocking " << want[at]
                                            << ", communication thread " << got[at];
    std::vector<float> sum_want = in, sum_got = in;
    blocking->all_reduce(sum_want.data(), sum_want.size());
    r = engine->start_all_reduce(sum_got.data(), sum_got.size());
    engine->wait(r);
    EXPECT_TRUE(bits_equal(sum_want, sum_got, &at)) << "all_reduce element " << at << ": blocking " << sum_want[at]
                                                    << ", communication thread " << sum_got[at];
    EXPECT_EQ(engine->stats().overlap.waited, 2u);
}

// Rank 0 computes (sleeps) for 1 s after starting three collectives; the others wait at
// once. With the communication thread every collective finishes while rank 0 computes: its
// collectives had finished before it waited (the engine's own record), and the other ranks
// waited less than the 1 s (bound 0.9 s, with small blocks and a long compute: several ranks
// oversubscribing loaded cores slow the copies a lot). Without progress during compute the
// others would wait the whole 1 s and rank 0 would find nothing finished.
TEST(MpiCommThread, StartedCollectivesFinishWhileARankComputes) {
    std::unique_ptr<Communicator> comm = make_mpi_communicator(MPI_COMM_WORLD, true);
    const int N = comm->size();
    const size_t per = size_t{1} << 16;  // 256 KiB per rank: rendezvous, no eager completion
    std::vector<float> block(per, static_cast<float>(comm->rank() + 1));
    std::vector<float> gathered(per * static_cast<size_t>(N));
    std::vector<float> full(per * static_cast<size_t>(N), 1.f), mine(per), sum(per, 1.f);
    MPI_Barrier(MPI_COMM_WORLD);
    CommRequest g = comm->start_all_gather(block.data(), gathered.data(), per);
    CommRequest rs = comm->start_reduce_scatter(full.data(), mine.data(), per);
    CommRequest ar = comm->start_all_reduce(sum.data(), per);
    if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    comm->wait(g);
    comm->wait(rs);
    comm->wait(ar);
    const CommStats::Overlap& o = comm->stats().overlap;
    if (comm->rank() == 0) {
        EXPECT_EQ(o.done_before_wait, 3u) << "of 3 collectives started before a 1 s compute, "
                                          << o.done_before_wait << " had finished when rank 0 waited";
    } else {
        EXPECT_LT(o.wait_s, 0.9) << "rank " << comm->rank() << " waited " << o.wait_s * 1e3
                                  << " ms for collectives its peer started before computing 1 s";
    }
    EXPECT_EQ(gathered[per * static_cast<size_t>(N - 1)], static_cast<float>(N));
    EXPECT_EQ(mine[0], static_cast<float>(N));
    EXPECT_EQ(sum[per - 1], static_cast<float>(N));
}

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
