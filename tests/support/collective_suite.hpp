// One collective test suite for every Communicator implementation (MPI, host-staged, NCCL).
//
// An MPI test file includes this header and instantiates CollectiveSuite with the
// communicators it covers; buffers live in the communicator's memory space through a
// TestMemory (host memory here, device memory in the GPU test). Values are small integers,
// exact in bf16 and fp16 and in every partial sum, so each dtype's result is compared
// exactly with the rounded fp32 reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt::test {

/// Allocation and host transfers for the buffers passed to a communicator.
class TestMemory {
  public:
    virtual ~TestMemory() = default;
    virtual void* alloc(size_t bytes) = 0;
    virtual void free(void* p) = 0;
    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;
};

class HostTestMemory final : public TestMemory {
  public:
    void* alloc(size_t bytes) override { return std::calloc(bytes > 0 ? bytes : 1, 1); }
    void free(void* p) override { std::free(p); }
    void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

struct CommCase {
    std::string name;
    std::function<std::unique_ptr<Communicator>()> make;  ///< null result: skip
    std::function<std::unique_ptr<TestMemory>()> memory;
};
inline std::string case_name(const ::testing::TestParamInfo<CommCase>& info) { return info.param.name; }

/// Value of element i on `rank`: a small integer (|x| <= 24), so sums over 4 ranks are exact
/// in bf16 (8 significant bits) and fp16.
inline float test_value(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 7) - 3 * rank); }

/// `n` elements of dtype `dt` in the communicator's memory space, filled from / read as fp32.
class Buffer {
  public:
    Buffer(TestMemory& memory, size_t n, DType dt)
        : m_memory(memory), m_n(n), m_dt(dt), m_ptr(memory.alloc(n * dtype_size(dt))) {}
    ~Buffer() { m_memory.free(m_ptr); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    void* get() { return m_ptr; }
    char* at(size_t element) { return static_cast<char*>(m_ptr) + element * dtype_size(m_dt); }
    void set(const std::vector<float>& values) {
        std::vector<char> raw(values.size() * dtype_size(m_dt));
        convert_from_f32(values.data(), raw.data(), values.size(), m_dt);
        m_memory.upload(m_ptr, raw.data(), raw.size());
    }
    std::vector<float> get_values() {
        std::vector<char> raw(m_n * dtype_size(m_dt));
        m_memory.download(raw.data(), m_ptr, raw.size());
        std::vector<float> out(m_n);
        convert_to_f32(raw.data(), out.data(), m_n, m_dt);
        return out;
    }

  private:
    TestMemory& m_memory;
    size_t m_n;
    DType m_dt;
    void* m_ptr;
};

class CollectiveSuite : public ::testing::TestWithParam<CommCase> {
  protected:
    void SetUp() override {
        comm = GetParam().make();
        // Null: not available on this machine (decided alike on every rank).
        if (!comm) GTEST_SKIP() << GetParam().name << " is not available here";
        memory = GetParam().memory();
        N = comm->size();
        me = comm->rank();
    }
    /// The values of `rank` for elements [first, first + n).
    static std::vector<float> values(int rank, size_t n, size_t first = 0) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = test_value(rank, first + i);
        return v;
    }
    std::vector<float> sum_over_ranks(size_t n, size_t first = 0) const {
        std::vector<float> v(n, 0.f);
        for (int r = 0; r < N; ++r) {
            for (size_t i = 0; i < n; ++i) v[i] += test_value(r, first + i);
        }
        return v;
    }
    std::vector<float> max_over_ranks(size_t n) const {
        std::vector<float> v = values(0, n);
        for (int r = 1; r < N; ++r) {
            for (size_t i = 0; i < n; ++i) v[i] = std::max(v[i], test_value(r, i));
        }
        return v;
    }
    std::vector<float> gathered(size_t per) const {
        std::vector<float> v;
        for (int r = 0; r < N; ++r) {
            const std::vector<float> block = values(r, per);
            v.insert(v.end(), block.begin(), block.end());
        }
        return v;
    }

    std::unique_ptr<Communicator> comm;
    std::unique_ptr<TestMemory> memory;
    int N = 1;
    int me = 0;
};

inline const DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST_P(CollectiveSuite, AllReduceSumAndMaxEveryDTypeOnOddCounts) {
    for (DType dt : kAllDTypes) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{1001}}) {
            Buffer sum(*memory, count, dt), mx(*memory, count, dt);
            sum.set(values(me, count));
            mx.set(values(me, count));
            comm->all_reduce(sum.get(), count, ReduceOp::kSum, dt);
            comm->all_reduce(mx.get(), count, ReduceOp::kMax, dt);
            EXPECT_EQ(sum.get_values(), sum_over_ranks(count)) << dtype_name(dt) << " sum, count " << count;
            EXPECT_EQ(mx.get_values(), max_over_ranks(count)) << dtype_name(dt) << " max, count " << count;
        }
    }
}

TEST_P(CollectiveSuite, ReduceScatterAndAllGatherEveryDTypeOnOddCounts) {
    for (DType dt : kAllDTypes) {
        for (size_t per : {size_t{1}, size_t{3}, size_t{333}}) {
            const size_t total = per * static_cast<size_t>(N);
            Buffer in(*memory, total, dt), out(*memory, per, dt);
            in.set(values(me, total));
            comm->reduce_scatter(in.get(), out.get(), per, ReduceOp::kSum, dt);
            EXPECT_EQ(out.get_values(), sum_over_ranks(per, static_cast<size_t>(me) * per))
                << dtype_name(dt) << " reduce_scatter, per-rank " << per;

            // All-gather out of place and in place (this rank's block already in `out`).
            Buffer mine(*memory, per, dt), all(*memory, total, dt), inplace(*memory, total, dt);
            mine.set(values(me, per));
            std::vector<float> own(total, -1.f);
            for (size_t i = 0; i < per; ++i) own[static_cast<size_t>(me) * per + i] = test_value(me, i);
            inplace.set(own);
            comm->all_gather(mine.get(), all.get(), per, dt);
            comm->all_gather(nullptr, inplace.get(), per, dt);
            EXPECT_EQ(all.get_values(), gathered(per)) << dtype_name(dt) << " all_gather, per-rank " << per;
            EXPECT_EQ(inplace.get_values(), gathered(per)) << dtype_name(dt) << " in place, per-rank " << per;
        }
    }
}

// Several collectives in flight while the caller runs blocking ones and touches other
// buffers, finished in another order than started: each result is still its own.
TEST_P(CollectiveSuite, NonBlockingWithWorkBeforeFinish) {
    for (DType dt : kAllDTypes) {
        const size_t per = 37;
        const size_t total = per * static_cast<size_t>(N);
        // Odd and not a multiple of N: 37N + 1 for even N, 37N + 2 for odd N (N > 2).
        const size_t ar_count = total + (N % 2 == 0 ? 1 : 2);
        Buffer ar(*memory, ar_count, dt), rs_in(*memory, total, dt), rs_out(*memory, per, dt);
        Buffer ag_out(*memory, total, dt), ag_in(*memory, per, dt), other(*memory, 11, dt), scratch(*memory, 5, dt);
        ar.set(values(me, ar_count));
        rs_in.set(values(me, total));
        ag_in.set(values(me, per));
        other.set(values(me, 11));
        CommRequest r1 = comm->start_all_reduce(ar.get(), ar_count, ReduceOp::kSum, dt);
        CommRequest r2 = comm->start_reduce_scatter(rs_in.get(), rs_out.get(), per, ReduceOp::kSum, dt);
        CommRequest r3 = comm->start_all_gather(ag_in.get(), ag_out.get(), per, dt);
        comm->all_reduce(other.get(), 11, ReduceOp::kSum, dt);
        scratch.set(std::vector<float>(5, 9.f));
        double flag = 1.0;
        comm->all_reduce_scalars(&flag, 1);
        comm->wait(r3);
        comm->wait(r1);
        comm->wait(r2);
        EXPECT_FALSE(r1.active());
        EXPECT_EQ(ar.get_values(), sum_over_ranks(ar_count)) << dtype_name(dt);
        EXPECT_EQ(rs_out.get_values(), sum_over_ranks(per, static_cast<size_t>(me) * per)) << dtype_name(dt);
        EXPECT_EQ(ag_out.get_values(), gathered(per)) << dtype_name(dt);
        EXPECT_EQ(other.get_values(), sum_over_ranks(11)) << dtype_name(dt);
        EXPECT_EQ(scratch.get_values(), std::vector<float>(5, 9.f));
        EXPECT_EQ(flag, N);
    }
}

TEST_P(CollectiveSuite, BroadcastBytesScalarsAndBarrier) {
    Buffer b(*memory, 5, DType::kF32);
    b.set(std::vector<float>(5, static_cast<float>(me)));
    comm->broadcast(static_cast<float*>(b.get()), 5, N - 1);
    EXPECT_EQ(b.get_values(), std::vector<float>(5, static_cast<float>(N - 1)));
    // Byte and scalar calls take host memory whatever the communicator.
    int token = me == 0 ? 42 : -1;
    comm->broadcast_bytes(&token, sizeof token, 0);
    EXPECT_EQ(token, 42);
    std::vector<int> ranks(static_cast<size_t>(N), -1);
    comm->all_gather_bytes(&me, ranks.data(), sizeof me);
    for (int r = 0; r < N; ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)], r);
    double s[2] = {1.0, static_cast<double>(me)};
    comm->all_reduce_scalars(s, 2);
    EXPECT_EQ(s[0], N);
    EXPECT_EQ(s[1], N * (N - 1) / 2.0);
    comm->barrier();
}

// Each call is counted once, at ring volume in its dtype's bytes, blocking or not.
TEST_P(CollectiveSuite, CountsBytesOncePerCallAsRingVolumes) {
    const uint64_t n = static_cast<uint64_t>(N);
    const size_t per = 64;
    Buffer full(*memory, per * static_cast<size_t>(N), DType::kF32), part(*memory, per, DType::kF32);
    Buffer half(*memory, per * static_cast<size_t>(N), DType::kBF16);
    comm->reset_stats();
    comm->all_reduce(full.get(), per * n);
    comm->reduce_scatter(full.get(), part.get(), per);
    comm->all_gather(part.get(), full.get(), per);
    CommRequest r = comm->start_all_gather(part.get(), full.get(), per);
    comm->wait(r);
    r = comm->start_all_reduce(half.get(), per * n, ReduceOp::kSum, DType::kBF16);
    comm->wait(r);
    const uint64_t ring = per * n * 4 * (n - 1) / n;
    EXPECT_EQ(comm->stats().bytes(CollectiveKind::kAllReduce), 2 * ring + ring);  // fp32 + bf16 (half)
    EXPECT_EQ(comm->stats().calls(CollectiveKind::kAllReduce), 2u);
    EXPECT_EQ(comm->stats().bytes(CollectiveKind::kReduceScatter), ring);
    EXPECT_EQ(comm->stats().bytes(CollectiveKind::kAllGather), 2 * ring);
    EXPECT_EQ(comm->stats().calls(CollectiveKind::kAllGather), 2u);
    EXPECT_EQ(comm->stats().calls(CollectiveKind::kBarrier), 0u);
    // A count that does not divide by N: an all-reduce is a reduce-scatter plus an all-gather,
    // each c (N-1)/N elements, rounded down in bytes.
    comm->reset_stats();
    const uint64_t odd = 37;
    comm->all_reduce(full.get(), odd);
    EXPECT_EQ(comm->stats().bytes(CollectiveKind::kAllReduce), 2 * (odd * 4 * (n - 1) / n));
    // All ranks of this test run on one node: local rank and size are the world's.
    EXPECT_EQ(comm->local_size(), N);
    EXPECT_EQ(comm->local_rank(), me);
    EXPECT_GE(comm->local_size(), 1);
    EXPECT_LT(comm->local_rank(), comm->local_size());
}

}  // namespace zt::test
