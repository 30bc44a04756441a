// The dynamic loss scaler as a state machine: growth, backoff, hysteresis, minimum.
#include <gtest/gtest.h>

#include "ztrain/config/config.hpp"
#include "ztrain/optim/loss_scaler.hpp"

namespace zt {
namespace {

using Outcome = LossScaler::Outcome;

TEST(LossScaler, DefaultsMatchTheCommonFrameworks) {
    LossScalerConfig c;
    EXPECT_EQ(c.init_scale, 65536.0);
    EXPECT_EQ(c.growth_interval, 2000);
    EXPECT_EQ(c.backoff_factor, 0.5);
    EXPECT_EQ(c.growth_factor, 2.0);
    EXPECT_EQ(c.hysteresis, 2);
    EXPECT_EQ(c.min_scale, 1.0);
}

// The precision.* keys a deck starts from: the dynamic scaler (2^16, 2000, 2, 1),
// the same numbers as the scaler's own defaults.
TEST(LossScaler, PrecisionConfigDefaultsAreTheDynamicScalersDefaults) {
    const PrecisionConfig p;
    EXPECT_EQ(p.dtype, DType::kF32);
    EXPECT_FALSE(p.reduce_dtype.has_value()) << "unset: reduce in the working dtype";
    EXPECT_TRUE(p.loss_scale.dynamic);
    EXPECT_EQ(p.loss_scale.text, "dynamic");
    EXPECT_EQ(p.init_scale, 65536.0);
    EXPECT_EQ(p.growth_interval, 2000);
    EXPECT_EQ(p.hysteresis, 2);
    EXPECT_EQ(p.min_scale, 1.0);
    const LossScalerConfig s;
    EXPECT_TRUE(s.dynamic);
    EXPECT_EQ(p.init_scale, s.init_scale);
    EXPECT_EQ(p.growth_interval, s.growth_interval);
    EXPECT_EQ(p.hysteresis, s.hysteresis);
    EXPECT_EQ(p.min_scale, s.min_scale);
}

TEST(LossScaler, AtTheFloorHysteresis2AbsorbsOneOverflowAndReportsTheSecond) {
    LossScalerConfig c;
    c.init_scale = 1.0;
    c.min_scale = 1.0;
    ASSERT_EQ(c.hysteresis, 2);
    LossScaler s(c);
    EXPECT_EQ(s.update(true), Outcome::kSkipped) << "the first overflow at the floor is absorbed";
    EXPECT_EQ(s.scale(), 1.0);
    EXPECT_EQ(s.update(true), Outcome::kStuckAtMinimum) << "the second would halve below the floor";
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanSteps) {
    LossScalerConfig c;
    c.growth_interval = 3;
    LossScaler s(c);
    EXPECT_EQ(s.update(false), Outcome::kApplied);
    EXPECT_EQ(s.update(false), Outcome::kApplied);
    EXPECT_EQ(s.scale(), 65536.0) << "grew too early";
    EXPECT_EQ(s.update(false), Outcome::kApplied);
    EXPECT_EQ(s.scale(), 131072.0) << "did not grow after 3 clean steps";
    EXPECT_EQ(s.clean_steps(), 0);
}

TEST(LossScaler, HysteresisDelaysBackoffAndOverflowResetsTheGrowthCount) {
    LossScalerConfig c;
    c.growth_interval = 3;
    c.hysteresis = 2;
    LossScaler s(c);
    s.update(false);
    s.update(false);
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.scale(), 65536.0) << "first overflow must be absorbed by hysteresis 2";
    EXPECT_EQ(s.clean_steps(), 0) << "an overflow restarts the clean-step count";
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.scale(), 32768.0) << "second overflow halves the scale";
    EXPECT_EQ(s.hysteresis_left(), 2) << "hysteresis re-arms after a backoff";
}

TEST(LossScaler, WithoutHysteresisEveryOverflowHalves) {
    LossScalerConfig c;
    c.hysteresis = 1;
    LossScaler s(c);
    for (int i = 1; i <= 4; ++i) {
        EXPECT_EQ(s.update(true), Outcome::kSkipped);
        EXPECT_EQ(s.scale(), 65536.0 / (1 << i)) << "after overflow " << i;
    }
}

TEST(LossScaler, FloorsAtMinimumThenReportsBeingStuck) {
    LossScalerConfig c;
    c.hysteresis = 1;
    c.init_scale = 4.0;
    c.min_scale = 1.0;
    LossScaler s(c);
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.scale(), 2.0);
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.scale(), 1.0);
    EXPECT_EQ(s.update(true), Outcome::kStuckAtMinimum);
    EXPECT_EQ(s.scale(), 1.0) << "never below the minimum";
}

TEST(LossScaler, StaticModeNeverChangesTheScaleButStillSkips) {
    LossScalerConfig c;
    c.dynamic = false;
    c.init_scale = 128.0;
    c.growth_interval = 1;
    LossScaler s(c);
    EXPECT_EQ(s.update(false), Outcome::kApplied);
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScaler, RestoreRoundTripsTheState) {
    LossScalerConfig c;
    LossScaler s(c);
    s.restore(512.0, 17, 1);
    EXPECT_EQ(s.scale(), 512.0);
    EXPECT_EQ(s.clean_steps(), 17);
    EXPECT_EQ(s.update(true), Outcome::kSkipped);
    EXPECT_EQ(s.scale(), 256.0) << "restored hysteresis 1 means the next overflow backs off";
}

}  // namespace
}  // namespace zt
