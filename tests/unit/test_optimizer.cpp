// The optimizer's helpers against hand-worked values: the learning-rate schedules (warmup,
// then cosine / linear / constant down to lr_min), the global-norm clip multiplier, the
// AdamW step parameters, and decay_segments (which elements get weight decay).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"

#include "test_support.hpp"

namespace zt {
namespace {

constexpr double kTol = 1e-12;

/// lr 1e-3 -> lr_min 1e-4, 4 warmup steps, 14 steps: the decay runs over steps 4..14.
TrainConfig schedule_config(LrSchedule schedule) {
    TrainConfig c;
    c.lr = 1e-3;
    c.lr_min = 1e-4;
    c.warmup_steps = 4;
    c.max_steps = 14;
    c.schedule = schedule;
    return c;
}

// --- learning_rate ---------------------------------------------------------------------

TEST(LearningRate, WarmupIsLinearFromLrOverWarmupToLr) {
    for (const LrSchedule schedule : {LrSchedule::kCosine, LrSchedule::kLinear, LrSchedule::kConstant, LrSchedule::kWsd}) {
        const TrainConfig c = schedule_config(schedule);
        // Step s (0-based) of the warmup: lr * (s + 1) / warmup_steps.
        EXPECT_NEAR(learning_rate(c, 0), 2.5e-4, kTol) << setting_text(schedule);
        EXPECT_NEAR(learning_rate(c, 1), 5.0e-4, kTol) << setting_text(schedule);
        EXPECT_NEAR(learning_rate(c, 2), 7.5e-4, kTol) << setting_text(schedule);
        EXPECT_NEAR(learning_rate(c, 3), 1.0e-3, kTol) << setting_text(schedule);
        // The first step after the warmup is at the peak.
        EXPECT_NEAR(learning_rate(c, 4), 1.0e-3, kTol) << setting_text(schedule);
    }
}

TEST(LearningRate, CosineDecaysToLrMin) {
    const TrainConfig c = schedule_config(LrSchedule::kCosine);
    // lr_min + (lr - lr_min) * (1 + cos(pi * p)) / 2 with p = (step - 4) / 10.
    // p = 0.2: (1 + cos 36 deg) / 2 = (1 + 0.80901699437) / 2 = 0.904508497187
    EXPECT_NEAR(learning_rate(c, 6), 1e-4 + 9e-4 * 0.904508497187, kTol);
    // p = 0.5: halfway between lr and lr_min.
    EXPECT_NEAR(learning_rate(c, 9), 5.5e-4, kTol);
    // p = 0.8: (1 + cos 144 deg) / 2 = (1 - 0.80901699437) / 2 = 0.095491502813
    EXPECT_NEAR(learning_rate(c, 12), 1e-4 + 9e-4 * 0.095491502813, kTol);
    // At max_steps and beyond: lr_min.
    EXPECT_NEAR(learning_rate(c, 14), 1e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 40), 1e-4, kTol);
}

TEST(LearningRate, LinearDecaysToLrMin) {
    const TrainConfig c = schedule_config(LrSchedule::kLinear);
    // lr - (lr - lr_min) * p with p = (step - 4) / 10.
    EXPECT_NEAR(learning_rate(c, 6), 8.2e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 9), 5.5e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 13), 1.9e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 14), 1e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 40), 1e-4, kTol);
}

TEST(LearningRate, ConstantStaysAtLr) {
    const TrainConfig c = schedule_config(LrSchedule::kConstant);
    for (long step : {4L, 9L, 13L, 14L, 40L}) {
        EXPECT_NEAR(learning_rate(c, step), 1e-3, kTol) << "step " << step;
    }
}

TEST(LearningRate, WsdHoldsThePeakThenDecaysOverTheLastFraction) {
    TrainConfig c = schedule_config(LrSchedule::kWsd);
    // decay_fraction 0.2 of the 10 steps after warmup: steps 12 and 13 decay, p = (step - 12) / 2.
    for (long step = 4; step <= 12; ++step) EXPECT_NEAR(learning_rate(c, step), 1e-3, kTol) << "step " << step;
    EXPECT_NEAR(learning_rate(c, 13), 5.5e-4, kTol);  // linear, p = 0.5
    EXPECT_NEAR(learning_rate(c, 14), 1e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 40), 1e-4, kTol);
    c.decay_shape = DecayShape::kCosine;
    EXPECT_NEAR(learning_rate(c, 13), 5.5e-4, kTol);  // (1 + cos(pi / 2)) / 2 = 0.5
    c.decay_shape = DecayShape::kOneMinusSqrt;
    EXPECT_NEAR(learning_rate(c, 13), 1e-4 + 9e-4 * (1 - 0.707106781187), kTol);
    EXPECT_NEAR(learning_rate(c, 14), 1e-4, kTol);
    // The whole span decaying linearly is the linear schedule; schedule_steps ends it early.
    c.decay_shape = DecayShape::kLinear;
    c.decay_fraction = 1.0;
    const TrainConfig linear = schedule_config(LrSchedule::kLinear);
    for (long step = 0; step <= 16; ++step) {
        EXPECT_NEAR(learning_rate(c, step), learning_rate(linear, step), kTol) << "step " << step;
    }
    // A cooldown counted in steps: the last 4 before max_steps, whatever the fraction says.
    c.decay_steps = 4;
    EXPECT_NEAR(learning_rate(c, 9), 1e-3, kTol);
    EXPECT_NEAR(learning_rate(c, 10), 1e-3, kTol);  // p = 0
    EXPECT_NEAR(learning_rate(c, 12), 5.5e-4, kTol);  // p = 0.5
    EXPECT_NEAR(learning_rate(c, 14), 1e-4, kTol);
    c.decay_steps = 100;  // more than the 10 after warmup: all of them
    EXPECT_NEAR(learning_rate(c, 9), 5.5e-4, kTol);
    c.decay_steps = 0;
    c.decay_fraction = 0.5;
    c.schedule_steps = 8;  // 4 steps after warmup, 2 of them decaying: 6 and 7
    EXPECT_NEAR(learning_rate(c, 6), 1e-3, kTol);
    EXPECT_NEAR(learning_rate(c, 7), 5.5e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 8), 1e-4, kTol);
    EXPECT_NEAR(learning_rate(c, 13), 1e-4, kTol);
}

TEST(LearningRate, NoWarmupStartsAtThePeak) {
    TrainConfig c = schedule_config(LrSchedule::kCosine);
    c.warmup_steps = 0;
    c.max_steps = 10;
    EXPECT_NEAR(learning_rate(c, 0), 1e-3, kTol);
    EXPECT_NEAR(learning_rate(c, 5), 5.5e-4, kTol);  // p = 0.5
    EXPECT_NEAR(learning_rate(c, 10), 1e-4, kTol);
    c.schedule = LrSchedule::kLinear;
    EXPECT_NEAR(learning_rate(c, 0), 1e-3, kTol);
    EXPECT_NEAR(learning_rate(c, 5), 5.5e-4, kTol);
}

TEST(LearningRate, WarmupAsLongAsTheRunNeverDivides) {
    // max_steps == warmup_steps: every step is warmup; past it the decay is already done.
    TrainConfig c = schedule_config(LrSchedule::kCosine);
    c.max_steps = 4;
    EXPECT_NEAR(learning_rate(c, 3), 1e-3, kTol);
    EXPECT_NEAR(learning_rate(c, 4), 1e-3, kTol);  // p = 0 / max(1, 0)
    EXPECT_NEAR(learning_rate(c, 5), 1e-4, kTol);  // p = 1
}

// --- clip_multiplier -------------------------------------------------------------------

TEST(ClipMultiplier, ScalesOnlyNormsAboveTheClip) {
    EXPECT_DOUBLE_EQ(clip_multiplier(2.0, 1.0), 0.5);
    EXPECT_DOUBLE_EQ(clip_multiplier(8.0, 2.0), 0.25);
    EXPECT_DOUBLE_EQ(clip_multiplier(0.5, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(clip_multiplier(1.0, 1.0), 1.0);  // at the clip: unchanged
    EXPECT_DOUBLE_EQ(clip_multiplier(0.0, 1.0), 1.0);
    // clip <= 0 disables clipping.
    EXPECT_DOUBLE_EQ(clip_multiplier(100.0, 0.0), 1.0);
    EXPECT_DOUBLE_EQ(clip_multiplier(100.0, -1.0), 1.0);
}

// --- adamw_step_params -----------------------------------------------------------------

TEST(AdamWStepParams, BiasCorrectionsOfStepT) {
    TrainConfig c;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-8;
    c.weight_decay = 0.1;
    const AdamWStep s1 = adamw_step_params(c, 3e-4, 1);
    EXPECT_FLOAT_EQ(s1.lr, 3e-4f);
    EXPECT_FLOAT_EQ(s1.beta1, 0.9f);
    EXPECT_FLOAT_EQ(s1.beta2, 0.95f);
    EXPECT_FLOAT_EQ(s1.eps, 1e-8f);
    EXPECT_FLOAT_EQ(s1.weight_decay, 0.1f);
    EXPECT_FLOAT_EQ(s1.bias_correction1, 0.1f);   // 1 - 0.9
    EXPECT_FLOAT_EQ(s1.bias_correction2, 0.05f);  // 1 - 0.95
    const AdamWStep s2 = adamw_step_params(c, 3e-4, 2);
    EXPECT_FLOAT_EQ(s2.bias_correction1, 0.19f);    // 1 - 0.81
    EXPECT_FLOAT_EQ(s2.bias_correction2, 0.0975f);  // 1 - 0.9025
    EXPECT_FLOAT_EQ(s2.grad_scale, 1.f);            // the caller sets it
}

// --- decay_segments --------------------------------------------------------------------

using test::model_config;

/// One layer, 3 wide, vocabulary 10 unpadded, 3 positions: every tensor is small, and the
/// 16-float alignment leaves gaps between them.
ModelConfig small_model() { return model_config(1, 1, 3, 3, 10, 1); }

using Segments = std::vector<std::vector<size_t>>;  // {begin, end, decay}

Segments segments(const ModelLayout& layout, int unit, size_t begin, size_t end) {
    Segments out;
    for (const DecaySegment& s : decay_segments(layout, unit, begin, end)) {
        out.push_back({s.begin, s.end, s.decay ? size_t{1} : size_t{0}});
    }
    return out;
}

TEST(DecaySegments, TwoDimensionalWeightsAndBothEmbeddingsDecay) {
    const ModelLayout layout = make_model_layout(small_model());
    // Decay on exactly the 2-D weights: both embeddings (wte is tied to the LM head) and the
    // four matrices of each block; never a bias or a LayerNorm parameter.
    const std::set<std::string> decayed = {"wte.weight",           "wpe.weight",
                                           "h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight",
                                           "h.0.mlp.c_fc.weight",  "h.0.mlp.c_proj.weight"};
    int seen = 0;
    for (const ParamSpec& p : layout.params) {
        EXPECT_EQ(p.decay, decayed.count(p.name) == 1) << p.name;
        EXPECT_EQ(p.decay, p.shape.size() == 2) << p.name;
        seen += decayed.count(p.name) == 1 ? 1 : 0;
    }
    EXPECT_EQ(seen, 6);
}

TEST(DecaySegments, EmbeddingUnit) {
    const ModelLayout layout = make_model_layout(small_model());
    // wte (10 x 3) at 0..30, a 2-element alignment gap, wpe (3 x 3) at 32..41.
    ASSERT_EQ(layout.unit_numel[0], 41u);
    EXPECT_EQ(segments(layout, 0, 0, 41), (Segments{{0, 30, 1}, {30, 32, 0}, {32, 41, 1}}));
}

TEST(DecaySegments, BlockUnitByHand) {
    const ModelLayout layout = make_model_layout(small_model());
    // C = 3, tensors start at multiples of 16:
    //   ln_1.weight 0..3  ln_1.bias 16..19  c_attn.weight 32..59  c_attn.bias 64..73
    //   attn.c_proj.weight 80..89  attn.c_proj.bias 96..99  ln_2.weight 112..115
    //   ln_2.bias 128..131  c_fc.weight 144..180  c_fc.bias 192..204
    //   mlp.c_proj.weight 208..244  mlp.c_proj.bias 256..259
    // Biases, LayerNorm and the gaps between tensors merge into no-decay runs.
    ASSERT_EQ(layout.unit_numel[1], 259u);
    const Segments whole = {{0, 32, 0},    {32, 59, 1},   {59, 80, 0},   {80, 89, 1},  {89, 144, 0},
                            {144, 180, 1}, {180, 208, 0}, {208, 244, 1}, {244, 259, 0}};
    EXPECT_EQ(segments(layout, 1, 0, 259), whole);
    // A range past the unit's end is clipped to it.
    EXPECT_EQ(segments(layout, 1, 0, 100000), whole);
    // A sub-range (a rank's shard) is cut at its edges.
    EXPECT_EQ(segments(layout, 1, 50, 100), (Segments{{50, 59, 1}, {59, 80, 0}, {80, 89, 1}, {89, 100, 0}}));
    EXPECT_EQ(segments(layout, 1, 33, 40), (Segments{{33, 40, 1}}));
    EXPECT_TRUE(segments(layout, 1, 60, 60).empty());
    EXPECT_TRUE(segments(layout, 1, 300, 400).empty());
}

TEST(DecaySegments, FinalLayerNormNeverDecays) {
    const ModelLayout layout = make_model_layout(small_model());
    ASSERT_EQ(layout.num_units(), 3);
    // ln_f.weight 0..3, ln_f.bias 16..19.
    EXPECT_EQ(segments(layout, 2, 0, 19), (Segments{{0, 19, 0}}));
}

TEST(DecaySegments, CoverTheRangeAndMatchTheManifest) {
    const ModelLayout layout = make_model_layout(model_config(2, 2, 24, 7, 257, 64));
    for (int u = 0; u < layout.num_units(); ++u) {
        const size_t n = layout.unit_numel[static_cast<size_t>(u)];
        // Element by element: decay exactly inside a decayed tensor.
        std::vector<int> want(n, 0);
        for (const ParamSpec& p : layout.params) {
            if (p.unit != u) continue;
            for (size_t i = p.offset; i < p.offset + p.numel; ++i) want[i] = p.decay ? 1 : 0;
        }
        for (size_t begin : {size_t{0}, size_t{5}, n / 3}) {
            const std::vector<DecaySegment> segs = decay_segments(layout, u, begin, n);
            size_t cursor = begin;
            for (size_t k = 0; k < segs.size(); ++k) {
                EXPECT_EQ(segs[k].begin, cursor) << "unit " << u << " segment " << k;
                EXPECT_LT(segs[k].begin, segs[k].end) << "unit " << u << " segment " << k;
                if (k > 0) {
                    EXPECT_NE(segs[k].decay, segs[k - 1].decay) << "unit " << u << " unmerged";
                }
                for (size_t i = segs[k].begin; i < segs[k].end; ++i) {
                    ASSERT_EQ(want[i], segs[k].decay ? 1 : 0) << "unit " << u << " element " << i;
                }
                cursor = segs[k].end;
            }
            EXPECT_EQ(cursor, n) << "unit " << u;
        }
    }
}

}  // namespace
}  // namespace zt
