// Tensor parallelism (parallel.tensor = T): the world is a mesh of replica x shard x tensor
// ranks, T consecutive ranks splitting every block's products, the embedding and the LM head.
// - Equivalence: T ranks per tensor group, with ZeRO stages 0-3 over the N/T data-parallel
//   ranks, match one rank training the same global batch (N/T-way accumulation), GPT-2 and
//   Llama (KV heads split), each rank's slices compared with the same elements of the
//   one-rank model.
// - Whole tensors (norms, row-parallel biases, positions) stay bit-identical on every rank of
//   a tensor group: their gradients come from the group's sums on each rank alike.
// - Bytes: the tensor group's all-reduces per micro-step, exactly: 2 per block forward and 2
//   backward of (B, T, C) elements, one each for the embedding and the LM head's input
//   gradient, and the cross-entropy's row maxima and sums (3 floats per token).
// Cases whose T or data-parallel shape does not fit the job's N are skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt {
namespace {

struct TensorCase {
    int tensor;
    int stage;
    bool llama = false;
    int shard_group = 0;  // 0: all data-parallel ranks
};

std::string case_name(const TensorCase& c) {
    return std::string(c.llama ? "llama" : "gpt2") + "_tensor" + std::to_string(c.tensor) + "_stage" +
           std::to_string(c.stage) + (c.shard_group > 0 ? "_groups_of_" + std::to_string(c.shard_group) : "");
}

/// The tiny model with heads enough for T: GPT-2 4 heads of 6; Llama 2T query heads of 4
/// sharing T KV heads (grouped-query attention, each rank holding one KV head), SwiGLU width 40.
Config tensor_config(const TensorCase& c, const std::string& train, const std::string& run) {
    Config cfg = test::tiny_mpi_config(train, run);
    cfg.model.n_head = 4;
    if (c.llama) {
        cfg = test::as_llama(cfg);
        cfg.model.n_head = 2 * c.tensor;
        cfg.model.n_kv_head = c.tensor;
        cfg.model.n_embd = 8 * c.tensor;  // head size 4 at T = 4 (rotary needs it even)
    }
    cfg.parallel.zero_stage = c.stage;
    cfg.parallel.shard_group.ranks = c.shard_group;
    return cfg;
}

/// Offset of every unit's first element in collect_params' concatenation.
std::vector<size_t> unit_bases(const ModelLayout& layout) {
    std::vector<size_t> base(static_cast<size_t>(layout.num_units()) + 1, 0);
    for (int u = 0; u < layout.num_units(); ++u) {
        base[static_cast<size_t>(u) + 1] = base[static_cast<size_t>(u)] + layout.unit_numel[static_cast<size_t>(u)];
    }
    return base;
}

/// This rank's final parameters (its split's units, concatenated) against the same elements
/// of the one-rank run's, at expect_matches_reference's tolerance.
void expect_slices_match(const ModelConfig& mc, TensorSplit split, const std::vector<float>& got,
                         const std::vector<float>& ref, const std::string& what) {
    const ModelLayout local = make_model_layout(mc, split);
    const ModelLayout whole = make_model_layout(mc);
    const std::vector<size_t> lb = unit_bases(local);
    const std::vector<size_t> wb = unit_bases(whole);
    ASSERT_EQ(got.size(), lb.back()) << what;
    ASSERT_EQ(ref.size(), wb.back()) << what;
    size_t bad = 0;
    std::string first;
    for (const ParamSpec& p : local.params) {
        const ParamSpec& w = whole.find(p.name);
        ASSERT_EQ(p.slice.global_shape, w.shape) << what << ": " << p.name;
        for (size_t i = 0; i < p.numel; ++i) {
            const double g = got[lb[static_cast<size_t>(p.unit)] + p.offset + i];
            const size_t at = p.slice.global_offset(i, p.shape);
            const double r = ref[wb[static_cast<size_t>(w.unit)] + w.offset + at];
            if (std::fabs(g - r) > 1e-5 * std::fabs(r) + 2e-6) {
                if (bad++ == 0) first = str(p.name, " element ", at, ": ", g, ", one-rank reference ", r);
            }
        }
    }
    EXPECT_EQ(bad, 0u) << what << " (tensor rank " << split.rank << "): " << bad << " parameters differ; first "
                       << first;
}

/// Every rank's hash of its whole (unsplit) tensors; the ranks of a tensor group must agree.
void expect_whole_tensors_identical(const ModelConfig& mc, TensorSplit split, const std::vector<float>& params,
                                    const std::string& what) {
    const ModelLayout local = make_model_layout(mc, split);
    const std::vector<size_t> lb = unit_bases(local);
    uint64_t h = kHashSeed;
    for (const ParamSpec& p : local.params) {
        if (p.slice.split()) continue;
        const float* x = params.data() + lb[static_cast<size_t>(p.unit)] + p.offset;
        h = hash64(x, p.numel * sizeof(float), h);
    }
    std::vector<uint64_t> all(static_cast<size_t>(test::world_size()));
    MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    const int me = test::world_rank();
    const int first = me - split.rank;  // the group's tensor rank 0
    EXPECT_EQ(all[static_cast<size_t>(first)], h)
        << what << ": rank " << me << " and rank " << first << " (one tensor group) hold different whole tensors";
}

class TensorParallel : public ::testing::TestWithParam<TensorCase> {};

TEST_P(TensorParallel, MatchesOneRank) {
    const TensorCase c = GetParam();
    const int N = test::world_size();
    const int me = test::world_rank();
    if (N % c.tensor != 0) GTEST_SKIP() << "tensor " << c.tensor << " does not divide " << N << " ranks";
    const int D = N / c.tensor;
    if (c.shard_group > 0 && D % c.shard_group != 0) GTEST_SKIP() << "groups of " << c.shard_group << " in " << D;
    const std::string what = case_name(c) + " N=" + std::to_string(N);
    test::SharedDir dir("tensor");
    if (me == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);

    Config cfg = tensor_config(c, dir.file("train.bin"), dir.file("world"));
    cfg.parallel.tensor = c.tensor;
    TrainOptions world;
    world.collect_params = true;
    const TrainSummary got = train(cfg, world);

    Config ref_cfg = tensor_config(c, dir.file("train.bin"), dir.file("ref" + std::to_string(me)));
    ref_cfg.parallel.zero_stage = 0;
    ref_cfg.parallel.shard_group.ranks = 0;
    ref_cfg.train.grad_accum *= D;
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = true;
    const TrainSummary ref = train(ref_cfg, self);
    ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
        EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s])) << what << " step " << s + 1;
    }
    const TensorSplit split{c.tensor, me % c.tensor};
    expect_slices_match(cfg.model, split, got.final_params, ref.final_params, what);
    expect_whole_tensors_identical(cfg.model, split, got.final_params, what);
}

INSTANTIATE_TEST_SUITE_P(Cases, TensorParallel,
                         ::testing::Values(TensorCase{2, 0}, TensorCase{2, 1}, TensorCase{2, 2}, TensorCase{2, 3},
                                           TensorCase{2, 0, true}, TensorCase{2, 3, true}, TensorCase{4, 0},
                                           TensorCase{4, 2, true}, TensorCase{2, 2, false, 1}),
                         [](const auto& info) { return case_name(info.param); });

TEST(TensorParallelBytes, FourSumsPerBlockAndTheHeads) {
    const int N = test::world_size();
    if (N % 2 != 0) GTEST_SKIP();
    test::SharedDir dir("tensor_bytes");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    const TensorCase c{2, 1};
    Config cfg = tensor_config(c, dir.file("train.bin"), dir.file("run"));
    cfg.parallel.tensor = 2;
    cfg.train.max_steps = 3;
    train(cfg, TrainOptions{});
    if (test::world_rank() != 0) return;
    const ModelConfig& m = cfg.model;
    const uint64_t tokens = static_cast<uint64_t>(cfg.train.micro_batch) * static_cast<uint64_t>(m.seq_len);
    const uint64_t btc = tokens * static_cast<uint64_t>(m.n_embd);
    // A ring all-reduce of n elements over 2 ranks sends n of them.
    const uint64_t per_micro = 4 * ((4 * static_cast<uint64_t>(m.n_layer) + 2) * btc + 3 * tokens);
    const uint64_t want = per_micro * static_cast<uint64_t>(cfg.train.grad_accum);
    int seen = 0;
    for (const auto& r : test::step_records(dir.file("run/metrics.jsonl"))) {
        ++seen;
        const auto& t = r.at("comm_bytes").at("tensor");
        EXPECT_EQ(t.value("all_reduce", uint64_t{0}), want) << "step " << r.at("step");
        // Besides: the gradient norm's split part (one scalar sum a step).
        EXPECT_EQ(t.size(), 2u) << "the tensor group runs all-reduces and the norm's scalar only: " << t.dump();
        EXPECT_EQ(t.value("scalar", uint64_t{0}), 16u) << t.dump();
    }
    EXPECT_EQ(seen, cfg.train.max_steps);
}

}  // namespace
}  // namespace zt
