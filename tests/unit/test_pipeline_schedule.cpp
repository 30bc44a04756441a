// Pipeline schedules as data (parallel/pipeline_schedule.hpp): every schedule runs on the
// clock without breaking a dependency, and its bubble and activations in flight are the
// published ones: 1F1B (P - 1) / m with at most P - s micro-batches on stage s; Megatron's
// interleaved (P - 1) / (v m); zero-bubble ZB-H1 (Qi et al. 2024) a bubble of
// (P - 1)(F + B - W) at 1F1B's peak memory. Broken orders are refused by name. Between any two
// stages, messages arrive in the order they are sent (NCCL pairs a peer's sends and receives
// by order, not by tag).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ztrain/core/error.hpp"
#include "ztrain/parallel/pipeline_schedule.hpp"

namespace zt {
namespace {

using Schedule = std::vector<std::vector<PipelinePass>>;

std::string shape_text(PipelineScheduleKind kind, PipelineShape s) {
    return str(pipeline_schedule_name(kind), " P=", s.stages, " m=", s.micro_batches, " v=", s.virtual_stages);
}

/// The message run_pipeline_schedule refuses `schedule` with ("" when it accepts it).
std::string refusal(const Schedule& schedule, PipelineShape shape, PipelineScheduleKind kind) {
    try {
        run_pipeline_schedule(schedule, shape, kind);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(PipelineSchedule, OneForwardOneBackwardHasTheBubbleOfMegatron) {
    for (int P : {1, 2, 3, 4, 8}) {
        for (int m : {P, 2 * P, 8, 16}) {
            const PipelineShape shape{P, m, 1};
            const std::string what = shape_text(PipelineScheduleKind::k1F1B, shape);
            const PipelineTimeline t =
                run_pipeline_schedule(make_pipeline_schedule(PipelineScheduleKind::k1F1B, shape), shape,
                                      PipelineScheduleKind::k1F1B);
            EXPECT_NEAR(t.bubble_fraction(), static_cast<double>(P - 1) / m, 1e-12) << what;
            EXPECT_DOUBLE_EQ(t.makespan, 3.0 * (m + P - 1)) << what;  // F 1, B 2
            for (int s = 0; s < P; ++s) {
                EXPECT_EQ(t.peak_in_flight[static_cast<size_t>(s)], std::min(P - s, m)) << what << " stage " << s;
            }
        }
    }
}

TEST(PipelineSchedule, InterleavedDividesTheBubbleByTheChunks) {
    for (int P : {2, 4}) {
        for (int v : {2, 3, 4}) {
            for (int m : {P, 2 * P, 4 * P}) {
                const PipelineShape shape{P, m, v};
                const std::string what = shape_text(PipelineScheduleKind::kInterleaved, shape);
                // A chunk holds 1/v of a stage's layers.
                const PassCosts chunk{1.0 / v, 1.0 / v, 1.0 / v};
                const PipelineTimeline t =
                    run_pipeline_schedule(make_pipeline_schedule(PipelineScheduleKind::kInterleaved, shape), shape,
                                          PipelineScheduleKind::kInterleaved, chunk);
                EXPECT_NEAR(t.bubble_fraction(), static_cast<double>(P - 1) / (v * m), 1e-9) << what;
            }
        }
    }
}

TEST(PipelineSchedule, ZeroBubbleFillsTheBubbleWithWeightGradientsAtOneFOneBMemory) {
    for (int P : {2, 3, 4, 8}) {
        for (int m : {P, 2 * P, 3 * P + 1, 16, 32}) {
            const PipelineShape shape{P, m, 1};
            const std::string what = shape_text(PipelineScheduleKind::kZeroBubble, shape);
            const PipelineTimeline zb =
                run_pipeline_schedule(make_pipeline_schedule(PipelineScheduleKind::kZeroBubble, shape), shape,
                                      PipelineScheduleKind::kZeroBubble);
            const PipelineTimeline one =
                run_pipeline_schedule(make_pipeline_schedule(PipelineScheduleKind::k1F1B, shape), shape,
                                      PipelineScheduleKind::k1F1B);
            // ZB-H1's bubble: (P - 1)(F + B - W) = P - 1 with unit passes, against 1F1B's 3 (P - 1).
            const double worst = *std::max_element(zb.idle.begin(), zb.idle.end());
            EXPECT_DOUBLE_EQ(worst, P - 1.0) << what;
            EXPECT_DOUBLE_EQ(*std::max_element(one.idle.begin(), one.idle.end()), 3.0 * (P - 1)) << what;
            // Activations wait for W: later stages keep more than under 1F1B, none more than its peak.
            const int one_peak = *std::max_element(one.peak_in_flight.begin(), one.peak_in_flight.end());
            EXPECT_EQ(one_peak, std::min(P, m)) << what;
            for (int s = 0; s < P; ++s) {
                EXPECT_LE(zb.peak_in_flight[static_cast<size_t>(s)], one_peak) << what << " stage " << s;
            }
        }
    }
}

TEST(PipelineSchedule, SharedProcessorsRunWaitingStagesSharesElsewhere) {
    for (PipelineScheduleKind kind :
         {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kInterleaved, PipelineScheduleKind::kZeroBubble}) {
        const int v = kind == PipelineScheduleKind::kInterleaved ? 2 : 1;
        const PipelineShape shape{4, 8, v};
        const std::string what = shape_text(kind, shape);
        const Schedule schedule = make_pipeline_schedule(kind, shape);
        const PassCosts costs{1.0, 1.5, 0.5};
        const PipelineTimeline own = run_pipeline_schedule(schedule, shape, kind, costs);
        // A processor for every stage: the clock of run_pipeline_schedule.
        const PipelineTimeline wide = run_pipeline_schedule_shared(schedule, shape, kind, costs, 4);
        EXPECT_NEAR(wide.makespan, own.makespan, 1e-9) << what;
        // One processor: every pass in turn, the whole work and no more (some stage can always run).
        const double work = 4.0 * 8 * v * (costs.forward + costs.backward_input + costs.weight);
        EXPECT_NEAR(run_pipeline_schedule_shared(schedule, shape, kind, costs, 1).makespan, work, 1e-9) << what;
        // Two: at least half the work and the own-processor clock, at most one processor's.
        const double two = run_pipeline_schedule_shared(schedule, shape, kind, costs, 2).makespan;
        EXPECT_GE(two, std::max(work / 2, own.makespan) - 1e-9) << what;
        EXPECT_LT(two, work) << what;
    }
    // One micro-batch through two stages is a chain (F, F, B, B): half a processor doubles it.
    const PipelineShape chain{2, 1, 1};
    const Schedule one = make_pipeline_schedule(PipelineScheduleKind::k1F1B, chain);
    EXPECT_DOUBLE_EQ(run_pipeline_schedule_shared(one, chain, PipelineScheduleKind::k1F1B, {}, 1).makespan, 6);
    EXPECT_DOUBLE_EQ(run_pipeline_schedule_shared(one, chain, PipelineScheduleKind::k1F1B, {}, 0.5).makespan, 12);
}

/// Each stage's messages to each other stage, in the order it runs its passes, as
/// PipelineRunner sends them (or, `receives`, as the receiver runs the passes that wait for
/// them): a forward of virtual stage vs > 0 receives activations from vs - 1, one of vs < V - 1
/// sends them to vs + 1; a backward of vs < V - 1 receives gradients from vs + 1, one of vs > 0
/// sends them to vs - 1. A message is (tag 2 vs + gradient, micro-batch); [from][to].
using Messages = std::vector<std::vector<std::vector<std::pair<int, int>>>>;
Messages pipeline_messages(const Schedule& schedule, PipelineShape shape, bool receives) {
    const int P = shape.stages;
    const int V = P * shape.virtual_stages;
    Messages out(static_cast<size_t>(P), std::vector<std::vector<std::pair<int, int>>>(static_cast<size_t>(P)));
    for (int s = 0; s < P; ++s) {
        for (const PipelinePass& p : schedule[static_cast<size_t>(s)]) {
            const int vs = p.chunk * P + s;
            const bool forward = p.kind == PassKind::kForward;
            if (!forward && p.kind != PassKind::kBackward) continue;  // weight passes send nothing
            // The neighbour a forward receives from / a backward sends to, and the other one.
            const int below = vs - 1;
            const int above = vs + 1;
            if (receives) {
                const int from = forward ? below : above;
                if (from < 0 || from >= V) continue;
                out[static_cast<size_t>(from % P)][static_cast<size_t>(s)].push_back({2 * vs + (forward ? 0 : 1), p.micro});
            } else {
                const int to = forward ? above : below;
                if (to < 0 || to >= V) continue;
                out[static_cast<size_t>(s)][static_cast<size_t>(to % P)].push_back({2 * to + (forward ? 0 : 1), p.micro});
            }
        }
    }
    return out;
}

TEST(PipelineSchedule, EveryPairOfStagesReceivesInTheOrderSent) {
    for (const PipelineScheduleKind kind :
         {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kInterleaved, PipelineScheduleKind::kZeroBubble}) {
        for (int P : {2, 3, 4, 8}) {
            for (int m : {P, 2 * P, 3 * P, 16}) {
                const int v = kind == PipelineScheduleKind::kInterleaved ? 2 : 1;
                const PipelineShape shape{P, m, v};
                if (kind == PipelineScheduleKind::kInterleaved && m % P != 0) continue;
                const Schedule schedule = make_pipeline_schedule(kind, shape);
                const Messages sent = pipeline_messages(schedule, shape, false);
                const Messages received = pipeline_messages(schedule, shape, true);
                for (int a = 0; a < P; ++a) {
                    for (int b = 0; b < P; ++b) {
                        const auto& x = sent[static_cast<size_t>(a)][static_cast<size_t>(b)];
                        const auto& y = received[static_cast<size_t>(a)][static_cast<size_t>(b)];
                        ASSERT_EQ(x.size(), y.size()) << shape_text(kind, shape) << ": stage " << a << " to " << b;
                        for (size_t i = 0; i < x.size(); ++i) {
                            ASSERT_EQ(x[i], y[i]) << shape_text(kind, shape) << ": stage " << a << " to " << b
                                                  << ", message " << i << " sent with tag " << x[i].first
                                                  << " (micro-batch " << x[i].second << "), received as tag "
                                                  << y[i].first << " (micro-batch " << y[i].second << ")";
                        }
                    }
                }
            }
        }
    }
}

TEST(PipelineSchedule, ReceivesOutOfTheSendersOrderAreSeen) {
    // Interleaved P = 2: stage 1 receives both activations and gradients from stage 0. Two of
    // its receiving passes swapped (a forward's and a backward's) take them out of the order
    // stage 0 sent them in.
    const PipelineShape shape{2, 4, 2};
    Schedule schedule = make_pipeline_schedule(PipelineScheduleKind::kInterleaved, shape);
    std::vector<PipelinePass>& one = schedule[1];
    const auto receives_from_0 = [](const PipelinePass& p) {
        return (p.kind == PassKind::kForward && p.chunk == 1) || (p.kind == PassKind::kBackward && p.chunk == 0);
    };
    size_t i = 0;
    while (i + 1 < one.size() && !(receives_from_0(one[i]) && receives_from_0(one[i + 1]) && one[i].kind != one[i + 1].kind)) {
        ++i;
    }
    ASSERT_LT(i + 1, one.size()) << "no adjacent forward and backward receiving from stage 0";
    std::swap(one[i], one[i + 1]);
    EXPECT_NE(pipeline_messages(schedule, shape, false)[0][1], pipeline_messages(schedule, shape, true)[0][1]);
}

TEST(PipelineSchedule, BrokenOrdersAreRefusedByName) {
    const PipelineShape two{2, 2, 1};
    const Schedule good = make_pipeline_schedule(PipelineScheduleKind::k1F1B, two);
    EXPECT_EQ(refusal(good, two, PipelineScheduleKind::k1F1B), "");
    const auto F = [](int m) { return PipelinePass{PassKind::kForward, m, 0}; };
    const auto B = [](int m) { return PipelinePass{PassKind::kBackward, m, 0}; };
    // A backward before its own forward.
    Schedule s = {{F(0), F(1), B(0), B(1)}, {B(0), F(0), F(1), B(1)}};
    EXPECT_NE(refusal(s, two, PipelineScheduleKind::k1F1B).find("stage 1 can never run B0.0"), std::string::npos)
        << refusal(s, two, PipelineScheduleKind::k1F1B);
    // Stage 1 waits for micro-batch 1's activations, which stage 0 sends only after micro-batch
    // 0's gradient, which stage 1 sends only after micro-batch 1: a deadlock.
    s = {{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}};
    EXPECT_NE(refusal(s, two, PipelineScheduleKind::k1F1B).find("can never run"), std::string::npos)
        << refusal(s, two, PipelineScheduleKind::k1F1B);
    s = {{F(0), F(0), B(0), B(1)}, good[1]};
    EXPECT_NE(refusal(s, two, PipelineScheduleKind::k1F1B).find("stage 0 runs F0.0 twice"), std::string::npos)
        << refusal(s, two, PipelineScheduleKind::k1F1B);
    s = {{F(0), F(1), B(0)}, good[1]};
    EXPECT_NE(refusal(s, two, PipelineScheduleKind::k1F1B).find("stage 0 runs 3 passes, expected 4"),
              std::string::npos)
        << refusal(s, two, PipelineScheduleKind::k1F1B);
    s = {{F(0), F(1), B(0), PipelinePass{PassKind::kWeight, 0, 0}}, good[1]};
    EXPECT_NE(refusal(s, two, PipelineScheduleKind::k1F1B).find("W0.0, which is not one of its passes"),
              std::string::npos)
        << refusal(s, two, PipelineScheduleKind::k1F1B);
    EXPECT_THROW(make_pipeline_schedule(PipelineScheduleKind::kInterleaved, PipelineShape{2, 3, 2}), Error)
        << "interleaved needs m a multiple of P";
    EXPECT_THROW(make_pipeline_schedule(PipelineScheduleKind::k1F1B, PipelineShape{2, 4, 2}), Error)
        << "chunks are the interleaved schedule's";
}

}  // namespace
}  // namespace zt
