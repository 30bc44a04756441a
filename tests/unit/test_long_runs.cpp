// The long-run pieces that need no ranks: the straggler report's verdicts (a slow rank
// named with its host and phase, noise and one-off pauses not), the skipped spans of
// loss-spike rollbacks applied to the data cursor, and rollback records kept when a
// resume supersedes metrics. (Ranks, checksums and rollbacks end to end:
// tests/cli/test_stragglers.sh, test_replica_check.sh, test_spike_rollback.sh.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/train/metrics.hpp"
#include "ztrain/train/spike_guard.hpp"
#include "ztrain/train/straggler_report.hpp"

namespace zt {
namespace {

/// Four ranks of a 100 ms step: compute 60 ms each, rank `slow` computing `slow_ms`
/// (the others waiting for it), each one's time in backward.
std::vector<RankStepTimes> step_times(int slow, double slow_ms) {
    std::vector<RankStepTimes> ranks(4);
    for (int r = 0; r < 4; ++r) {
        RankStepTimes& t = ranks[static_cast<size_t>(r)];
        t.compute_ms = r == slow ? slow_ms : 60.0;
        t.step_ms = 100.0;
        t.phase_ms = {20.0, t.compute_ms - 30.0, 100.0 - t.compute_ms, 10.0};
    }
    return ranks;
}

TEST(StragglerReport, NamesASlowRankWithItsHostAndPhase) {
    StragglerReport report(5, {"a", "a", "b", "b"});
    std::optional<Stragglers> s;
    for (long step = 1; step <= 5; ++step) s = report.add(step, step_times(2, 90.0), step == 1);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->ranks, std::vector<int>{2});
    EXPECT_EQ(s->hosts, std::vector<std::string>{"b"});
    EXPECT_EQ(s->phase, "backward");
    EXPECT_NEAR(s->ratios[0], 1.5, 1e-12);
    EXPECT_EQ(s->first_step, 2);  // the warm-up step left out
    EXPECT_NE(describe(*s).find("rank 2 (b) 1.5x the median compute time"), std::string::npos) << describe(*s);
}

TEST(StragglerReport, QuietForNoiseAndForOnePause) {
    StragglerReport report(4, {"a", "a", "a", "a"});
    // 15% slower: under the 20% the report asks for.
    for (long step = 1; step <= 4; ++step) EXPECT_FALSE(report.add(step, step_times(1, 69.0), false));
    // Slow in one step of four (a pause), however much: not a straggler.
    for (long step = 5; step <= 8; ++step) {
        EXPECT_FALSE(report.add(step, step == 6 ? step_times(3, 400.0) : step_times(-1, 0), false));
    }
    // 2x slower, but 5 ms of a 100 ms step: noise where communication dominates.
    std::vector<RankStepTimes> small = step_times(-1, 0);
    for (RankStepTimes& t : small) t.compute_ms = 5.0;
    small[0].compute_ms = 10.0;
    for (long step = 9; step <= 12; ++step) EXPECT_FALSE(report.add(step, small, false));
    // One rank: nothing to compare with; report_every 0: never.
    StragglerReport off(0, {"a", "a", "a", "a"});
    EXPECT_FALSE(off.add(5, step_times(2, 200.0), false));
}

TEST(ComputeExtremes, SlowestAndFastestRank) {
    const ComputeExtremes e = compute_extremes(step_times(3, 80.0));
    EXPECT_EQ(e.slowest_rank, 3);
    EXPECT_DOUBLE_EQ(e.slowest_ms, 80.0);
    EXPECT_EQ(e.fastest_rank, 0);
    EXPECT_DOUBLE_EQ(e.fastest_ms, 60.0);
}

TEST(SkippedSpans, MoveTheCursorPastEachSpanItReaches) {
    TrainProgress p;
    p.skipped = {{80, 16}, {96, 8}, {200, 8}};
    p.samples_seen = 72;
    apply_skipped_spans(p);
    EXPECT_EQ(p.samples_seen, 72u);  // no span starts here
    p.samples_seen = 80;
    apply_skipped_spans(p);
    EXPECT_EQ(p.samples_seen, 104u);  // two adjacent spans, skipped in one go
}

TEST(SupersedeMetrics, KeepsRollbackRecords) {
    test::ScratchDir dir("metrics_rollback");
    const std::string path = dir.file("metrics.jsonl");
    test::write_file(path,
                     "{\"step\":1,\"loss\":3.0}\n{\"event\":\"rollback\",\"step\":3,\"to_step\":1,\"skipped_batches\":[2,3]}\n"
                     "{\"step\":2,\"loss\":2.0}\n");
    EXPECT_EQ(supersede_metrics(path, 1).superseded, 1u);
    EXPECT_EQ(test::read_file(path),
              "{\"step\":1,\"loss\":3.0}\n{\"event\":\"rollback\",\"step\":3,\"to_step\":1,\"skipped_batches\":[2,3]}\n");
}

}  // namespace
}  // namespace zt
