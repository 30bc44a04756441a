// The transformer: one driver of the unit protocol (embedding, blocks, final norm, LM head,
// loss; forward, backward, recompute) over the block of the configured family (model.arch:
// gpt2_block.cpp, llama_block.cpp). The driver owns what every family shares (the
// embedding output, the final norm's output, the logits and losses, the residual gradient
// stream); a family owns its blocks' activation slots and its own gradient scratch.
//
// Not here: the optimizer (optim/), data (data/), parallel strategy (parallel/); those
// depend on model_layout.hpp only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/model_layout.hpp"

namespace zt {

class ActivationArena;
class ModelFamily;

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

class Transformer {
  public:
    /// Allocates activations for up to max_batch sequences of cfg.seq_len tokens. With
    /// `recompute`, only each block's output is kept; backward re-runs a block's forward
    /// into one shared set of buffers just before its backward (activation checkpointing:
    /// about one extra forward of compute for ~1/L of the block activations' memory).
    Transformer(const ModelConfig& cfg, Backend& backend, int max_batch, bool recompute = false);
    ~Transformer();
    Transformer(const Transformer&) = delete;
    Transformer& operator=(const Transformer&) = delete;

    const ModelLayout& layout() const { return m_layout; }
    const ModelConfig& config() const { return m_cfg; }

    /// Forward over inputs (B, T). With targets, returns the mean cross-entropy over rows
    /// whose target >= 0 and, when dloss != 0, leaves d(dloss * sum of row losses)/dlogits
    /// ready for backward(). Without targets returns 0 and logits() holds (B, T, Vp).
    float forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                  float dloss);
    /// The same over rows of packed examples (`rows`: see TokenRows; empty: the above).
    float forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss,
                  const TokenRows& rows);
    /// The sum of the last forward's losses over its targets (>= 0), and how many there were:
    /// what a caller normalising by a larger count (every target of a global batch) needs.
    double last_loss_sum() const { return m_loss_sum; }
    long last_target_count() const { return m_target_count; }
    /// Backward of the last forward (which must have had targets and dloss != 0).
    void backward(UnitStore& store);

    /// Per-position losses (B*T, host memory) of the last forward with targets; positions
    /// whose target < 0 hold no meaningful value.
    const std::vector<float>& position_losses() const { return m_losses_host; }
    /// Backend memory (device memory on a GPU backend; see logits_row_to_host).
    const float* logits() const { return m_logits; }
    /// Copies logits row `row` (Vp floats, of the last forward) into host memory at out.
    void logits_row_to_host(int row, float* out) const;

    /// Activations and activation gradients in `t`: for bf16/fp16 the model computes through
    /// an ActivationRoundingBackend over its backend (16-bit values in fp32 buffers; see
    /// activation_rounding.hpp). Default fp32. Requires backend.capabilities().supports(t).
    void set_activation_dtype(DType t);
    /// Bytes of activation (and activation-gradient) memory allocated.
    size_t activation_bytes() const;
    /// The floats the constructor allocates for these arguments, computed in double (so an
    /// absurd shape gives a huge number, not an overflow) without allocating: the memory
    /// plan's figure. The constructor checks that it allocated exactly this.
    static double activation_floats(const ModelConfig& cfg, int max_batch, bool recompute,
                                    size_t attention_scratch_floats);
    /// Bytes of the token and target copies in backend memory (int32, (B, T) each).
    static double token_bytes(const ModelConfig& cfg, int max_batch) {
        return 2.0 * max_batch * cfg.seq_len * sizeof(int32_t);
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
    void embed_and_blocks(UnitStore& store, const int32_t* inputs, int B, int T);
    void set_rows(const TokenRows& rows, int B, int T);
    float head_and_loss(UnitStore& store, const int32_t* targets, const int32_t* targets_be, int N,
                        float dloss);

    ModelConfig m_cfg;
    Backend& m_backend;
    ModelLayout m_layout;
    std::unique_ptr<ActivationArena> m_arena;  // every activation buffer; freed last
    std::unique_ptr<ModelFamily> m_family;      // the blocks, their slots and scratch
    int m_max_batch;
    bool m_recompute = false;
    /// What the model's ops run on: m_backend, or a rounding decorator over it (16-bit).
    std::unique_ptr<Backend> m_rounding;
    Backend* m_compute = &m_backend;
    int m_B = 0;
    int m_T = 0;
    // What every family shares. Shapes with B = m_max_batch, T = seq_len at allocation.
    float* m_encoded = nullptr;    // (B, T, C) the embedding's output, the first block's input
    float* m_normed = nullptr;     // (B, T, C) the final norm's output
    float* m_logits = nullptr;     // (B, T, Vp); dlogits after a training forward
    float* m_losses = nullptr;     // (B, T)
    float* m_dresidual = nullptr;  // (B, T, C) d loss / d residual stream, block by block
    float* m_dnormed = nullptr;    // (B, T, C) d loss / d final norm output
    const int32_t* m_inputs = nullptr;  // the backend's copy of the last forward's tokens
    // Tokens and targets copied from the caller's host arrays into backend memory, and the
    // per-row losses read back for the mean (host memory).
    int32_t* m_tokens_be = nullptr;   // (B, T)
    int32_t* m_targets_be = nullptr;  // (B, T)
    std::vector<float> m_losses_host;  // (B, T)
    const float* m_head_weights = nullptr;  // unit 0, held from forward into backward
    bool m_have_dlogits = false;
    double m_loss_sum = 0.0;
    long m_target_count = 0;
    // The segments of the last forward's rows (host memory; kept for backward and recompute).
    std::vector<PositionRun> m_runs;
    std::vector<int32_t> m_attend_from;
};

}  // namespace zt
