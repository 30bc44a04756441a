// Communicator collectives, blocking and non-blocking, on odd counts; byte accounting.
#include <gtest/gtest.h>

#include <vector>

#include "ztrain/comm/communicator.hpp"

namespace zt {
namespace {

float value(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 997)) * 0.5f; }

TEST(Communicator, AllReduceSumAndMaxOnOddCounts) {
    auto comm_owner = make_mpi_communicator(MPI_COMM_WORLD);
    Communicator& comm = *comm_owner;
    const int N = comm.size();
    for (size_t count : {size_t{1}, size_t{7}, size_t{1001}}) {
        std::vector<float> buf(count);
        for (size_t i = 0; i < count; ++i) buf[i] = value(comm.rank(), i);
        std::vector<float> mx = buf;
        comm.all_reduce(buf.data(), count);
        comm.all_reduce(mx.data(), count, ReduceOp::kMax);
        for (size_t i = 0; i < count; ++i) {
            float want = 0.f;
            for (int r = 0; r < N; ++r) want += value(r, i);
            EXPECT_EQ(buf[i], want) << "sum, count " << count << " element " << i;
            EXPECT_EQ(mx[i], value(N - 1, i)) << "max, count " << count << " element " << i;
        }
    }
}

TEST(Communicator, ReduceScatterAndAllGatherOnOddCounts) {
    auto comm_owner = make_mpi_communicator(MPI_COMM_WORLD);
    Communicator& comm = *comm_owner;
    const int N = comm.size();
    const int me = comm.rank();
    for (size_t per : {size_t{1}, size_t{3}, size_t{333}}) {
        std::vector<float> in(per * static_cast<size_t>(N));
        for (size_t i = 0; i < in.size(); ++i) in[i] = value(me, i);
        std::vector<float> out(per);
        comm.reduce_scatter(in.data(), out.data(), per);
        for (size_t i = 0; i < per; ++i) {
            const size_t g = static_cast<size_t>(me) * per + i;
            float want = 0.f;
            for (int r = 0; r < N; ++r) want += value(r, g);
            EXPECT_EQ(out[i], want) << "reduce_scatter per-rank " << per << " element " << i;
        }
        // All-gather, out of place and in place.
        std::vector<float> mine(per), gathered(per * static_cast<size_t>(N)), inplace(per * static_cast<size_t>(N), -1.f);
        for (size_t i = 0; i < per; ++i) {
            mine[i] = value(me, i);
            inplace[static_cast<size_t>(me) * per + i] = value(me, i);
        }
        comm.all_gather(mine.data(), gathered.data(), per);
        comm.all_gather(nullptr, inplace.data(), per);
        for (int r = 0; r < N; ++r) {
            for (size_t i = 0; i < per; ++i) {
                EXPECT_EQ(gathered[static_cast<size_t>(r) * per + i], value(r, i)) << "rank block " << r << " element " << i;
                EXPECT_EQ(inplace[static_cast<size_t>(r) * per + i], value(r, i)) << "in place, block " << r;
            }
        }
    }
}

TEST(Communicator, NonBlockingFormsMatchBlockingOnes) {
    auto comm_owner = make_mpi_communicator(MPI_COMM_WORLD);
    Communicator& comm = *comm_owner;
    const int N = comm.size();
    const size_t per = 37;
    std::vector<float> a(per * static_cast<size_t>(N)), rs(per), ag(per * static_cast<size_t>(N));
    for (size_t i = 0; i < a.size(); ++i) a[i] = value(comm.rank(), i);
    std::vector<float> ar = a;
    CommRequest r1 = comm.start_all_reduce(ar.data(), ar.size());
    CommRequest r2 = comm.start_reduce_scatter(a.data(), rs.data(), per);
    CommRequest r3 = comm.start_all_gather(a.data(), ag.data(), per);
    comm.wait(r1);
    comm.wait(r2);
    comm.wait(r3);
    EXPECT_FALSE(r1.active());
    std::vector<float> ar_ref = a, rs_ref(per), ag_ref(ag.size());
    comm.all_reduce(ar_ref.data(), ar_ref.size());
    comm.reduce_scatter(a.data(), rs_ref.data(), per);
    comm.all_gather(a.data(), ag_ref.data(), per);
    EXPECT_EQ(ar, ar_ref);
    EXPECT_EQ(rs, rs_ref);
    EXPECT_EQ(ag, ag_ref);
}

TEST(Communicator, BroadcastAndScalars) {
    auto comm_owner = make_mpi_communicator(MPI_COMM_WORLD);
    Communicator& comm = *comm_owner;
    std::vector<float> b(5, static_cast<float>(comm.rank()));
    comm.broadcast(b.data(), b.size(), comm.size() - 1);
    for (float x : b) EXPECT_EQ(x, static_cast<float>(comm.size() - 1));
    double s[2] = {1.0, static_cast<double>(comm.rank())};
    comm.all_reduce_scalars(s, 2);
    EXPECT_EQ(s[0], comm.size());
    EXPECT_EQ(s[1], comm.size() * (comm.size() - 1) / 2.0);
    comm.barrier();
}

TEST(Communicator, CountsBytesPerKindAsRingVolumes) {
    auto comm_owner = make_mpi_communicator(MPI_COMM_WORLD);
    Communicator& comm = *comm_owner;
    const uint64_t N = static_cast<uint64_t>(comm.size());
    const size_t per = 64;
    std::vector<float> full(per * N), part(per);
    comm.reset_stats();
    comm.all_reduce(full.data(), full.size());
    comm.reduce_scatter(full.data(), part.data(), per);
    comm.all_gather(part.data(), full.data(), per);
    comm.all_gather(part.data(), full.data(), per);
    const uint64_t ring = per * N * 4 * (N - 1) / N;
    EXPECT_EQ(comm.stats().bytes(CollectiveKind::kAllReduce), 2 * ring);
    EXPECT_EQ(comm.stats().bytes(CollectiveKind::kReduceScatter), ring);
    EXPECT_EQ(comm.stats().bytes(CollectiveKind::kAllGather), 2 * ring);
    EXPECT_EQ(comm.stats().calls(CollectiveKind::kAllGather), 2u);
    EXPECT_GE(comm.local_size(), 1);
    EXPECT_LT(comm.local_rank(), comm.local_size());
}

}  // namespace
}  // namespace zt
