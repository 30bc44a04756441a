// Invariant 1: the strategy does not change the math. The tiny model trained 10 steps in
// fp32 with DDP and ZeRO-1/2/3 on N ranks must match one rank with N-way gradient
// accumulation, step by step, and end with the same parameters. Alongside: the model-state
// bytes per rank against the ZeRO formulas and the bytes moved per step against theory.
//
// Tolerance: 1e-5 relative on every step's loss; on parameters 1e-5 relative plus an
// absolute floor of 4e-6 (test::expect_matches_reference). The only difference between the runs is the order of the fp32
// gradient sums (ranks vs micro-steps), ~1e-7 relative. For an element whose gradient
// contributions cancel to ~0 (biases that start at 0), AdamW divides by sqrt(v) ~ |g| and
// turns that reordering noise into an update difference of the order of the update itself;
// those elements are ~1e-7 in size, so no relative bound can hold for them. The floor is
// about 0.1% of one AdamW step at lr 3e-3, far below any real strategy bug (a missing rank's
// gradient or a stale shard moves parameters by whole steps).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/shard_layout.hpp"
#include "ztrain/parallel/zero_memory.hpp"
#include "ztrain/train/trainer.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

struct StageCase {
    int stage;
    double bucket_mb;  // DDP bucket size; the tiny model's gradients are ~66 KB
    bool llama = false;  // the same model as a Llama (test::as_llama)
    int window = 0;      // > 0: that Llama as a Mistral with this sliding window
    int qwen = 0;        // with llama: as Qwen2 or Qwen3 (test::as_qwen)
};

class ZeroStage : public ::testing::TestWithParam<StageCase> {};

TEST_P(ZeroStage, MatchesOneRankWithAccumulationAndMeetsMemoryAndCommTheory) {
    const int stage = GetParam().stage;
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("zero");
    test::write_shared_train_shard(dir);

    // Reference: one rank (each rank computes it alone on MPI_COMM_SELF) with N x accumulation.
    auto model = [&](Config c) {
        if (!GetParam().llama) return c;
        c = test::as_qwen(test::as_llama(c), GetParam().qwen);
        if (GetParam().window > 0) {
            c.model.arch = ModelArch("mistral");
            c.model.sliding_window = GetParam().window;
        }
        return c;
    };
    Config ref_cfg = model(test::tiny_mpi_config(dir.file("train.bin"), dir.file("ref" + std::to_string(me))));
    ref_cfg.train.grad_accum *= N;
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = true;
    const TrainSummary ref = train(ref_cfg, self);

    Config cfg = model(test::tiny_mpi_config(dir.file("train.bin"), dir.file("world")));
    cfg.parallel.zero_stage = stage;
    cfg.parallel.bucket_mb = GetParam().bucket_mb;
    TrainOptions world;
    world.collect_params = true;
    size_t buckets = 0;
    world.after_step = [&](long, ModelState& state, bool) { buckets = ModelStateTestAccess::num_grad_buckets(state); };
    const TrainSummary got = train(cfg, world);
    if (stage <= 1) {
        // 25 MiB holds the whole model in one bucket; 0.004 MiB (4 KiB) splits it, so
        // several bucket all-reduces are in flight while backward goes on.
        EXPECT_EQ(buckets > 1, GetParam().bucket_mb < 0.01) << "stage " << stage << ": " << buckets << " buckets";
    }
    // Clipping is active in these runs (grad_clip 0.5 is below the early gradient norms), so
    // the global norm from shard partial sums is part of what is compared.
    ASSERT_FALSE(got.grad_norms.empty());
    EXPECT_GT(got.grad_norms.front(), cfg.train.grad_clip) << "stage " << stage << ": clipping never engaged";

    test::expect_matches_reference(got, ref, "stage " + std::to_string(stage) + " N=" + std::to_string(N));

    // The communication thread (parallel.comm_thread, on above) runs the same blocking calls
    // in the same order as the training thread would: without it, every loss and parameter
    // is the same bit for bit.
    Config off_cfg = cfg;
    off_cfg.run.dir = dir.file("world_no_comm_thread");
    off_cfg.parallel.comm_thread = false;
    TrainOptions off_opts;
    off_opts.collect_params = true;
    const TrainSummary off = train(off_cfg, off_opts);
    ASSERT_EQ(off.losses.size(), got.losses.size());
    for (size_t i = 0; i < got.losses.size(); ++i) {
        EXPECT_EQ(off.losses[i], got.losses[i]) << "stage " << stage << " step " << i + 1 << ": loss with "
                                                << "parallel.comm_thread = false differs from true";
    }
    ASSERT_EQ(off.final_params.size(), got.final_params.size());
    size_t differing = 0, first = 0;
    for (size_t i = 0; i < got.final_params.size(); ++i) {
        if (std::memcmp(&off.final_params[i], &got.final_params[i], sizeof(float)) != 0 && differing++ == 0) first = i;
    }
    EXPECT_EQ(differing, 0u) << "stage " << stage << ": " << differing << " final parameters differ between "
                             << "parallel.comm_thread = true and false; first: element " << first << ", "
                             << got.final_params[first] << " vs " << off.final_params[first];

    // Bytes moved per step against the per-stage theory (ring volumes, padded units).
    const ModelLayout layout = make_model_layout(cfg.model);
    const auto shards = make_unit_shards(layout.unit_numel, N);
    uint64_t P = 0;
    for (const auto& s : shards) P += s.padded_numel;
    const uint64_t ring = P * 4 * static_cast<uint64_t>(N - 1) / static_cast<uint64_t>(N);
    // Unit 0 (embedding and tied head) stays gathered through a step: once per step at stage 3.
    const uint64_t ring0 = shards[0].padded_numel * 4 * static_cast<uint64_t>(N - 1) / static_cast<uint64_t>(N);
    const uint64_t A = static_cast<uint64_t>(cfg.train.grad_accum);
    uint64_t want_ar = 0, want_rs = 0, want_ag = 0;
    switch (stage) {
        case 0: want_ar = 2 * ring; break;                       // one all-reduce per step
        case 1: want_rs = ring; want_ag = ring; break;            // once per step
        // Reduce-scatter every micro-step, but unit 0's once per step (its gradient is kept).
        case 2: want_rs = A * (ring - ring0) + ring0; want_ag = ring; break;
        case 3: want_rs = A * (ring - ring0) + ring0; want_ag = A * 2 * (ring - ring0) + ring0; break;  // fwd + bwd per micro-step
    }
    if (me == 0) {
        const auto records = test::read_jsonl(dir.file("world/metrics.jsonl"));
        int steps_seen = 0;
        for (const auto& r : records) {
            if (!r.contains("comm_bytes")) continue;
            ++steps_seen;
            const auto& cb = r["comm_bytes"];
            auto get = [&](const char* k) { return cb.contains(k) ? cb[k].get<uint64_t>() : uint64_t{0}; };
            EXPECT_EQ(get("all_reduce"), want_ar) << "step " << r["step"] << " stage " << stage;
            EXPECT_EQ(get("reduce_scatter"), want_rs) << "step " << r["step"] << " stage " << stage;
            EXPECT_EQ(get("all_gather"), want_ag) << "step " << r["step"] << " stage " << stage;
        }
        EXPECT_EQ(steps_seen, cfg.train.max_steps);
    }
}

INSTANTIATE_TEST_SUITE_P(AllStages, ZeroStage,
                         ::testing::Values(StageCase{0, 25}, StageCase{0, 0.004}, StageCase{1, 25},
                                           StageCase{2, 25}, StageCase{3, 25}, StageCase{0, 25, true},
                                           StageCase{1, 25, true}, StageCase{3, 25, true},
                                           StageCase{3, 25, true, 5}, StageCase{3, 25, true, 0, 2},
                                           StageCase{3, 25, true, 0, 3}),
                         [](const auto& info) {
                             return "stage" + std::to_string(info.param.stage) +
                                    (info.param.bucket_mb < 1 ? "_small_buckets" : "") +
                                    (info.param.window > 0 ? "_mistral" : info.param.llama ? "_llama" : "") +
                                    (info.param.qwen > 0 ? "_qwen" + std::to_string(info.param.qwen) : "");
                         });

/// LoRA (lora.rank 4, lora.alpha 8) under DDP, ZeRO, hybrid groups and pipeline stages at N
/// ranks matches one rank with N-way accumulation (the tolerance above; in bf16, see
/// expect_bf16_adapters_match), and the frozen base ends where it started: bit for bit the
/// same as an untrained run's (in bf16: as the one-rank run's, both the rounded initial
/// values), whatever the stage. The state keeps gradients, masters and moments for the
/// adapters only (ShardPlan::state_range), so these cover each path of their reduction.
struct LoraCase {
    int stage;
    bool llama;
    int pipeline = 1;
    int group = 0;  ///< parallel.shard_group (0: the default, the node)
    DType dtype = DType::kF32;
    /// Rank 16 on every product: the adapters are most of each block's unit, so their
    /// owners are several ranks (rank 4 on two products fits in the last rank's slice).
    bool wide = false;
    double dropout = 0.0;  ///< lora.dropout: each sample's masks wherever its row is computed
    bool zero_bubble = false;  ///< parallel.schedule = zb (the adapters' gradients owed to the weight pass)
    /// lora.base_dtype = bf16 under fp32 activations: the adapters, their gradients and their
    /// reductions stay fp32, the base is the rounded initial values; the base's products round
    /// their other operands to bf16 (see the tolerance below).
    bool bf16_base = false;
};

/// bf16: the one-rank run rounds its N-way accumulated gradients once per micro-step, the N
/// ranks each their own, so the runs part by rounding: losses within 1%, and at most 2% of
/// the adapters' elements further from the reference than a tenth of their tensor's largest
/// value (a rank keeping the wrong part of a reduction moves most of them).
void expect_bf16_adapters_match(const TrainSummary& got, const TrainSummary& ref, const ModelLayout& layout,
                                const std::string& what) {
    ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
        EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-2 * std::fabs(ref.losses[s])) << what << " step " << s + 1;
    }
    ASSERT_EQ(got.final_params.size(), ref.final_params.size()) << what;
    size_t at = 0;
    size_t far = 0;
    size_t total = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
        for (const ParamSpec& p : layout.params) {
            if (p.unit != u || !p.trainable) continue;
            const float* g = got.final_params.data() + at + p.offset;
            const float* r = ref.final_params.data() + at + p.offset;
            float largest = 0.f;
            for (size_t i = 0; i < p.numel; ++i) largest = std::max(largest, std::fabs(r[i]));
            for (size_t i = 0; i < p.numel; ++i) far += std::fabs(g[i] - r[i]) > 0.1f * largest ? 1 : 0;
            total += p.numel;
        }
        at += layout.unit_numel[static_cast<size_t>(u)];
    }
    EXPECT_LE(far * 50, total) << what << ": " << far << " of " << total << " adapter elements differ by over 10%";
}
class LoraZeroStage : public ::testing::TestWithParam<LoraCase> {};

TEST_P(LoraZeroStage, MatchesOneRankAndKeepsTheBase) {
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("lora_zero");
    test::write_shared_train_shard(dir);
    auto lora = [&](Config c) {
        if (GetParam().llama) c = test::as_llama(c);
        c.model.lora.rank = GetParam().wide ? 16 : 4;
        c.model.lora.targets = GetParam().wide    ? (GetParam().llama ? "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
                                                                      : "c_attn,c_proj,c_fc")
                               : GetParam().llama ? "q_proj,v_proj,down_proj"
                                                  : "c_attn,c_proj";
        c.train.max_steps = 4;
        c.model.lora.dropout = GetParam().dropout;
        if (GetParam().bf16_base) c.model.lora.base_dtype = DType::kBF16;
        return c;
    };
    const LoraCase c = GetParam();
    const int P = c.pipeline;
    if (c.group > 0 && (N % c.group != 0 || c.group == N)) GTEST_SKIP() << "shard groups of " << c.group << " at N = " << N;
    Config ref_cfg = lora(test::tiny_mpi_config(dir.file("train.bin"), dir.file("ref" + std::to_string(me))));
    ref_cfg.precision.dtype = c.dtype;
    if (c.dtype != DType::kF32) ref_cfg.precision.reduce_dtype = DType::kF32;
    // With dropout the one rank takes the global batch in wider micro-batches instead, so a
    // sample's row sits elsewhere in its batch: its masks must follow the sample, not the row.
    if (c.dropout > 0) {
        ref_cfg.train.micro_batch *= N / P;
    } else {
        ref_cfg.train.grad_accum *= N / P;
    }
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = true;
    const TrainSummary ref = train(ref_cfg, self);
    Config cfg = lora(test::tiny_mpi_config(dir.file("train.bin"), dir.file("world")));
    cfg.parallel.zero_stage = c.stage;
    cfg.parallel.pipeline = P;
    if (c.zero_bubble) cfg.parallel.schedule = PipelineSchedule::kZeroBubble;
    if (c.group > 0) cfg.parallel.shard_group.ranks = c.group;
    cfg.precision.dtype = c.dtype;
    if (c.dtype != DType::kF32) cfg.precision.reduce_dtype = DType::kF32;
    TrainOptions world;
    world.collect_params = true;
    const TrainSummary got = train(cfg, world);
    const std::string what = "lora stage " + std::to_string(c.stage) + " P=" + std::to_string(P) +
                             " G=" + std::to_string(c.group) + " " + dtype_name(c.dtype) +
                             (c.bf16_base ? " (bf16 base)" : "") + " N=" + std::to_string(N);
    const ModelLayout layout = make_model_layout(cfg.model);
    if (c.dtype == DType::kF32) {
        // Wide: 12k adapter elements, some with gradients near zero, where AdamW's m / sqrt(v)
        // turns a last-bit difference of the sum's order into a few 1e-6 (a rank keeping the
        // wrong part of a reduction moves them by 1e-3).
        // A bf16 base's products round their fp32 inputs to bf16, so the last bits the ranks'
        // reduction order leaves in the adapters after step 1 can flip one rounding: an element
        // then moves by up to bf16's 2^-9 of an input (7e-5 seen on a Zen 5), still well under
        // the 1e-3 of a wrong reduction.
        test::expect_matches_reference(got, ref, what, c.bf16_base ? 2e-4 : c.wide ? 1e-5 : 4e-6);
    } else {
        expect_bf16_adapters_match(got, ref, layout, what);
    }
    // The base: its initial values (unit by unit, unpadded as final_params lists them).
    size_t at = 0;
    size_t moved = 0;
    std::string first;
    for (int u = 0; u < layout.num_units(); ++u) {
        std::vector<float> init(layout.unit_numel[static_cast<size_t>(u)]);
        init_unit(layout, u, cfg.train.seed, init.data());
        for (const ParamSpec& p : layout.params) {
            if (p.unit != u || p.trainable) continue;
            for (size_t i = 0; i < p.numel; ++i) {
                const bool rounded = c.dtype != DType::kF32 || c.bf16_base;
                const float want = rounded ? ref.final_params[at + p.offset + i] : init[p.offset + i];
                if (got.final_params[at + p.offset + i] != want && moved++ == 0) first = p.name;
            }
        }
        at += init.size();
    }
    ASSERT_EQ(at, got.final_params.size()) << what;
    EXPECT_EQ(moved, 0u) << what << ": " << moved << " frozen base elements changed, first in " << first;
}

INSTANTIATE_TEST_SUITE_P(Stages, LoraZeroStage,
                         ::testing::Values(LoraCase{0, false}, LoraCase{1, false}, LoraCase{2, true},
                                           LoraCase{3, false}, LoraCase{3, true}, LoraCase{1, false, 2},
                                           LoraCase{3, true, 2}, LoraCase{2, false, 1, 2},
                                           LoraCase{3, true, 1, 2, DType::kBF16}, LoraCase{0, false, 1, 0, DType::kBF16},
                                           LoraCase{1, true, 1, 0, DType::kBF16},
                                           LoraCase{1, false, 1, 0, DType::kF32, true},
                                           LoraCase{2, true, 1, 0, DType::kF32, true},
                                           LoraCase{3, false, 1, 2, DType::kF32, true},
                                           LoraCase{2, false, 1, 0, DType::kBF16, true},
                                           LoraCase{2, true, 1, 0, DType::kF32, false, 0.2},
                                           LoraCase{3, false, 2, 0, DType::kF32, true, 0.2},
                                           LoraCase{1, true, 2, 0, DType::kF32, true, 0.0, true},
                                           LoraCase{3, false, 2, 0, DType::kF32, false, 0.2, true},
                                           LoraCase{0, true, 1, 0, DType::kF32, false, 0.0, false, true},
                                           LoraCase{1, false, 1, 0, DType::kF32, true, 0.0, false, true},
                                           LoraCase{3, false, 1, 0, DType::kF32, true, 0.0, false, true},
                                           LoraCase{2, true, 2, 0, DType::kF32, true, 0.0, false, true}),
                         [](const auto& info) {
                             return "stage" + std::to_string(info.param.stage) + (info.param.llama ? "_llama" : "") +
                                    (info.param.pipeline > 1 ? "_pipeline" : "") +
                                    (info.param.group > 0 ? "_groups" + std::to_string(info.param.group) : "") +
                                    (info.param.dtype != DType::kF32 ? std::string("_") + dtype_name(info.param.dtype) : "") +
                                    (info.param.wide ? "_wide" : "") + (info.param.dropout > 0 ? "_dropout" : "") +
                                    (info.param.zero_bubble ? "_zb" : "") + (info.param.bf16_base ? "_bf16base" : "");
                         });

/// 16-bit training at ZeRO-3 against ZeRO-2 on the same ranks: both reduce every micro-step's
/// fp32 gradient scratch and split the trained state evenly over the ranks, so they differ
/// only in where the working copy lives (whole, or shards gathered per unit; with LoRA, plus
/// a whole tail copy that each gathered unit takes its adapters from). The same bits, step by
/// step: a gathered unit with a stale tail or a stale shard changes the losses (the bf16
/// tolerances against one rank cannot see it). Full training (rank 0) and LoRA (rank 16).
TEST(LoraZeroStage3, Bf16TrainsTheSameBitsAsStage2) {
    test::SharedDir dir("lora_zero3_bf16");
    test::write_shared_train_shard(dir);
    for (const int rank : {0, 16})
    for (const bool llama : {false, true}) {
        TrainSummary runs[2];
        for (const int stage : {2, 3}) {
            // A run directory per model: llama's run would otherwise resume gpt2's checkpoint.
            Config c = test::tiny_mpi_config(dir.file("train.bin"), dir.file("s" + std::to_string(stage) + "r" +
                                                                              std::to_string(rank) + (llama ? "l" : "")));
            if (llama) c = test::as_llama(c);
            c.model.lora.rank = rank;
            if (rank > 0) {
                c.model.lora.targets =
                    llama ? "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" : "c_attn,c_proj,c_fc";
            }
            c.train.max_steps = 4;
            c.train.lr = 1e-2;
            c.precision.dtype = DType::kBF16;
            c.precision.reduce_dtype = DType::kF32;
            c.parallel.zero_stage = stage;
            TrainOptions world;
            world.collect_params = true;
            runs[stage - 2] = train(c, world);
        }
        const std::string what = std::string(llama ? "llama" : "gpt2") + " lora.rank " + std::to_string(rank);
        ASSERT_EQ(runs[0].losses.size(), 4u) << what << ": every step trained";
        ASSERT_EQ(runs[0].losses.size(), runs[1].losses.size()) << what;
        for (size_t s = 0; s < runs[0].losses.size(); ++s) {
            EXPECT_EQ(runs[1].losses[s], runs[0].losses[s]) << what << " step " << s + 1;
        }
        ASSERT_EQ(runs[0].final_params.size(), runs[1].final_params.size()) << what;
        size_t differ = 0;
        for (size_t i = 0; i < runs[0].final_params.size(); ++i) differ += runs[1].final_params[i] != runs[0].final_params[i];
        EXPECT_EQ(differ, 0u) << what << ": " << differ << " parameters differ from stage 2's";
    }
}

/// On two ranks a sum of two is the same whichever rank adds it, so with one micro-step per
/// step and no clipping (whose global norm adds shard partial sums in another order) every
/// strategy adds the same gradients and applies the same element-wise AdamW: in fp32, DDP and
/// ZeRO-1/2/3 train the same bits. In bf16 (fp32 reductions) DDP and ZeRO-1 keep each rank's
/// gradient in bf16 through the step and reduce those, while ZeRO-2/3 reduce each micro-step's
/// fp32 gradient scratch and round the sum into their bf16 shard: one rounding apart, so
/// ZeRO-1 trains DDP's bits and ZeRO-3 ZeRO-2's. With fp32 gradients beside bf16
/// (precision.grad_dtype) neither rounds, and all four train DDP's bits again. A stage that
/// reduces into the wrong shard, updates a stale copy or gathers the wrong rounding moves the
/// bits at step 2.
TEST(ZeroStagesAtTwoRanks, TrainTheSameBitsWithoutAccumulationOrClipping) {
    if (test::world_size() != 2) GTEST_SKIP() << "sums of more than two ranks depend on the algorithm's order";
    test::SharedDir dir("zero_stage_bits");
    test::write_shared_train_shard(dir);
    struct Precision {
        DType dtype;
        bool fp32_grads;
    };
    for (const Precision p : {Precision{DType::kF32, false}, Precision{DType::kBF16, false}, Precision{DType::kBF16, true}})
    for (const bool llama : {false, true}) {
        TrainSummary runs[4];
        const std::string precision = str(dtype_name(p.dtype), p.fp32_grads ? " (fp32 gradients)" : "");
        for (int stage = 0; stage <= 3; ++stage) {
            Config c = test::tiny_mpi_config(dir.file("train.bin"),
                                             dir.file(str("s", stage, dtype_name(p.dtype), p.fp32_grads, llama)));
            if (llama) c = test::as_llama(c);
            c.train.grad_accum = 1;
            c.train.grad_clip = 0;
            c.train.max_steps = 6;
            c.precision.dtype = p.dtype;
            if (p.fp32_grads) {
                c.precision.grad_dtype = DType::kF32;  // reduced in fp32 too: reduce_dtype follows it
            } else if (p.dtype != DType::kF32) {
                c.precision.reduce_dtype = DType::kF32;
            }
            c.parallel.zero_stage = stage;
            TrainOptions world;
            world.collect_params = true;
            runs[stage] = train(c, world);
        }
        const std::string family = llama ? "llama" : "gpt2";
        for (int stage = 1; stage <= 3; ++stage) {
            const bool rounded_apart = p.dtype != DType::kF32 && !p.fp32_grads;
            const int same = !rounded_apart || stage == 1 ? 0 : 2;
            if (stage == same) continue;
            const TrainSummary& ref = runs[same];
            const std::string what = str(family, " ", precision, " ZeRO-", stage, " against ",
                                         same == 0 ? "DDP" : "ZeRO-2");
            ASSERT_EQ(runs[stage].losses.size(), ref.losses.size()) << what;
            for (size_t s = 0; s < ref.losses.size(); ++s) {
                EXPECT_EQ(runs[stage].losses[s], ref.losses[s]) << what << " step " << s + 1;
            }
            ASSERT_EQ(runs[stage].final_params.size(), ref.final_params.size()) << what;
            size_t differ = 0;
            for (size_t i = 0; i < ref.final_params.size(); ++i) differ += runs[stage].final_params[i] != ref.final_params[i];
            EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << ref.final_params.size() << " parameters differ";
        }
    }
}

/// train.global_batch fixes the batch and derives grad_accum from the world size: the same
/// deck on one rank (N x the micro-steps) and on N ranks (ZeRO-2) trains the same run, as the
/// one-rank reference with N x accumulation does (within fp32 reduction order), and a deck
/// that also names another grad_accum is corrected to the derived one.
TEST(GlobalBatch, OneDeckTrainsTheSameRunAtOneRankAndAtN) {
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("global_batch");
    test::write_shared_train_shard(dir);
    Config base = test::tiny_mpi_config(dir.file("train.bin"), dir.file("unused"));
    base.train.global_batch = base.train.micro_batch * base.train.grad_accum * N;
    base.train.grad_accum = 1;
    base.train.max_steps = 4;
    Config one = base;
    one.run.dir = dir.file("one" + std::to_string(me));
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = true;
    const TrainSummary ref = train(one, self);
    Config many = base;
    many.run.dir = dir.file("many");
    many.parallel.zero_stage = 2;
    many.train.grad_accum = 7;  // as a resolved deck from another world size carries it: replaced
    TrainOptions world;
    world.collect_params = true;
    const TrainSummary got = train(many, world);
    test::expect_matches_reference(got, ref, str("global_batch ", base.train.global_batch, " at N=", N));
    EXPECT_EQ(with_global_batch(base, 1).train.grad_accum, base.train.global_batch / base.train.micro_batch);
}

/// A GPT-2 of `n_layer` blocks, 4 heads x 64 wide, vocabulary 300.
ModelConfig small_model(int n_layer, int seq_len) {
    ModelConfig mc;
    mc.n_layer = n_layer;
    mc.n_head = 4;
    mc.n_embd = 64;
    mc.seq_len = seq_len;
    mc.vocab_size = 300;
    return mc;
}

// Model-state bytes per rank vs the ZeRO formulas, per dtype, with w the working dtype's size,
// g the stored gradients' (w, or 4 under precision.grad_dtype = fp32) and m the master copy's
// (4 for bf16/fp16; 0 in fp32, where the parameters are the master):
//   stage 0: (w + g + m + 8) P                    fp32: 16P      16-bit: 16P
//   stage 1: (w + g) P + (m + 8) P / N            fp32: 8P+8P/N  16-bit: 4P + 12P/N
//   stage 2: w P + (g + m + 8) P / N              fp32: 4P+12P/N 16-bit: 2P + 14P/N
//   stage 3: (w + g + m + 8) P / N                = 16P / N (bf16 with fp32 gradients: 18P / N)
// with P the parameter count. Checked on every rank, within 5% (padding).
/// train.optimizer = muon under DDP, ZeRO-1/2/3, hybrid shard groups and pipeline stages at
/// N ranks matches one rank with N-way accumulation (the tolerance above): each rank takes
/// the momentum of its shard, the group gathers the whole update, and every rank holding
/// part of a matrix orthogonalizes it whole and applies its part.
struct MuonCase {
    int stage;
    bool llama;
    int pipeline = 1;
    int group = 0;  ///< parallel.shard_group (0: the default, the node)
};

class MuonZeroStage : public ::testing::TestWithParam<MuonCase> {};

TEST_P(MuonZeroStage, MatchesOneRankWithAccumulation) {
    const int N = test::world_size();
    const int me = test::world_rank();
    const MuonCase c = GetParam();
    const int P = c.pipeline;
    if (N % P != 0) GTEST_SKIP() << P << " stages at N = " << N;
    if (c.group > 0 && (N % c.group != 0 || c.group == N)) GTEST_SKIP() << "shard groups of " << c.group << " at N = " << N;
    test::SharedDir dir("muon_zero");
    test::write_shared_train_shard(dir);
    auto muon = [&](Config cfg) {
        if (c.llama) cfg = test::as_llama(cfg);
        cfg.train.optimizer = OptimizerKind::kMuon;
        cfg.train.max_steps = 6;
        return cfg;
    };
    Config ref_cfg = muon(test::tiny_mpi_config(dir.file("train.bin"), dir.file("ref" + std::to_string(me))));
    ref_cfg.train.grad_accum *= N / P;
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = true;
    const TrainSummary ref = train(ref_cfg, self);
    Config cfg = muon(test::tiny_mpi_config(dir.file("train.bin"), dir.file("world")));
    cfg.parallel.zero_stage = c.stage;
    cfg.parallel.pipeline = P;
    if (c.group > 0) cfg.parallel.shard_group.ranks = c.group;
    TrainOptions world;
    world.collect_params = true;
    const TrainSummary got = train(cfg, world);
    test::expect_matches_reference(got, ref, str("muon stage ", c.stage, c.llama ? " llama" : " gpt2", " P=", P,
                                                 " group ", c.group, " N=", N));
}

INSTANTIATE_TEST_SUITE_P(Stages, MuonZeroStage,
                         ::testing::Values(MuonCase{0, false}, MuonCase{1, false}, MuonCase{2, true},
                                           MuonCase{3, false}, MuonCase{3, true}, MuonCase{3, true, 1, 2},
                                           MuonCase{1, true, 2}),
                         [](const auto& info) {
                             return "stage" + std::to_string(info.param.stage) +
                                    (info.param.llama ? "_llama" : "_gpt2") +
                                    (info.param.pipeline > 1 ? "_pipeline" + std::to_string(info.param.pipeline) : "") +
                                    (info.param.group > 0 ? "_group" + std::to_string(info.param.group) : "");
                         });

TEST(ZeroMemory, ModelStateBytesFollowTheFormulas) {
    const int N = test::world_size();
    const ModelConfig mc = small_model(3, 32);
    const ModelLayout layout = make_model_layout(mc);
    double P = 0;
    for (const auto& p : layout.params) P += static_cast<double>(p.numel);
    auto backend = make_cpu_backend(1);
    auto comm_owner = make_mpi_communicator(MPI_COMM_WORLD);
    Communicator& comm = *comm_owner;
    const std::pair<DType, DType> kinds[] = {{DType::kF32, DType::kF32},
                                             {DType::kBF16, DType::kBF16},
                                             {DType::kF16, DType::kF16},
                                             {DType::kBF16, DType::kF32}};
    for (const auto& [t, gt] : kinds) {
        const double w = static_cast<double>(dtype_size(t));
        const double g = static_cast<double>(dtype_size(gt));
        const double m = t == DType::kF32 ? 0.0 : 4.0;
        const double formula[4] = {(w + g + m + 8) * P, (w + g) * P + (m + 8) * P / N, w * P + (g + m + 8) * P / N,
                                   (w + g + m + 8) * P / N};
        const ZeroMemoryFormulas printed = zero_memory_formulas(0, N, static_cast<size_t>(P), t, gt);
        EXPECT_DOUBLE_EQ(printed.model_state.bytes, formula[0]) << dtype_name(t) << " with " << dtype_name(gt) << " gradients";
        for (int stage = 0; stage <= 3; ++stage) {
            ModelState state(layout, *backend, comm,
                             StateOptions::zero(stage).with_buckets(1 << 20).with_seed(1).in(t, gt).accumulating_in(gt));
            // bytes() sums what the constructor allocated per kind, so this checks allocations.
            const double got = static_cast<double>(state.bytes().model_state());
            EXPECT_NEAR(got, formula[stage], 0.05 * formula[stage])
                << dtype_name(t) << " (" << dtype_name(gt) << " gradients) stage " << stage << " N=" << N << " rank "
                << comm.rank() << ": " << got
                << " bytes vs formula " << formula[stage] << " (" << 100.0 * (got / formula[stage] - 1.0) << "%)";
            // One training micro-step: the per-unit scratch really held (gathered units, fp32
            // views, gradient scratch) stays within what the memory record plans for it.
            Transformer model(mc, *backend, 2);
            model.set_activation_dtype(t);
            std::vector<int32_t> tokens(2 * static_cast<size_t>(mc.seq_len));
            for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % 300);
            state.zero_grads();
            state.begin_micro_step(true, true);
            model.forward(state, tokens.data(), tokens.data(), 2, mc.seq_len, 1.0f);
            model.backward(state);
            state.finish_grad_sync();
            if (stage >= 2 || t != DType::kF32) {
                EXPECT_GT(ModelStateTestAccess::dynamic_scratch_held(state), 0u);
            }
            EXPECT_LE(ModelStateTestAccess::dynamic_scratch_held(state), ModelStateTestAccess::dynamic_scratch_planned(state))
                << dtype_name(t) << " stage " << stage << " N=" << N << " rank " << comm.rank()
                << ": per-unit scratch held " << ModelStateTestAccess::dynamic_scratch_held(state) << " bytes, planned "
                << ModelStateTestAccess::dynamic_scratch_planned(state);
        }
    }
}

/// The model's face of a ModelState that counts, at each acquire, the units the store holds.
class ResidentCounter : public UnitStore {
  public:
    explicit ResidentCounter(ModelState& s) : m_s(s) {}
    const float* acquire(int unit) override {
        const float* p = m_s.acquire(unit);
        peak = std::max(peak, ModelStateTestAccess::resident_units(m_s));
        return p;
    }
    void release(int unit) override { m_s.release(unit); }
    void prefetch(int unit) override { m_s.prefetch(unit); }
    float* grads(int unit) override { return m_s.grads(unit); }
    void grads_done(int unit) override { m_s.grads_done(unit); }
    bool grads_need_zero(int unit) override { return m_s.grads_need_zero(unit); }
    size_t peak = 0;

  private:
    ModelState& m_s;
};

// Stage 3 with overlap depth D: from the second training pass on, every acquire has the next
// D units of the pass started (the first pass, recorded, has the model's one announced unit),
// the pooled scratch stays within the plan for D, and the gradients do not depend on D.
TEST(ZeroMemory, Stage3GathersOverlapDepthUnitsAhead) {
    const ModelConfig mc = small_model(6, 16);
    const ModelLayout layout = make_model_layout(mc);
    auto backend = make_cpu_backend(1);
    auto comm = make_mpi_communicator(MPI_COMM_WORLD);
    std::vector<float> depth1_grads;
    for (int depth = 1; depth <= 3; ++depth) {
        ModelState state(layout, *backend, StateComms{*comm, self_communicator()},
                         StateOptions::zero(3).with_buckets(1 << 20).with_seed(1).with_overlap_depth(depth));
        Transformer model(mc, *backend, 2);
        std::vector<int32_t> tokens(2 * static_cast<size_t>(mc.seq_len));
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + comm->rank()) % 300);
        state.zero_grads();
        std::vector<size_t> peaks;
        for (int micro = 0; micro < 3; ++micro) {
            ResidentCounter counter(state);
            state.begin_micro_step(micro == 0, micro == 2);
            model.forward(counter, tokens.data(), tokens.data(), 2, mc.seq_len, 1.0f);
            model.backward(counter);
            peaks.push_back(counter.peak);
            // Nothing started ahead is left over between passes.
            EXPECT_LE(ModelStateTestAccess::resident_units(state), 1u) << "depth " << depth << " micro-step " << micro;
        }
        state.finish_grad_sync();
        // Unit 0 (held through the step), the unit in use and those ahead of it; in the
        // recorded first pass nothing is ahead yet when acquire returns (the model announces
        // the next unit after it).
        EXPECT_EQ(peaks[0], 2u) << "depth " << depth << ": the recorded first pass";
        for (int micro = 1; micro < 3; ++micro) {
            EXPECT_EQ(peaks[static_cast<size_t>(micro)], static_cast<size_t>(2 + depth))
                << "depth " << depth << " micro-step " << micro << ": units held at once";
        }
        EXPECT_LE(ModelStateTestAccess::dynamic_scratch_held(state), ModelStateTestAccess::dynamic_scratch_planned(state))
            << "depth " << depth;
        const std::vector<float> grads = ModelStateTestAccess::owned_grads(state);
        if (depth == 1) {
            depth1_grads = grads;
        } else {
            ASSERT_EQ(grads.size(), depth1_grads.size());
            EXPECT_EQ(0, std::memcmp(grads.data(), depth1_grads.data(), grads.size() * sizeof(float)))
                << "depth " << depth << ": gradients differ from depth 1's";
        }
    }
}

}  // namespace
}  // namespace zt
