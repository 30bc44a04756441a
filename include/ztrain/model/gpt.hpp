// The transformer (GPT-2 or Llama, model.arch): parameter layout (units + tensor manifest),
// initialization, forward and backward.
//
// Parameters live in flat per-unit buffers: unit 0 = the embeddings (GPT-2: token +
// position; Llama: token, plus lm_head when untied; a tied token embedding doubles as the
// LM head), units 1..L = transformer blocks, unit L+1 = the final norm. A tensor is (unit, offset, shape). The model reads weights and writes
// gradients only through a UnitStore, which decides where those buffers live (replicated,
// sharded and gathered on demand, ...); the model never knows the parallel strategy.
//
// Not here: the optimizer (optim/), data (data/), parallel strategy (parallel/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {

/// One tensor of the manifest.
struct ParamSpec {
    std::string name;          ///< Hugging Face names: "h.3.attn.c_attn.weight" (GPT-2),
                               ///< "model.layers.3.self_attn.q_proj.weight" (Llama)
    int unit = 0;
    size_t offset = 0;         ///< element offset inside the unit's buffer
    std::vector<size_t> shape; ///< ztrain orientation: matrices are (out, in)
    size_t numel = 0;
    bool decay = false;        ///< AdamW weight decay applies
    float init_std = 0.f;      ///< normal(0, init_std); 0 means constant init_value
    float init_value = 0.f;
    size_t global_index = 0;   ///< index of the first element in the model-wide enumeration
    size_t init_numel = 0;     ///< leading elements that get the init; the rest stay 0
                               ///< (the padded vocabulary rows of wte)
};

/// Units and the tensor manifest; a pure function of the model config.
struct ModelLayout {
    ModelConfig model;                ///< the configuration the layout was made from
    std::vector<ParamSpec> params;
    std::vector<size_t> unit_numel;   ///< elements per unit (unpadded)
    size_t total_numel = 0;
    int num_units() const { return static_cast<int>(unit_numel.size()); }
    const ParamSpec& find(const std::string& name) const;
};

/// The layout of cfg.arch's family (GPT-2 or Llama; gpt_layout.cpp lists the tensors).
ModelLayout make_gpt_layout(const ModelConfig& cfg);

/// Fills `out` (unit_numel[unit] floats) with the initial values of that unit: GPT-2 init
/// (std 0.02, residual projections 0.02/sqrt(2L), LayerNorm 1/0, padded vocab rows 0; Llama:
/// std 0.02 everywhere, RMSNorm 1, as Hugging Face initializes it) from
/// a counter-based generator keyed by each element's global index, so every rank and every
/// strategy computes identical weights.
void init_unit(const ModelLayout& layout, int unit, uint64_t seed, float* out);
/// Elements [begin, end) of that unit (end <= unit_numel[unit]) into out[0, end - begin):
/// the same values init_unit gives them, so a unit can be initialized in pieces.
void init_unit_range(const ModelLayout& layout, int unit, uint64_t seed, size_t begin, size_t end, float* out);

/// Where the model gets gathered weights and puts gradients. Implemented by the parallel
/// strategy. Calls come in a fixed order per micro-step (see Gpt::forward/backward).
class UnitStore {
  public:
    virtual ~UnitStore() = default;
    /// Full (gathered) parameters of `unit`, valid until release(unit).
    virtual const float* acquire(int unit) = 0;
    virtual void release(int unit) = 0;
    /// Hint: `unit` will be acquired next; a sharded store may start gathering it.
    virtual void prefetch(int unit) { (void)unit; }
    /// Full-size gradient buffer of `unit`; backward accumulates into it.
    virtual float* grads(int unit) = 0;
    /// Backward has finished adding this micro-step's gradient of `unit`.
    virtual void grads_done(int unit) { (void)unit; }
    /// Asked once per unit per micro-step, after grads(unit): true when the store left that
    /// buffer unzeroed for this optimizer step and the model must zero each gradient tensor
    /// right before its first accumulation (the zeroed lines are then still in cache when the
    /// product adds into them, instead of being zeroed at step start and read back from DRAM).
    virtual bool grads_need_zero(int unit) {
        (void)unit;
        return false;
    }
};

class Gpt {
  public:
    /// Allocates activations for up to max_batch sequences of cfg.seq_len tokens. With
    /// `recompute`, only each block's output is kept; backward re-runs a block's forward
    /// into one shared set of buffers just before its backward (activation checkpointing:
    /// about one extra forward of compute for ~1/L of the block activations' memory).
    Gpt(const ModelConfig& cfg, Backend& backend, int max_batch, bool recompute = false);
    ~Gpt();
    Gpt(const Gpt&) = delete;
    Gpt& operator=(const Gpt&) = delete;

    const ModelLayout& layout() const { return m_layout; }
    const ModelConfig& config() const { return m_cfg; }

    /// Forward over inputs (B, T). With targets, returns the mean cross-entropy over rows
    /// whose target >= 0 and, when dloss != 0, leaves d(dloss * sum of row losses)/dlogits
    /// ready for backward(). Without targets returns 0 and logits() holds (B, T, Vp).
    float forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                  float dloss);
    /// Backward of the last forward (which must have had targets and dloss != 0).
    void backward(UnitStore& store);

    /// Backend memory (device memory on a GPU backend; see logits_row_to_host).
    const float* logits() const { return m_logits; }
    /// Copies logits row `row` (Vp floats, of the last forward) into host memory at out.
    void logits_row_to_host(int row, float* out) const;

    /// Activations and activation gradients in `t`: for bf16/fp16 the model computes through
    /// an ActivationRoundingBackend over its backend (16-bit values in fp32 buffers; see
    /// activation_rounding.hpp). Default fp32. Requires backend.capabilities().supports(t).
    void set_activation_dtype(DType t);
    /// Bytes of activation (and activation-gradient) memory allocated.
    size_t activation_bytes() const { return m_activation_floats * sizeof(float); }
    /// The floats the constructor allocates for these arguments, computed in double (so an
    /// absurd shape gives a huge number, not an overflow) without allocating: the memory
    /// plan's figure. The constructor checks that it allocated exactly this.
    static double activation_floats(const ModelConfig& cfg, int max_batch, bool recompute,
                                    size_t attention_scratch_floats);
    /// Bytes of the token and target copies in backend memory (int32, (B, T) each).
    static double token_bytes(const ModelConfig& cfg, int max_batch) {
        return 2.0 * max_batch * cfg.seq_len * sizeof(int32_t);
    }

  private:
    struct Layer;
    /// Offsets of one block's tensors inside its unit (identical for every block).
    struct BlockOffsets {
        size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    };
    void layer_forward(int l, const float* w, const float* in, int B, int T);
    void layer_backward(int l, const float* w, float* dw, bool zero_dw, const float* in, float* dresidual,
                        int B, int T);
    // Llama (llama.cpp): the same roles, Llama's block. Its BlockOffsets use ln1w, qkvw (the
    // packed q|k|v), attprojw (o_proj), ln2w, fcw (packed gate|up), fcprojw (down_proj); the
    // bias and LayerNorm-bias fields are unused.
    void llama_init(int max_batch);
    void llama_layer_forward(int l, const float* w, const float* in, int B, int T);
    void llama_layer_backward(int l, const float* w, float* dw, bool zero_dw, const float* in, float* dresidual,
                              int B, int T);
    static double llama_activation_floats(const ModelConfig& cfg, int max_batch, bool recompute,
                                          size_t attention_scratch_floats);
    /// Zeroes n gradient floats at p when `zero` (see UnitStore::grads_need_zero).
    void zero_grad_if(bool zero, float* p, size_t n) {
        if (zero) m_backend.zero(p, n);
    }
    float* take(size_t n);

    ModelConfig m_cfg;
    Backend& m_backend;
    ModelLayout m_layout;
    BlockOffsets m_off{};
    size_t m_wpe_offset = 0;
    size_t m_lnf_bias_offset = 0;
    size_t m_head_offset = 0;      // the LM head inside unit 0 (0: tied to the token embedding)
    float* m_zero_wpe = nullptr;   // Llama: (T, C) zeros, the encoder's "position embedding"
    float* m_rope = nullptr;       // Llama: rope_table (T, hs) in backend memory
    int m_max_batch;
    bool m_recompute = false;
    /// What the model's ops run on: m_backend, or a rounding decorator over it (16-bit).
    std::unique_ptr<Backend> m_rounding;
    Backend* m_compute = &m_backend;
    int m_B = 0;
    int m_T = 0;
    size_t m_activation_floats = 0;
    std::vector<float*> m_allocations;
    std::vector<Layer> m_layers;
    // Whole-model activations. Shapes with B = m_max_batch, T = seq_len at allocation.
    float* m_encoded = nullptr;    // (B, T, C)
    float* m_lnf = nullptr;        // (B, T, C)
    float* m_lnf_mean = nullptr;   // (B, T)
    float* m_lnf_rstd = nullptr;   // (B, T)
    float* m_logits = nullptr;     // (B, T, Vp); dlogits after a training forward
    float* m_losses = nullptr;     // (B, T)
    // Gradient scratch reused by every layer (backward accumulates, so each is zeroed first).
    float* m_dresidual = nullptr;  // (B, T, C)
    float* m_dln = nullptr;        // (B, T, C)
    float* m_datty = nullptr;      // (B, T, C)
    float* m_dqkv = nullptr;       // (B, T, 3C)
    float* m_dfch = nullptr;       // (B, T, 4C)
    float* m_dfch_gelu = nullptr;  // (B, T, 4C)
    float* m_att_scratch = nullptr;
    const int32_t* m_inputs = nullptr;     // the backend's copy of the last forward's tokens
    // Tokens and targets copied from the caller's host arrays into backend memory, and the
    // per-row losses read back for the mean (host memory).
    int32_t* m_tokens_be = nullptr;   // (B, T)
    int32_t* m_targets_be = nullptr;  // (B, T)
    std::vector<float> m_losses_host;  // (B, T)
    const float* m_head_weights = nullptr;  // unit 0, held from forward into backward
    bool m_have_dlogits = false;
};

}  // namespace zt
