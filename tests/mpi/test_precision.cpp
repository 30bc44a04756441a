// Mixed precision across ranks:
// - an overflow injected on ONE rank makes EVERY rank skip the step (the flag is agreed with
//   an all-reduce MAX), halves the fp16 loss scale, and leaves master weights and AdamW state
//   bit-identical; bf16 and fp32 skip such a step too, with no scale involved. The skip is
//   logged (metrics.jsonl, console) and advances neither the LR schedule nor AdamW's t;
// - the tiny model trained in bf16 and fp16 under every ZeRO stage tracks the fp32 loss curve;
// - fp16 reports and applies the unscaled, clipped gradient (one multiplier);
// - a wire dtype other than the working one moves the bytes it says.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/trainer.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

struct Case {
    std::string dtype;
    int stage;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.dtype << " stage " << c.stage; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return info.param.dtype + "_stage" + std::to_string(info.param.stage);
}

std::vector<Case> all_cases() {
    std::vector<Case> out;
    for (const char* dt : {"fp32", "bf16", "fp16"}) {
        for (int stage = 0; stage <= 3; ++stage) out.push_back({dt, stage});
    }
    return out;
}

class InjectedOverflow : public ::testing::TestWithParam<Case> {};

TEST_P(InjectedOverflow, EveryRankSkipsAndStateStaysBitIdentical) {
    const Case c = GetParam();
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("overflow");
    if (me == 0) test::write_random_shard(dir.file("train.bin"), 20000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file("run"));
    cfg.train.max_steps = 5;
    cfg.parallel.zero_stage = c.stage;
    set_config_value(cfg, "precision.dtype", c.dtype);
    cfg.precision.hysteresis = 1;  // so a single overflow halves the scale
    const long bad_step = 3;
    const int bad_rank = N - 1;  // only this rank sees the overflow
    std::vector<float> before;
    bool compared = false;
    TrainOptions opt;
    opt.after_grad_sync = [&](long step, ModelState& state) {
        if (step != bad_step) return;
        if (me == bad_rank) ModelStateTestAccess::poison_owned_grad(state);
        before = ModelStateTestAccess::owned_optimizer_state(state);
    };
    opt.after_step = [&](long step, ModelState& state, bool skipped) {
        if (step != bad_step) return;
        EXPECT_TRUE(skipped) << "rank " << me << " did not skip the step rank " << bad_rank << " overflowed in";
        const std::vector<float> after = ModelStateTestAccess::owned_optimizer_state(state);
        ASSERT_EQ(after.size(), before.size());
        EXPECT_EQ(std::memcmp(after.data(), before.data(), after.size() * sizeof(float)), 0)
            << "master weights or AdamW state changed on rank " << me << " in a skipped step";
        compared = true;
    };
    if (me == 0) ::testing::internal::CaptureStdout();
    const TrainSummary s = train(cfg, opt);
    const std::string console = me == 0 ? ::testing::internal::GetCapturedStdout() : "";
    EXPECT_TRUE(compared);
    ASSERT_EQ(s.skipped.size(), 5u);
    for (size_t i = 0; i < s.skipped.size(); ++i) {
        EXPECT_EQ(s.skipped[i], static_cast<long>(i) + 1 == bad_step) << "step " << i + 1;
    }
    if (c.dtype == "fp16") {
        EXPECT_EQ(s.loss_scales[bad_step], s.loss_scales[bad_step - 1] / 2) << "scale not halved after the overflow";
        EXPECT_EQ(s.loss_scales[0], 65536.0);
    } else {
        for (double sc : s.loss_scales) EXPECT_EQ(sc, 1.0) << c.dtype << " must not scale the loss";
    }
    if (me != 0) return;
    // The skip is logged: metrics.jsonl and one console line.
    const std::vector<nlohmann::json> rec = test::step_records(dir.file("run/metrics.jsonl"));
    ASSERT_EQ(rec.size(), 5u);
    const nlohmann::json& bad = rec[bad_step - 1];
    for (long i = 1; i <= 5; ++i) EXPECT_EQ(rec[i - 1]["skipped"], i == bad_step) << rec[i - 1].dump();
    const double scale_before = c.dtype == "fp16" ? 65536.0 : 1.0;
    const double scale_after = c.dtype == "fp16" ? 32768.0 : 1.0;
    EXPECT_EQ(bad["loss_scale"].get<double>(), scale_before) << "a record logs the scale its step ran at";
    EXPECT_EQ(rec[bad_step]["loss_scale"].get<double>(), scale_after) << "the step after the overflow";
    const std::string line = c.dtype == "fp16"
                                 ? "step     3/5 | non-finite gradients: step skipped, loss scale 65536 -> 32768\n"
                                 : "step     3/5 | non-finite gradients: step skipped\n";
    EXPECT_NE(console.find(line), std::string::npos) << "console lacks '" << line << "':\n" << console;
    // The LR schedule does not advance in a skipped step: steps 3 and 4 both run at the
    // schedule's value for 2 applied steps, step 5 at 3.
    const long applied_before[] = {0, 1, 2, 2, 3};
    for (long i = 1; i <= 5; ++i) {
        EXPECT_DOUBLE_EQ(rec[i - 1]["lr"].get<double>(), learning_rate(cfg.train, applied_before[i - 1]))
            << "step " << i << " ran at the LR of another schedule step";
    }
    ASSERT_NE(learning_rate(cfg.train, 2), learning_rate(cfg.train, 3)) << "the schedule must tell them apart";
    // Nor does AdamW's step count (the t of its bias corrections): the final checkpoint
    // records 4 applied steps out of 5.
    const nlohmann::json meta = read_checkpoint_meta(dir.file("run/checkpoints/step_00000005"));
    EXPECT_EQ(meta["applied_steps"], 4) << "AdamW's step count advanced in the skipped step";
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndStages, InjectedOverflow, ::testing::ValuesIn(all_cases()), case_name);

// Low precision tracks fp32. Tolerance: 3% relative per step over 12 steps. bf16 keeps 8
// significant bits (relative rounding 2^-9 ~ 0.2%) in every activation, weight and gradient;
// fp16 keeps 11. The curves drift apart slowly as rounding noise accumulates; 3% is several
// times the drift seen here and far below what a real bug (a missing unscale, a gradient
// reduced twice, a stale shard) does to the loss within a few steps.
class TracksFp32 : public ::testing::TestWithParam<Case> {};

TEST_P(TracksFp32, LossCurveStaysClose) {
    const Case c = GetParam();
    const int me = test::world_rank();
    test::SharedDir dir("track");
    if (me == 0) test::write_random_shard(dir.file("train.bin"), 20000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    Config ref_cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file("ref"));
    ref_cfg.train.max_steps = 12;
    const TrainSummary ref = train(ref_cfg);
    Config cfg = ref_cfg;
    cfg.run.dir = dir.file("low");
    cfg.parallel.zero_stage = c.stage;
    set_config_value(cfg, "precision.dtype", c.dtype);
    const TrainSummary got = train(cfg);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    for (size_t i = 0; i < ref.losses.size(); ++i) {
        EXPECT_NEAR(got.losses[i], ref.losses[i], 0.03 * ref.losses[i])
            << c.dtype << " stage " << c.stage << " step " << i + 1;
        EXPECT_FALSE(got.skipped[i]) << "step " << i + 1 << " skipped";
    }
    EXPECT_LT(got.losses.back(), got.losses.front() - 0.15) << "did not learn";
}

std::vector<Case> low_precision_cases() {
    std::vector<Case> out;
    for (const char* dt : {"bf16", "fp16"}) {
        for (int stage = 0; stage <= 3; ++stage) out.push_back({dt, stage});
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(LowPrecision, TracksFp32, ::testing::ValuesIn(low_precision_cases()), case_name);

// Unscaling and clipping share one multiplier. AdamW is nearly scale invariant, so the loss
// curve cannot see a missing or doubled unscale; the reported norm and AdamW's moments can.
// After step 1 (clipping active: the first norm is above grad_clip = 0.5):
// - metrics.jsonl's grad_norm of fp16 (scale 2^16) is the unscaled norm: within 0.1% of
//   fp32's (a missing unscale reports 2^16 times fp32's);
// - AdamW's m = (1 - beta1) g c and v = (1 - beta2) (g c)^2, with c the one multiplier, are
//   within 1% (relative L2 over this rank's elements) of fp32's: a missing unscale makes them
//   2^16 and 2^32 times larger, a doubled one as much smaller.
// fp16 rounds every activation and gradient to 11 significant bits; the differences seen
// at N = 2 and 4 are below 1e-4 for the norm and 1e-3 for the moments.
class OneMultiplier : public ::testing::TestWithParam<int> {};

TEST_P(OneMultiplier, Fp16ReportsAndAppliesTheUnscaledClippedGradient) {
    const int stage = GetParam();
    const int me = test::world_rank();
    test::SharedDir dir("multiplier");
    if (me == 0) test::write_random_shard(dir.file("train.bin"), 20000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    // This rank's AdamW m and v after step 1, out of owned_optimizer_state's
    // [master, m, v] runs per unit.
    struct Moments {
        std::vector<double> m, v;
    };
    auto run = [&](const std::string& dtype, Moments& out) {
        Config c = test::tiny_mpi_config(dir.file("train.bin"), dir.file(dtype));
        c.train.max_steps = 1;
        c.parallel.zero_stage = stage;
        set_config_value(c, "precision.dtype", dtype);
        TrainOptions opt;
        opt.after_step = [&](long, ModelState& state, bool skipped) {
            ASSERT_FALSE(skipped) << dtype << " step 1 skipped";
            const std::vector<float> all = ModelStateTestAccess::owned_optimizer_state(state);
            size_t at = 0;
            for (int u = 0; u < state.layout().num_units(); ++u) {
                const size_t n = state.shards().owned_end(u) - state.shards().owned_begin(u);
                out.m.insert(out.m.end(), all.begin() + static_cast<long>(at + n), all.begin() + static_cast<long>(at + 2 * n));
                out.v.insert(out.v.end(), all.begin() + static_cast<long>(at + 2 * n), all.begin() + static_cast<long>(at + 3 * n));
                at += 3 * n;
            }
            ASSERT_EQ(at, all.size());
        };
        const TrainSummary s = train(c, opt);
        EXPECT_EQ(s.loss_scales.at(0), dtype == "fp16" ? 65536.0 : 1.0);
    };
    Moments ref, got;
    run("fp32", ref);
    run("fp16", got);
    auto relative_l2 = [](const std::vector<double>& a, const std::vector<double>& b) {
        double diff = 0.0, norm = 0.0;
        for (size_t i = 0; i < a.size(); ++i) {
            diff += (a[i] - b[i]) * (a[i] - b[i]);
            norm += b[i] * b[i];
        }
        return norm > 0 ? std::sqrt(diff / norm) : 0.0;
    };
    ASSERT_EQ(got.m.size(), ref.m.size());
    EXPECT_LT(relative_l2(got.m, ref.m), 0.01) << "AdamW m after step 1, stage " << stage << ", rank " << me;
    EXPECT_LT(relative_l2(got.v, ref.v), 0.01) << "AdamW v after step 1, stage " << stage << ", rank " << me;
    if (me != 0) return;
    const double norm32 = test::step_records(dir.file("fp32/metrics.jsonl")).at(0)["grad_norm"].get<double>();
    const double norm16 = test::step_records(dir.file("fp16/metrics.jsonl")).at(0)["grad_norm"].get<double>();
    EXPECT_GT(norm32, 0.5) << "clipping (grad_clip 0.5) must be active in step 1 for this test to cover it";
    EXPECT_NEAR(norm16, norm32, 1e-3 * norm32) << "fp16 grad_norm is not the unscaled norm (stage " << stage << ")";
}

INSTANTIATE_TEST_SUITE_P(AllStages, OneMultiplier, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// Reduced in a different dtype than the working one (fp32 work, bf16 wire; bf16 work, fp32
// wire): still tracks fp32 and moves the bytes the wire dtype says.
TEST(ReduceDtype, WireDtypeSetsTheBytesMoved) {
    const int me = test::world_rank();
    const int N = test::world_size();
    test::SharedDir dir("wire");
    if (me == 0) test::write_random_shard(dir.file("train.bin"), 20000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    Config a = test::tiny_mpi_config(dir.file("train.bin"), dir.file("a"));
    a.train.max_steps = 4;
    a.parallel.zero_stage = 1;
    const TrainSummary fp32 = train(a);
    Config b = a;
    b.run.dir = dir.file("b");
    b.precision.reduce_dtype = DType::kBF16;
    const TrainSummary wire16 = train(b);
    for (size_t i = 0; i < fp32.losses.size(); ++i) {
        EXPECT_NEAR(wire16.losses[i], fp32.losses[i], 0.01 * fp32.losses[i]) << "step " << i + 1;
    }
    // Step 1's bytes moved per collective.
    auto first_step = [](const std::string& path) { return test::step_records(path).at(0)["comm_bytes"]; };
    if (me == 0 && N > 1) {
        const auto ca = first_step(dir.file("a/metrics.jsonl"));
        const auto cb = first_step(dir.file("b/metrics.jsonl"));
        EXPECT_EQ(cb["reduce_scatter"].get<uint64_t>() * 2, ca["reduce_scatter"].get<uint64_t>())
            << "a bf16 wire should move half the gradient bytes of fp32";
        EXPECT_EQ(cb["all_gather"], ca["all_gather"]) << "parameters stay in the fp32 working dtype";
    }
    // bf16 work: its own wire vs an fp32 wire. Tolerance 3% as in TracksFp32 (bf16 work).
    Config c = a;
    c.run.dir = dir.file("c");
    c.precision.dtype = DType::kBF16;
    train(c);
    Config d = c;
    d.run.dir = dir.file("d");
    d.precision.reduce_dtype = DType::kF32;
    const TrainSummary wire32 = train(d);
    for (size_t i = 0; i < fp32.losses.size(); ++i) {
        EXPECT_NEAR(wire32.losses[i], fp32.losses[i], 0.03 * fp32.losses[i]) << "bf16 work, fp32 wire, step " << i + 1;
    }
    if (me == 0 && N > 1) {
        const auto cc = first_step(dir.file("c/metrics.jsonl"));
        const auto cd = first_step(dir.file("d/metrics.jsonl"));
        EXPECT_EQ(cc["reduce_scatter"].get<uint64_t>() * 2, cd["reduce_scatter"].get<uint64_t>())
            << "an fp32 wire should move twice the gradient bytes of bf16";
        EXPECT_EQ(cd["all_gather"], cc["all_gather"]) << "parameters stay in the bf16 working dtype";
    }
}

}  // namespace
}  // namespace zt
