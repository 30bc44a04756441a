// The loss-scale policy's verdicts (apply / skip / stop) and what it keeps across a resume,
// without a model: the overflow flags are fed by hand.
#include <gtest/gtest.h>

#include <string>

#include "ztrain/config/config.hpp"
#include "ztrain/optim/loss_scale_policy.hpp"

namespace zt {
namespace {

using Action = LossScalePolicy::Action;

PrecisionConfig fp16_dynamic(double init_scale, int hysteresis, double min_scale) {
    PrecisionConfig p;
    p.init_scale = init_scale;
    p.hysteresis = hysteresis;
    p.min_scale = min_scale;
    return p;
}

TEST(LossScalePolicy, Fp32AndBf16RunUnscaledAndStopAfterMaxBadSteps) {
    for (const DType work : {DType::kF32, DType::kBF16}) {
        LossScalePolicy policy(work, PrecisionConfig{}, 3);
        EXPECT_EQ(policy.scale(), 1.0);
        EXPECT_STREQ(policy.mode(), "none");
        EXPECT_EQ(policy.judge(false, 1, 2.0).action, Action::kApply);
        EXPECT_EQ(policy.judge(true, 2, 2.5).action, Action::kSkip);
        EXPECT_EQ(policy.judge(true, 3, 2.5).action, Action::kSkip);
        const LossScalePolicy::Verdict stop = policy.judge(true, 4, 7.5);
        EXPECT_EQ(stop.action, Action::kStop);
        EXPECT_TRUE(stop.skipped());
        EXPECT_EQ(stop.stop_reason, "step 4: 3 consecutive steps with non-finite gradients (train.max_bad_steps = 3); "
                                    "last loss 7.5. The run is diverging: lower train.lr or check the data");
        EXPECT_EQ(policy.scale(), 1.0);
    }
}

TEST(LossScalePolicy, ACleanStepResetsTheBadStepCount) {
    LossScalePolicy policy(DType::kBF16, PrecisionConfig{}, 2);
    EXPECT_EQ(policy.judge(true, 1, 1.0).action, Action::kSkip);
    EXPECT_EQ(policy.record().bad_steps, 1);
    EXPECT_EQ(policy.judge(false, 2, 1.0).action, Action::kApply);
    EXPECT_EQ(policy.record().bad_steps, 0);
    EXPECT_EQ(policy.judge(true, 3, 1.0).action, Action::kSkip);
}

TEST(LossScalePolicy, DynamicFp16BacksOffThenStopsAtTheFloor) {
    // init 4, floor 1, hysteresis 1: every overflow halves; at 1 the next one stops the run.
    LossScalePolicy policy(DType::kF16, fp16_dynamic(4, 1, 1), 2);
    EXPECT_STREQ(policy.mode(), "dynamic");
    EXPECT_EQ(policy.judge(true, 1, 1.0).action, Action::kSkip);
    EXPECT_EQ(policy.scale(), 2.0);
    EXPECT_EQ(policy.judge(true, 2, 1.0).action, Action::kSkip) << "dynamic fp16 ignores train.max_bad_steps";
    EXPECT_EQ(policy.scale(), 1.0);
    const LossScalePolicy::Verdict stop = policy.judge(true, 3, 1.0);
    EXPECT_EQ(stop.action, Action::kStop);
    EXPECT_EQ(stop.stop_reason, "step 3: fp16 gradients overflow even at the minimum loss scale 1 "
                                "(precision.min_scale); the run cannot continue in fp16: try bf16, a lower train.lr, "
                                "or a lower precision.min_scale");
}

TEST(LossScalePolicy, StaticFp16KeepsItsScaleAndStopsAfterMaxBadSteps) {
    Config c;
    set_config_value(c, "precision.loss_scale", "1e30");
    const PrecisionConfig& p = c.precision;
    LossScalePolicy policy(DType::kF16, p, 2);
    EXPECT_STREQ(policy.mode(), "static");
    EXPECT_FALSE(policy.dynamic());
    EXPECT_EQ(policy.scale(), 1e30);
    EXPECT_EQ(policy.judge(true, 1, 1.0).action, Action::kSkip);
    EXPECT_EQ(policy.scale(), 1e30);
    const LossScalePolicy::Verdict stop = policy.judge(true, 2, 1.0);
    EXPECT_EQ(stop.action, Action::kStop);
    EXPECT_NE(stop.stop_reason.find("at the static loss scale precision.loss_scale = 1e30 (train.max_bad_steps = 2)"),
              std::string::npos)
        << stop.stop_reason;
}

TEST(LossScalePolicy, RestoreContinuesOnlyTheSameFp16Mode) {
    LossScaleRecord saved;
    saved.dtype = "fp16";
    saved.mode = "dynamic";
    saved.scale = 512;
    saved.clean_steps = 7;
    saved.hysteresis_left = 1;
    saved.bad_steps = 2;
    LossScalePolicy same(DType::kF16, PrecisionConfig{}, 5);
    EXPECT_EQ(same.restore(saved), "");
    EXPECT_EQ(same.scale(), 512.0);
    const LossScaleRecord back = same.record();
    EXPECT_EQ(back.clean_steps, 7);
    EXPECT_EQ(back.hysteresis_left, 1);
    EXPECT_EQ(back.bad_steps, 2);

    // From a bf16 checkpoint: the deck's init_scale, and a note saying why.
    LossScaleRecord bf16;
    bf16.dtype = "bf16";
    bf16.mode = "none";
    bf16.bad_steps = 1;
    LossScalePolicy fresh(DType::kF16, PrecisionConfig{}, 5);
    EXPECT_EQ(fresh.restore(bf16),
              "the checkpoint was written in bf16: the fp16 loss scale starts at 65536 (precision.init_scale)");
    EXPECT_EQ(fresh.scale(), 65536.0);
    EXPECT_EQ(fresh.record().bad_steps, 1);

    // bf16 resuming anything: nothing to say.
    LossScalePolicy unscaled(DType::kBF16, PrecisionConfig{}, 5);
    EXPECT_EQ(unscaled.restore(saved), "");
    EXPECT_EQ(unscaled.scale(), 1.0);
}

}  // namespace
}  // namespace zt
