// One rank's part of a pipeline-parallel step (parallel.pipeline): it runs its stage's passes
// in the order of the step's schedule (parallel/pipeline_schedule.hpp) over its chunks' models
// (model/transformer.hpp with StageBlocks), and passes activations forward and their
// gradients back to the neighbouring stages as point-to-point messages in the activation
// dtype (comm/point_to_point.hpp: MPI on host memory, NCCL on the device). A receive waits for what its pass needs; a send is started and left to complete
// while the stage computes, and its buffer is not written again before it has.
//
// Chunk c of stage s is virtual stage c * P + s (v = 1: the plain pipeline). Each chunk keeps
// one model per micro-batch it can have in flight (slots_per_chunk: 1F1B's P - s on stage s),
// so no activation is recomputed; micro-batch m uses slot m mod slots. The messages between
// two stages for one virtual stage and direction go in micro-batch order on both sides (the
// schedules run each chunk's forwards, and its backwards, in that order), so MPI's
// non-overtaking rule pairs them and one tag per virtual stage and direction suffices. Across
// tags too, each stage receives a neighbour's messages in the order the neighbour sends them
// (test_pipeline_schedule checks it for every schedule), which NCCL's send/recv needs: it
// pairs a peer's messages by order, not by tag.
//
// One stage (P = 1, v = 1) is the schedule of a run without a pipeline: each micro-batch's
// forward, then its backward, and no message at all (no link needed).
//
// Runs on the CPU backend over MPI; the NCCL link is written and compiled, and running
// several stages on the device is on the GPU issue's list (the trainer refuses backend =
// cuda with parallel.pipeline > 1).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/comm/point_to_point.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/pipeline_schedule.hpp"

namespace zt {

/// Micro-batch m of a step, as every stage of a pipeline reads it (host memory, (B, T)).
struct PipelineMicroBatch {
    const int32_t* inputs = nullptr;
    const int32_t* targets = nullptr;
    TokenRows rows;
    /// Positions per row when it differs from the step's T (dynamically padded example rows:
    /// the longest example's); 0: the step's.
    int T = 0;
    /// A training step's rows (LoRA's dropout); default: none.
    DropoutRows dropout = {};
    /// Rows when fewer than the step's B (compacted padding); 0: the step's.
    int B = 0;
    /// The rows and the positions per row this micro-batch runs, given the step's.
    int rows_of(int step_B) const { return B > 0 ? B : step_B; }
    int positions_of(int step_T) const { return T > 0 ? T : step_T; }
};

/// What one step's passes gave on this rank.
struct PipelineStepTotals {
    double loss_sum = 0.0;  ///< the last virtual stage's summed losses over its micro-batches (0 elsewhere)
    long targets = 0;       ///< and how many targets they covered
    /// The last virtual stage's micro-batch mean losses (Transformer::forward's), summed.
    double loss_means = 0.0;
    double forward_s = 0.0;   ///< time in the models' forward passes
    double backward_s = 0.0;  ///< time in their backward and weight passes
    double wait_s = 0.0;    ///< time blocked on receives and on sends still in flight
    size_t bytes_sent = 0;  ///< activation and gradient bytes sent to the neighbours
};

class PipelineRunner {
  public:
    /// `pipeline`: the P ranks of this rank's pipeline, ordered by stage (DeviceMesh's
    /// pipeline_comm; MPI_COMM_NULL for one stage). Throws Error for a shape the kind cannot run (make_pipeline_schedule).
    /// Zero-bubble's backward passes compute input gradients and its weight passes the
    /// weight gradients (Transformer::defer_weight_grads), where the store sees each unit's
    /// gradient whole, as from a plain backward (any ZeRO stage).
    PipelineRunner(MPI_Comm pipeline, PipelineScheduleKind kind, PipelineShape shape);
    /// The same over `link` (its ranks ordered by stage): MPI on host memory, or NCCL on the
    /// device (comm/point_to_point.hpp); null for one stage.
    PipelineRunner(std::unique_ptr<PointToPoint> link, PipelineScheduleKind kind, PipelineShape shape);

    /// Marks the runner's blocking waits (receives, sends still in flight) as pending on
    /// `watch` (a communicator over the same ranks), so the collective watchdog ends a job
    /// whose neighbouring stage died or hangs. Null: unwatched.
    void watch_with(Communicator* watch) { m_watch = watch; }
    int stage() const { return m_stage; }
    int stages() const { return m_shape.stages; }
    /// This stage's passes, in the order run() runs them.
    const std::vector<PipelinePass>& passes() const { return m_passes; }
    /// Models each chunk needs: the most micro-batches it has in flight (forward run,
    /// backward not yet) in `passes`.
    static std::vector<int> slots_per_chunk(const std::vector<PipelinePass>& passes, int chunks);
    const std::vector<int>& slots() const { return m_slots; }
    /// The activations stage `stage` of a pipeline allocates (the memory plan's figure): for
    /// each of its chunks, slots_per_chunk models of that chunk's blocks (cut at `bounds`, as
    /// chunk_blocks), each Transformer::activations of them; under recompute = attention the
    /// models share one block's attention probabilities (TransformerOptions::shared_probs).
    /// Pure: no MPI.
    static ActivationCount stage_activations(PipelineScheduleKind kind, PipelineShape shape, int stage,
                                             const std::vector<int>& bounds, const ModelConfig& cfg, int max_batch,
                                             ActivationRecompute recompute, size_t attention_scratch_floats,
                                             int tensor = 1,
                                             bool sequence = false);
    /// The layout of stage `stage`'s state: the units of its chunks (stage_units) cut from
    /// `whole` (stage_layout), unit 0 mirrored on the last stage (the first counts and saves it).
    static ModelLayout stage_state_layout(const ModelLayout& whole, PipelineShape shape, int stage,
                                          const std::vector<int>& bounds);
    /// Blocks [begin, end) of virtual stage `virtual_stage` when the model's blocks are cut at
    /// `bounds` (V + 1 ascending block indices from 0 to n_layer).
    static StageBlocks chunk_blocks(const std::vector<int>& bounds, int virtual_stage) {
        return StageBlocks{bounds[static_cast<size_t>(virtual_stage)], bounds[static_cast<size_t>(virtual_stage) + 1]};
    }

    /// Runs one step's passes. models[c][k]: chunk c's model for slot k (slots()[c] of them,
    /// made with chunk_blocks of virtual stage c * P + stage()); batch(m): micro-batch m of B
    /// rows of T tokens (asked for before each of its passes). begin_micro_step(m, c), when
    /// given, runs once per micro-batch and chunk where the state's per-micro-step gradient
    /// bookkeeping begins: before the forward when the backward follows it at once (one
    /// stage; 1F1B's last), so the store sees one training pass; else before the backward, or
    /// under zero-bubble before the weight pass, where the gradients are finished. Every
    /// forward gets `dloss` (the loss scale over the global token count). Collective over the
    /// pipeline.
    PipelineStepTotals run(UnitStore& store, const std::vector<std::vector<Transformer*>>& models,
                           const std::function<PipelineMicroBatch(int)>& batch, int B, int T, float dloss,
                           const std::function<void(int, int)>& begin_micro_step = {});

    /// Forward only (evaluation: no gradient, dloss 0) of `count` micro-batches through every
    /// chunk, each stage in groups of P micro-batches, each group through every chunk in turn;
    /// a model's activations are free again once its output has been received, so micro-batch
    /// m uses slot m mod slots()[c]. The loss totals are the last virtual stage's. Collective
    /// over the pipeline.
    PipelineStepTotals run_forward(UnitStore& store, const std::vector<std::vector<Transformer*>>& models,
                                   const std::function<PipelineMicroBatch(int)>& batch, int count, int B, int T);

  private:
    void forward_pass(UnitStore& store, Transformer& model, const PipelineMicroBatch& mb, int chunk, int slot, int B,
                      int T, float dloss, PipelineStepTotals& totals);
    void backward_pass(UnitStore& store, Transformer& model, int chunk, int slot, int B, int T,
                       PipelineStepTotals& totals);
    /// A blocking receive marked pending (`what`) for the watchdog, its wait counted.
    void receive(void* buf, size_t bytes, int peer, int tag, const char* what, PipelineStepTotals& totals);
    /// A started send of chunk c's slot k's buffer, settled before the slot is used again.
    void send(int chunk, int slot, const void* buf, size_t bytes, int peer, int tag, PipelineStepTotals& totals);
    /// Waits for the sends still reading chunk c's slot k.
    void settle(int chunk, int slot, PipelineStepTotals& totals);
    /// Waits for every send in flight (the end of a step or an evaluation).
    void settle_all(PipelineStepTotals& totals);
    int tag(int virtual_stage, bool gradient) const { return 2 * virtual_stage + (gradient ? 1 : 0); }

    std::unique_ptr<PointToPoint> m_link;
    bool m_split = false;  ///< the schedule has weight passes (zero-bubble): backwards defer them
    Communicator* m_watch = nullptr;
    PipelineShape m_shape;
    int m_stage = 0;
    std::vector<PipelinePass> m_passes;
    /// Per pass: a forward whose micro-batch's backward (on its chunk) is the next pass.
    std::vector<bool> m_backward_follows;
    std::vector<int> m_slots;
    /// Sends in flight, per chunk and slot.
    std::vector<std::vector<std::vector<SendRequest>>> m_sends;
};

}  // namespace zt
