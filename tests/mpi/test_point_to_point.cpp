// Point-to-point messages over MPI (comm/point_to_point.hpp), the pipeline runner's link: a
// ring where every rank starts two sends to its successor and receives them in the other
// order (messages match by tag), and a send buffer that stays untouched until wait().
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "ztrain/comm/point_to_point.hpp"

namespace zt {
namespace {

TEST(MpiPointToPoint, MessagesMatchByTagAroundARing) {
    auto link = make_mpi_point_to_point(MPI_COMM_WORLD);
    const int n = link->size();
    const int me = link->rank();
    EXPECT_GE(link->max_tag(), 32767);
    const int next = (me + 1) % n;
    const int prev = (me + n - 1) % n;
    std::vector<float> first(1000, static_cast<float>(me));
    std::vector<float> second(10, static_cast<float>(100 + me));
    SendRequest a = link->start_send(first.data(), first.size() * sizeof(float), next, 1);
    SendRequest b = link->start_send(second.data(), second.size() * sizeof(float), next, 2);
    EXPECT_TRUE(a.active());
    std::vector<float> got_second(10, -1.f);
    std::vector<float> got_first(1000, -1.f);
    link->recv(got_second.data(), got_second.size() * sizeof(float), prev, 2);
    link->recv(got_first.data(), got_first.size() * sizeof(float), prev, 1);
    link->wait(a);
    link->wait(b);
    EXPECT_FALSE(a.active());
    link->wait(a);  // a completed request: nothing to do
    for (float v : got_first) ASSERT_EQ(v, static_cast<float>(prev)) << "tag 1 from rank " << prev;
    for (float v : got_second) ASSERT_EQ(v, static_cast<float>(100 + prev)) << "tag 2 from rank " << prev;
    // Request ids are reused once waited for.
    SendRequest c = link->start_send(first.data(), sizeof(float), next, 3);
    link->recv(got_first.data(), sizeof(float), prev, 3);
    link->wait(c);
    EXPECT_EQ(got_first[0], static_cast<float>(prev));
}

}  // namespace
}  // namespace zt
