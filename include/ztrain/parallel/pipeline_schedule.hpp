// Pipeline-parallel schedules as data: the order in which each stage of a pipeline runs the
// compute passes of one step's micro-batches (1F1B, Megatron's interleaved virtual pipeline,
// zero-bubble ZB-H1), and a clock that runs such an order, checks that it respects every
// dependency and measures its bubble and the activations it keeps in flight. Pure functions,
// tested without MPI; the trainer's pipeline runs the passes in exactly these orders.
//
// The model is cut into V = P * v virtual stages; rank (stage) s holds chunks c = 0 .. v-1,
// virtual stage c * P + s (Megatron's assignment: v = 1 is the plain pipeline).
// Dependencies (the sends and receives between stages):
//   F(m, k) after F(m, k-1)                    activations from the previous virtual stage
//   B(m, k) after F(m, k) and B(m, k+1)        its own activations, the next one's gradient
//   W(m, k) after B(m, k)                      zero-bubble: the weight gradient, deferred
#pragma once

#include <string>
#include <vector>

namespace zt {

enum class PipelineScheduleKind { k1F1B, kInterleaved, kZeroBubble };

/// "1f1b", "interleaved", "zb" (parallel.schedule's values).
const char* pipeline_schedule_name(PipelineScheduleKind kind);

/// F: a micro-batch's forward through one chunk. B: its backward (input and weight gradients;
/// under zero-bubble the input gradient only). W: the weight gradient (zero-bubble only).
enum class PassKind { kForward, kBackward, kWeight };

struct PipelinePass {
    PassKind kind = PassKind::kForward;
    int micro = 0;  ///< micro-batch, 0 .. m-1
    int chunk = 0;  ///< this stage's chunk, 0 .. v-1
    bool operator==(const PipelinePass& o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

struct PipelineShape {
    int stages = 1;          ///< P (parallel.pipeline)
    int micro_batches = 1;   ///< m: the step's micro-batches (train.grad_accum)
    int virtual_stages = 1;  ///< v: chunks per stage (interleaved; 1 otherwise)
};

/// Each stage's passes in the order it runs them. Throws Error when the shape does not suit
/// the kind (P, m >= 1; interleaved: v >= 2 and m a multiple of P, as Megatron requires;
/// the others: v = 1).
/// - 1F1B: P - 1 - s warm-up forwards, then one forward one backward, then the remaining
///   backwards: at most P - s micro-batches' activations in flight on stage s.
/// - interleaved: Megatron's order over the v chunks (forwards of P micro-batches per chunk in
///   turn, backwards through the chunks in reverse), 2 (P - 1 - s) + (v - 1) P warm-up forwards.
/// - zero-bubble (ZB-H1, Qi et al. 2024): backward split into B and W; 1F1B's order of F and
///   B, with the W passes deferred into what would be its bubble, and run before a forward
///   when P micro-batches are in flight (activations are kept until W): 1F1B's peak memory
///   (stage 0's P) on every stage, a bubble of (P - 1)(F + B - W) instead of (P - 1)(F + B + W).
std::vector<std::vector<PipelinePass>> make_pipeline_schedule(PipelineScheduleKind kind, PipelineShape shape);

/// Time per pass of one chunk. The defaults are the usual estimate: a backward costs two
/// forwards, half of it the input gradient and half the weight gradient (B = 2 when not split).
struct PassCosts {
    double forward = 1;
    double backward_input = 1;  ///< zero-bubble's B
    double weight = 1;          ///< zero-bubble's W; 1F1B's B costs backward_input + weight
};

/// What running a schedule on a clock gives.
struct PipelineTimeline {
    double makespan = 0;            ///< when the last pass of any stage ends
    std::vector<double> busy;       ///< per stage: time computing
    std::vector<double> idle;       ///< per stage: makespan - busy (its bubble)
    std::vector<int> peak_in_flight;  ///< per stage: most chunk activations kept at once
    /// Megatron's bubble fraction: the largest stage idle time over its compute time
    /// ((P - 1) / m for 1F1B, (P - 1) / (v m) interleaved).
    double bubble_fraction() const;
};

/// Runs `schedule` (one pass list per stage) on a clock: each stage takes its passes in
/// order, a pass starting when its stage is free and its dependencies have ended (transfers
/// take no time). Throws Error naming the stage and the pass when the schedule runs a pass
/// twice, misses or invents one, or can never start one (a dependency that comes later in its
/// own stage's list, or a cycle of waits between stages: a deadlock). W passes only under
/// zero-bubble, where B costs backward_input; elsewhere B costs backward_input + weight.
PipelineTimeline run_pipeline_schedule(const std::vector<std::vector<PipelinePass>>& schedule, PipelineShape shape,
                                       PipelineScheduleKind kind, PassCosts costs = {});

/// run_pipeline_schedule on stages that share processors, as the ranks of a CPU node with
/// fewer cores than their threads do: at most `capacity` stages run at full speed at once;
/// when more run, each runs at capacity / running of it, so a stage that waits lends its
/// share to those that run. With capacity >= the stages it is run_pipeline_schedule's clock.
PipelineTimeline run_pipeline_schedule_shared(const std::vector<std::vector<PipelinePass>>& schedule,
                                              PipelineShape shape, PipelineScheduleKind kind, PassCosts costs,
                                              double capacity);

/// A pass as text ("F3.1": forward of micro-batch 3 through chunk 1), for messages.
std::string pass_name(const PipelinePass& p);

}  // namespace zt
