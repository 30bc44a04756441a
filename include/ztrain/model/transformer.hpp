// The transformer: one driver of the unit protocol (embedding, blocks, final norm, LM head,
// loss; forward, backward, recompute) over the block of the configured family (model.arch:
// gpt2_block.cpp, llama_block.cpp). The driver owns what every family shares (the
// embedding output, the final norm's output, the logits and losses, the residual gradient
// stream); a family owns its blocks' activation slots and its own gradient scratch.
//
// Not here: the optimizer (optim/), data (data/), parallel strategy (parallel/). optim/ and
// ckpt/ depend on model_layout.hpp only; parallel/ also on this header, for the pipeline
// runner's stage models and the device mesh's TensorGroup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/model_layout.hpp"

namespace zt {

class ActivationArena;
class ModelFamily;
class LoraAdapters;
struct UnitWeights;
struct UnitGrads;
class VocabParallel;

/// The collectives of the tensor group a model runs in (parallel.tensor; Megatron-style
/// tensor parallelism), implemented over a communicator by the caller: model/ depends on no
/// communication code. Buffers are backend memory unless said otherwise. Every rank of the
/// group makes the same calls in the same order; a sum must give every rank the same bits
/// (the replicated tensors' gradients are computed from it on each rank alike).
class TensorGroup {
  public:
    virtual ~TensorGroup() = default;
    virtual TensorSplit split() const = 0;
    /// Sum over the group, in place, in the buffer's dtype.
    virtual void all_reduce(ActPtr buf, size_t n) = 0;
    /// Sum or maximum of fp32 values over the group, in place.
    virtual void all_reduce_floats(float* buf, size_t n, bool max) = 0;
    /// Host memory: out (size() * n floats) = every rank's n floats, in rank order.
    virtual void all_gather_host(const float* in, float* out, size_t n) = 0;
    /// out (size() * n elements) = every rank's n, in rank order; in null: this rank's are
    /// already at out + rank * n. One dtype (out's) throughout.
    virtual void all_gather(ConstActPtr in, ActPtr out, size_t n) = 0;
    /// out (n elements) = block `rank` of the group's sum of in (size() * n elements).
    virtual void reduce_scatter(ConstActPtr in, ActPtr out, size_t n) = 0;
};

/// Tokens at positions position .. position + length - 1, starting at token `offset` of the
/// flattened (B, T) batch: how a row of packed examples is cut where positions restart.
struct PositionRun {
    int offset = 0;
    int length = 0;
    int position = 0;
};

/// Rows of packed examples (fine-tuning), in host memory, (B, T) each. positions: each
/// token's position within its example (learned positions and RoPE read it instead of t);
/// segment_start: the first token of its row a token may attend to (block-diagonal causal
/// attention). Either may be null: positions t, causal attention over the whole row.
struct TokenRows {
    const int32_t* positions = nullptr;
    const int32_t* segment_start = nullptr;
};

/// The samples a training micro-batch's rows are, for LoRA's dropout (lora.dropout), whose
/// masks are drawn from (seed, step, sample, position, feature): row b of the batch is
/// sample first_sample + b of the run's sample order. step -1: no training step (validation,
/// evaluation, samples): nothing is dropped. A compacted micro-batch (several samples to a
/// row) names each token's sample (first_sample + sample_of[n]) and position instead.
struct DropoutRows {
    long step = -1;
    uint64_t seed = 0;
    uint64_t first_sample = 0;
    const int32_t* sample_of = nullptr;
    const int32_t* position_of = nullptr;
};

/// Activation memory by storage: elements kept in the activation dtype (activations and
/// their gradients; the attention probabilities apart, in probs) and floats kept fp32
/// whatever it is (normalization statistics, losses, the rotary table, the attention
/// backward's scratch).
struct ActivationCount {
    double act = 0;
    double f32 = 0;
    /// The (T x T) attention probabilities kept for the backward, in the activation dtype.
    double probs = 0;
    double bytes(DType activation) const {
        return (act + probs) * static_cast<double>(dtype_size(activation)) + f32 * sizeof(float);
    }
    /// The same model under a flash-style attention kernel (the planner's
    /// cluster.attention_kernel = fused), which keeps each query row's log-sum-exp (fp32)
    /// instead of its probabilities and recomputes them in the backward.
    ActivationCount with_fused_attention(int seq_len) const { return {act, f32 + probs / seq_len, 0}; }
};

/// The part of the model one pipeline stage runs (parallel.pipeline): blocks [begin, end) of
/// the whole model's n_layer, with the embedding when begin == 0 (the first stage) and the
/// final norm, LM head and loss when end == n_layer (the last). end -1: to the last block.
/// The default is the whole model.
struct StageBlocks {
    int begin = 0;
    int end = -1;
    /// end resolved against n_layer.
    int last(int n_layer) const { return end < 0 ? n_layer : end; }
    bool first_stage() const { return begin == 0; }
    bool last_stage(int n_layer) const { return last(n_layer) == n_layer; }
};

/// The units a stage's part of the model reads and writes: its blocks', unit 0 on the first
/// stage (the embedding) and the last (the LM head), the final norm's on the last.
std::vector<int> stage_units(const ModelConfig& cfg, StageBlocks stage);

/// How a Transformer is built beyond its configuration, backend and batch: what it keeps
/// of its activations and in what dtype, the tensor group it is a rank's split of, and the
/// pipeline stage it runs. The defaults are the whole model on one rank, every activation
/// kept in fp32. Set fields by name (or chain the setters):
///   TransformerOptions o;  o.recompute = ActivationRecompute::kBlocks;  o.stage = blocks;
struct TransformerOptions {
    /// kBlocks: keep only each block's output; backward re-runs a block's forward into one
    /// shared set of buffers just before its backward (activation checkpointing).
    /// kAttention: keep everything but the attention probabilities, which every block writes
    /// into one shared buffer and its backward rebuilds from its q, k, v just before the
    /// attention's backward (Megatron's selective recompute).
    ActivationRecompute recompute = ActivationRecompute::kNone;
    /// The activations' dtype (Transformer::set_activation_dtype).
    DType activation = DType::kF32;
    /// The tensor group the model is this rank's split of (null or one rank: none).
    TensorGroup* tensor = nullptr;
    /// Sequence parallelism over the tensor group (parallel.sequence).
    bool sequence = false;
    /// The pipeline stage's blocks (default: the whole model).
    StageBlocks stage{};
    /// 0: the LM head holds every row's logits, and backward takes its gradients. n > 0: the
    /// head runs over chunks of at most n rows (Transformer::chunked_head_rows), and a
    /// training forward takes the head's gradients (its input gradient, and its weight
    /// gradient into unit 0's) chunk by chunk, so the (B, T, Vp) logits are never held.
    /// Other passes may run between such a forward and its backward (a pipeline stage's
    /// schedule): the head's weight gradient is a sum over the step's micro-batches, and unit
    /// 0's gradient is reduced at the end of the step's last backward, after every forward.
    int head_rows = 0;
    /// Under ActivationRecompute::kAttention: another model's probabilities buffer
    /// (Transformer::attention_probs) to share instead of taking one. Models that run one pass
    /// at a time on a rank may share it (a pipeline stage's), since each block's backward
    /// rebuilds the probabilities right before reading them; both keep their activation
    /// dtype. Null: the model takes its own.
    ActPtr shared_probs{};

    TransformerOptions& with_recompute(ActivationRecompute what) {
        recompute = what;
        return *this;
    }
    /// true: every block (kBlocks); false: nothing.
    TransformerOptions& with_recompute(bool on) {
        return with_recompute(on ? ActivationRecompute::kBlocks : ActivationRecompute::kNone);
    }
    TransformerOptions& with_activation(DType t) {
        activation = t;
        return *this;
    }
    TransformerOptions& with_tensor(TensorGroup* group, bool sequence_parallel) {
        tensor = group;
        sequence = sequence_parallel;
        return *this;
    }
    TransformerOptions& with_stage(StageBlocks blocks) {
        stage = blocks;
        return *this;
    }
    TransformerOptions& with_head_rows(int rows) {
        head_rows = rows;
        return *this;
    }
    TransformerOptions& with_shared_probs(ActPtr probs) {
        shared_probs = probs;
        return *this;
    }
};

/// How 16-bit activations are stored: in their dtype (what training runs), or as fp32
/// buffers holding 16-bit values through an ActivationRoundingBackend, the emulation the
/// typed ops are checked against (a test oracle only).
enum class ActivationStorage { kTyped, kEmulated };

class Transformer {
  public:
    /// Allocates activations for up to max_batch sequences of cfg.seq_len tokens, as
    /// `options` says (TransformerOptions). With `recompute` = kBlocks, only each block's
    /// output is kept; backward re-runs a block's forward into one shared set of buffers just
    /// before its backward (activation checkpointing: about one extra forward of compute for
    /// ~1/L of the block activations' memory). With kAttention only the attention
    /// probabilities are shared and rebuilt (about one attention forward more for ~1/L of
    /// their memory).
    /// Activations in `activation` (set_activation_dtype).
    /// With a tensor group (null: none) the model is this rank's split of it: its layout is
    /// make_model_layout(cfg, group->split()), and forward and backward run the group's
    /// collectives (4 sums of (B, T, C) per block and step: after each row-parallel product
    /// in forward, before each column-parallel block's input gradient is used in backward;
    /// one more each way for the embedding and LM head; the cross-entropy's row maxima and
    /// sums). With `sequence` (parallel.sequence; Megatron's sequence parallelism) the
    /// residual stream, the norms and the embedding's output hold 1/T of the rows per rank:
    /// each of those sums becomes an all-gather before a column-parallel product (forward;
    /// of the residual gradient before a row-parallel one in backward) and a reduce-scatter
    /// after a row-parallel product (of the input gradient after a column-parallel one in
    /// backward). Requires cfg.seq_len divisible by T; a batch of B x T rows not divisible
    /// is padded to the next multiple (zero rows no product reads).
    ///
    /// With `stage` (a pipeline stage's blocks; default the whole model) forward and backward
    /// run that part only, and the unit ids stay the whole model's. A stage without the
    /// embedding reads its input from stage_input() (the previous stage's stage_output(),
    /// written there by the caller before forward); a stage without the head starts backward
    /// from stage_output_grad() (the next stage's stage_input_grad()). Such a stage keeps no
    /// logits or losses and its forward returns 0. Unit 0's gradient on a stage that has only
    /// one of the embedding and the head holds zeros where the other would add: the caller
    /// sums it with the other stage's.
    Transformer(const ModelConfig& cfg, Backend& backend, int max_batch, const TransformerOptions& options = {});
    ~Transformer();
    Transformer(const Transformer&) = delete;
    Transformer& operator=(const Transformer&) = delete;

    const ModelLayout& layout() const { return m_layout; }
    const StageBlocks& stage() const { return m_stage; }
    bool first_stage() const { return m_stage.first_stage(); }
    bool last_stage() const { return m_stage.last_stage(m_cfg.n_layer); }
    /// Elements of a stage boundary's activation (and its gradient) for a batch of B rows of
    /// T tokens: this rank's rows of (B, T, C) (1/t of them under sequence parallelism).
    size_t stage_elements(int B, int T) const { return local_elements(B * T); }
    /// Where a stage without the embedding takes its input (stage_elements), in the
    /// activation dtype. Valid for the next forward.
    ActPtr stage_input() { return m_encoded; }
    /// The last forward's output of a stage without the head: its last block's output.
    ConstActPtr stage_output() const;
    /// Where a stage without the head takes d loss / d stage_output() before backward.
    ActPtr stage_output_grad() { return m_dresidual; }
    /// After backward of a stage without the embedding: d loss / d stage_input().
    ConstActPtr stage_input_grad() const { return m_dresidual; }
    const ModelConfig& config() const { return m_cfg; }

    /// Forward over inputs (B, T). With targets, returns the mean cross-entropy over rows
    /// whose target >= 0 and, when dloss != 0, leaves d(dloss * sum of row losses)/dlogits
    /// ready for backward() (with a chunked head, the head's gradients themselves). Without
    /// targets returns 0 and the logits of the last rows the head holds (all B T without a
    /// chunked head) are kept (logits_row_to_host).
    float forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                  float dloss);
    /// The same over rows of packed examples (`rows`: see TokenRows; empty: the above).
    float forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss,
                  const TokenRows& rows);
    /// The rows the next forwards run (and their backwards and recomputes): LoRA's dropout
    /// masks. Default (and step -1): no dropout.
    void set_dropout_rows(const DropoutRows& rows) { m_dropout_rows = rows; }
    /// The sum of the last forward's losses over its targets (>= 0), and how many there were:
    /// what a caller normalising by a larger count (every target of a global batch) needs.
    double last_loss_sum() const { return m_loss_sum; }
    long last_target_count() const { return m_target_count; }
    /// Backward of the last forward (which must have had targets and dloss != 0).
    void backward(UnitStore& store);
    /// Zero-bubble pipelines (Qi et al.): with `on`, backward() computes the input gradients
    /// and unit 0's (the head's, the embedding's) but asks for no other unit's gradient: it
    /// keeps the blocks' and the final norm's weight, bias and norm gradients, and owes every
    /// grads_done, to backward_weights(), which must follow before the next backward. The
    /// weights need not stay acquired in between (a ZeRO-3 store may release them).
    void defer_weight_grads(bool on);
    /// The gradients the last backward() left: per unit in backward's order (unit 0 last),
    /// grads(), the unit's kept gradients added, grads_done().
    void backward_weights(UnitStore& store);

    /// Per-position losses (B*T, host memory) of the last forward with targets; positions
    /// whose target < 0 hold no meaningful value.
    const std::vector<float>& position_losses() const { return m_losses_host; }
    /// Copies logits row `row` (Vp values of the last forward without targets, widened to
    /// fp32) into host memory at out; a chunked head keeps only the last rows' (forward).
    /// Collective over the tensor group (each rank holds Vp / T of them).
    void logits_row_to_host(int row, float* out) const;

    /// Activations and activation gradients stored in `t` (default fp32): the buffers are
    /// made again in t (before a forward, not between a forward and its backward), and the
    /// backend is told (Backend::set_activation_dtype: its products for t). kEmulated keeps
    /// fp32 buffers and rounds through an ActivationRoundingBackend instead (the oracle of
    /// the tests). Requires backend.capabilities().supports(t).
    void set_activation_dtype(DType t, ActivationStorage storage = ActivationStorage::kTyped);
    DType activation_dtype() const { return m_act_dtype; }
    /// Bytes of activation (and activation-gradient) memory allocated (a shared probabilities
    /// buffer counts for the model that took it).
    size_t activation_bytes() const;
    /// Under ActivationRecompute::kAttention, the blocks' probabilities buffer, for other
    /// models to share (TransformerOptions::shared_probs); null otherwise.
    ActPtr attention_probs() const { return m_probs; }
    /// What the constructor allocates for these arguments, computed in double (so an absurd
    /// shape gives a huge number, not an overflow) without allocating: the memory plan's
    /// figure (ActivationCount::bytes of the run's activation dtype). The constructor checks
    /// that it allocated exactly this.
    /// `tensor`: the ranks of the tensor group (each holds its split's activations);
    /// `sequence`: sequence parallelism over them.
    /// `stage`: a pipeline stage's part (its blocks; logits and losses on the last only).
    /// `head_rows`: TransformerOptions::head_rows.
    static ActivationCount activations(const ModelConfig& cfg, int max_batch, ActivationRecompute recompute,
                                       size_t attention_scratch_floats, int tensor = 1, bool sequence = false,
                                       StageBlocks stage = {}, int head_rows = 0);
    /// The rows a chunked head holds logits of at once: about 2^24 elements' worth of this
    /// rank's vocabulary slice, never fewer than 128 rows (each chunk's weight-gradient
    /// product reads and writes the head's whole gradient: fewer rows would make it
    /// memory-bound), and never more than max_batch x seq_len, which they split evenly.
    static int chunked_head_rows(const ModelConfig& cfg, int max_batch, int tensor);
    /// Bytes of the token and target copies in backend memory (int32, (B, T) each; a third
    /// with the tokens of this rank's vocabulary slice under tensor parallelism).
    static double token_bytes(const ModelConfig& cfg, int max_batch, int tensor = 1) {
        return (tensor > 1 ? 3.0 : 2.0) * max_batch * cfg.seq_len * sizeof(int32_t);
    }
    /// Bytes of the host copies of packed rows' segments a forward over TokenRows keeps for
    /// backward and recompute (position runs and attention starts, (B, T) at most each),
    /// reserved whole on the first such forward; a model never given TokenRows holds none.
    static double row_segment_bytes(const ModelConfig& cfg, int max_batch) {
        return static_cast<double>(max_batch) * cfg.seq_len * (sizeof(PositionRun) + sizeof(int32_t));
    }
    /// Bytes those copies hold now (their capacities): 0, or row_segment_bytes.
    size_t row_segment_bytes() const {
        return m_runs.capacity() * sizeof(PositionRun) + m_attend_from.capacity() * sizeof(int32_t);
    }

  private:
    /// (Re)makes every activation buffer in `stored` (the arena, the family's slots).
    void allocate_activations(DType stored);
    /// Acquires `unit` and returns its parameters as the ops take them (UnitWeights).
    UnitWeights unit_weights(UnitStore& store, int unit) const;
    void embed_and_blocks(UnitStore& store, const int32_t* inputs, int B, int T);
    /// Elements of this rank's rows of an (N, C) residual-stream buffer.
    size_t local_elements(int N) const;
    void set_rows(const TokenRows& rows, int B, int T);
    float head_and_loss(UnitStore& store, const int32_t* targets, const int32_t* targets_be, int N,
                        float dloss);
    /// The rows of logits a head of TransformerOptions::head_rows holds for `rows` rows.
    static int logit_rows(int head_rows, int rows);
    /// Without targets: the logits of the last rows the head holds (all rows unchunked).
    void head_logits(int N);
    /// Before the head's first gradient product: unit 0's gradient asked for (m_unit0_grads,
    /// m_unit0_zero) and the head's input gradient zeroed; returns how that product writes.
    GradWrite begin_head_gradients(UnitStore& store, int N);
    /// The head's gradients from the dlogits of rows [r0, r0 + n) (in m_logits from its row 0).
    void head_gradients(int r0, int n, GradWrite write);

    /// Backward of the final norm and, unless the forward did, the LM head (the last
    /// stage): d residual from dlogits.
    void head_backward(UnitStore& store, int N);
    /// Backward of the stage's blocks, last to first: d residual from the blocks' output's.
    void blocks_backward(UnitStore& store);
    /// Backward of the embedding (the first stage) into unit 0's gradient `demb` (asked for
    /// here on a stage without the head).
    void embedding_backward(UnitStore& store, UnitGrads demb);

    ModelConfig m_cfg;
    StageBlocks m_stage;  ///< resolved: end is a block index
    int m_blocks = 0;     ///< the stage's blocks (the family's, indexed from 0)
    Backend& m_backend;
    TensorGroup* m_tensor = nullptr;
    bool m_sequence = false;  ///< sequence parallelism over m_tensor
    ModelLayout m_layout;
    std::unique_ptr<LoraAdapters> m_lora;  ///< the layout's LoRA adapters (none without model.lora)
    std::unique_ptr<VocabParallel> m_vocab;  ///< this rank's vocabulary slice (the embedding's and the head's)
    std::unique_ptr<ActivationArena> m_arena;  // every activation buffer; freed last
    std::unique_ptr<ModelFamily> m_family;      // the blocks, their slots and scratch
    int m_max_batch;
    ActivationRecompute m_recompute = ActivationRecompute::kNone;
    /// kAttention: the blocks' one probabilities buffer, this model's or one it shares
    /// (m_shared_probs, not in its arena).
    ActPtr m_probs{};
    ActPtr m_shared_probs{};
    /// What the model's ops run on: m_backend, or the emulation's rounding decorator over it.
    std::unique_ptr<Backend> m_rounding;
    Backend* m_compute = &m_backend;
    DType m_act_dtype = DType::kF32;  ///< the activations' dtype (their storage when typed)
    int m_B = 0;
    int m_T = 0;
    // What every family shares. Shapes with B = m_max_batch, T = seq_len at allocation.
    // Under sequence parallelism "(B, T, C) local" buffers hold this rank's B T / t rows.
    ActPtr m_encoded;          // (B, T, C) local: the embedding's output, the first block's input
    ActPtr m_normed;           // (B, T, C) the final norm's output (gathered); the blocks' gather buffer
    ActPtr m_logits;           // (head rows, Vp); dlogits after a training forward
    int m_head_rows = 0;       // the rows m_logits holds
    int m_chunk_rows = 0;      // TransformerOptions::head_rows (0: one chunk, gradients in backward)
    int m_logits_begin = 0;    // the first row the last forward without targets kept logits of
    int m_logits_end = 0;
    float* m_unit0_grads = nullptr;  // unit 0's gradient, asked for by the head (last stage)
    bool m_unit0_zero = false;       // ... and whether it is still to be zeroed
    bool m_head_grads_done = false;  ///< the forward computed the head's gradients
    float* m_losses = nullptr; // (B, T)
    ActPtr m_dresidual;        // (B, T, C) local: d loss / d residual stream, block by block
    ActPtr m_dnormed;          // (B, T, C) d loss / d final norm output (each rank's partial under SP)
    const int32_t* m_inputs = nullptr;  // the backend's copy of the last forward's tokens
    // Tokens and targets copied from the caller's host arrays into backend memory, and the
    // per-row losses read back for the mean (host memory).
    int32_t* m_tokens_be = nullptr;   // (B, T)
    int32_t* m_targets_be = nullptr;  // (B, T)
    std::vector<float> m_losses_host;  // (B, T)
    ConstActPtr m_head;  // the LM head's matrix (unit 0), held from forward into backward
    bool m_have_dlogits = false;  ///< a training forward ran: backward may follow
    bool m_defer_weights = false;  ///< defer_weight_grads
    std::vector<int> m_done_later;  ///< the units whose grads_done backward_weights owes
    /// store.grads_done(unit), or under deferred weight gradients noted for backward_weights.
    void grads_done(UnitStore& store, int unit);
    double m_loss_sum = 0.0;
    long m_target_count = 0;
    // The segments of the last forward's rows (host memory; kept for backward and recompute).
    std::vector<PositionRun> m_runs;
    std::vector<int32_t> m_attend_from;
    DropoutRows m_dropout_rows;
};

}  // namespace zt
