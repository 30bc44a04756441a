// What a model family supplies to the shared driver (transformer.cpp): its tensor manifest,
// its block (forward, backward, the activation slots it keeps, its gradient scratch), and
// the two places outside the blocks where families differ: the embedding (learned
// positions or none) and the final norm. Private to model/.
//
// Not here: what tensor parallelism does to a product (parallel_products.hpp: a block
// asks for a column- or row-parallel one and writes the one-rank math) and what a
// zero-bubble backward defers (deferred_grads.hpp).
//
// Adding a family: one file in src/model/ defining its Family (ztrain/model/family.hpp:
// keys, counts, banner, Hugging Face names; its name() is its model.arch) and its
// FamilyTraits, and one line in family_registry.cpp; GPT-2 and Llama keep their traits in
// *_block.cpp, the rest in *_family.cpp. README.md, "Adding a model family".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/model/transformer.hpp"
#include "deferred_grads.hpp"
#include "lora_adapters.hpp"
#include "parallel_products.hpp"

namespace zt {

/// Every activation buffer of one model, in backend memory; counts what it handed out so
/// the constructor can check it against the memory plan's figure. Activations and their
/// gradients are stored in the arena's activation dtype (take_act); what stays fp32 whatever
/// the dtype (normalization statistics, losses, tables, the attention backward's scratch)
/// is taken with take.
class ActivationArena {
  public:
    explicit ActivationArena(Backend& backend, DType activation = DType::kF32)
        : m_backend(backend), m_dtype(activation) {}
    ~ActivationArena();
    ActivationArena(const ActivationArena&) = delete;
    ActivationArena& operator=(const ActivationArena&) = delete;
    /// n zeroed floats, freed with the arena.
    float* take(size_t n);
    /// n zeroed elements of the activation dtype, freed with the arena.
    ActPtr take_act(size_t n);
    DType activation_dtype() const { return m_dtype; }
    /// What was handed out: fp32 elements, activation-dtype elements, and their bytes.
    ActivationCount count() const { return m_count; }
    size_t bytes() const { return static_cast<size_t>(m_count.bytes(m_dtype)); }

  private:
    Backend& m_backend;
    DType m_dtype;
    std::vector<void*> m_all;
    ActivationCount m_count;
};

/// Appends tensors to a layout, unit by unit. Tensor starts inside a unit are aligned to 16
/// floats (64 bytes) so vectorized kernels see aligned rows; the gaps are zero, get zero
/// gradients and stay zero under AdamW.
/// How a tensor is cut under tensor parallelism (TensorSlice): whole, or split along rows
/// (dimension 0, in `blocks` equal blocks) or columns.
struct SplitAlong {
    int dim = -1;
    int blocks = 1;
    int max_parts = 0;  ///< at most this many slices (0: T); a group of more ranks holds copies
};
constexpr SplitAlong kWhole{};
constexpr SplitAlong kRows{0, 1};
constexpr SplitAlong kColumns{1, 1};

class LayoutBuilder {
  public:
    /// Shapes given to add() are the unsplit tensor's; the layout holds `layout.split`'s
    /// slices of them.
    explicit LayoutBuilder(ModelLayout& layout) : m_layout(layout) {}
    void begin_unit() { m_layout.unit_numel.push_back(0); }
    void add(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
             float init_value = 0.f, size_t init_numel = SIZE_MAX, SplitAlong split = kWhole);
    void add(const std::string& name, std::vector<size_t> shape, bool decay, float init_std, SplitAlong split) {
        add(name, std::move(shape), decay, init_std, 0.f, SIZE_MAX, split);
    }
    /// A tensor that starts right where the previous one ends (no alignment gap), so that
    /// consecutive tensors form one matrix: Llama's q|k|v and gate|up.
    void add_packed(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                    SplitAlong split = kWhole);
    /// Adds the LoRA adapters (model.lora) and sums the units into total_numel once every
    /// tensor is added.
    void finish();

  private:
    int last_unit() const { return static_cast<int>(m_layout.unit_numel.size()) - 1; }
    void add_at(int unit, const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                float init_value, size_t init_numel, size_t align, SplitAlong split);
    /// The adapters of the product weights lora.targets names, each at the end of its
    /// weight's unit; every other tensor frozen.
    void add_lora_adapters();

    ModelLayout& m_layout;
    size_t m_next_global = 0;
};

/// One Slots per block, each with an `output` member: fill(slots) takes a block's buffers
/// from the arena. When every block is recomputed only block 0 is filled; the others share
/// its buffers (rebuilt on demand by re-running the block's forward) and own just their
/// output of output_elements, the next block's input. (Under ActivationRecompute::kAttention
/// every block is filled, and `fill` gives each the one shared probabilities buffer.)
template <typename Slots, typename Fill>
std::vector<Slots> allocate_block_slots(int n_layer, ActivationRecompute recompute, ActivationArena& arena,
                                        size_t output_elements, Fill fill) {
    std::vector<Slots> slots(static_cast<size_t>(n_layer));
    for (size_t l = 0; l < slots.size(); ++l) {
        if (recompute == ActivationRecompute::kBlocks && l > 0) {
            slots[l] = slots[0];
            slots[l].output = arena.take_act(output_elements);
        } else {
            fill(slots[l]);
        }
    }
    return slots;
}

/// Elements of one block's attention probabilities on a rank: (max_batch, its n_head /
/// tensor heads, seq_len, seq_len). In double, as the activation counts take it (an absurd
/// shape gives a huge number, not an overflow); an allocation converts a planned one.
inline double attention_probs_elements(const ModelConfig& cfg, int max_batch, int tensor) {
    const double T = cfg.seq_len;
    return static_cast<double>(max_batch) * (cfg.n_head / tensor) * T * T;
}

/// What the driver lends the family's blocks: the tensor group with the buffers its
/// collectives use (TensorParallel::Buffers: `partial` is the driver's d final norm output,
/// free once the final norm's backward has read it; `gathered` its final norm output, free
/// while the blocks run), the backend's attention backward scratch and, under sequence
/// parallelism, `norm_grads` (4 C floats), the norm weights' gradients before their sum.
struct DriverScratch {
    TensorParallel parallel;
    /// The model's LoRA adapters with their scratch (null: none), which the products apply.
    const LoraAdapters* lora = nullptr;
    float* attention_scratch = nullptr;
    /// ActivationRecompute::kAttention: the one buffer every block writes its attention
    /// probabilities into (rebuilt in its backward); null otherwise.
    ActPtr probs{};
    float* norm_grads = nullptr;
    size_t norm_grads_floats = 0;
};

/// Rows holding packed examples (fine-tuning): where positions restart and what each token
/// may attend to. Default (both null): every row is one sequence at positions 0..T-1 with
/// causal attention, the pretraining path, unchanged.
struct RowSegments {
    /// Runs of consecutive positions over the B*T tokens: token offset + i is at position
    /// position + i for i < length; a run never crosses a row. Null: positions are t.
    const std::vector<PositionRun>* runs = nullptr;
    /// (B, T) host memory: token t of row b attends to keys [attend_from[b*T + t], t]
    /// (Backend::gqa_attention_forward_segmented). Null: causal over the whole row.
    const int32_t* attend_from = nullptr;
};

/// One family's blocks at run time. Every method runs on the backend it is given (the
/// model's compute backend: possibly a rounding decorator); weights w and gradients dw are
/// a unit's buffers, `in` the block's input, dres d loss / d block output on entry and
/// d loss / d block input on return.
class ModelFamily {
  public:
    /// The blocks run in scratch.parallel's tensor group (the family's layout is this rank's
    /// split of it, ModelLayout::split).
    explicit ModelFamily(const DriverScratch& scratch)
        : m_parallel(scratch.parallel),
          m_attention_scratch(scratch.attention_scratch),
          m_rebuild_probs(scratch.probs.data != nullptr),
          m_lora(scratch.lora),
          m_deferred(m_parallel),
          m_norm_grads(ProductContext{&m_parallel, &m_deferred, m_lora}, scratch.norm_grads,
                       scratch.norm_grads_floats) {}
    virtual ~ModelFamily() = default;
    ModelFamily(const ModelFamily&) = delete;
    ModelFamily& operator=(const ModelFamily&) = delete;
    /// The segments of the rows the next forward (and its backward, and recompute) runs on;
    /// the driver keeps what they point to alive until the next forward.
    void set_rows(const RowSegments& rows) { m_rows = rows; }
    /// The tensor group the blocks run in, as the driver's own collectives use it too.
    const TensorParallel& parallel() const { return m_parallel; }
    /// out (B, T, C) from the tokens and unit 0.
    virtual void embed_forward(Backend& be, ActPtr out, const int32_t* tokens, const float* unit0, int B,
                               int T) = 0;
    /// Adds the embedding's gradients into dunit0; zeroes the position table's first when
    /// `zero` (the token embedding's are zeroed by the driver with the LM head's).
    virtual void embed_backward(Backend& be, float* dunit0, bool zero, ConstActPtr dout, const int32_t* tokens,
                                int B, int T) = 0;
    virtual void block_forward(Backend& be, int l, const UnitWeights& w, ConstActPtr in, int B, int T) = 0;
    virtual void block_backward(Backend& be, int l, const UnitWeights& w, UnitGrads dw, ConstActPtr in, ActPtr dres,
                                int B, int T) = 0;
    /// Block l's output, the next block's input (kept even under recompute).
    virtual ConstActPtr block_output(int l) const = 0;
    /// The final norm: out (N, C) from in with the last unit's weights w.
    virtual void final_norm_forward(Backend& be, ActPtr out, ConstActPtr in, const float* w, int N) = 0;
    /// dinp += d/d in, dw += d/d weights, from dout.
    virtual void final_norm_backward(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr in,
                                     const float* w, int N) = 0;

    /// Zero-bubble pipelines: from now on block_backward and final_norm_backward compute the
    /// input gradients only and keep what they owe the unit's gradient for run_deferred
    /// (DeferredWeightGrads).
    void defer_product_weight_grads(bool on) { m_deferred.set_on(on); }
    /// Under deferred weight gradients: what follows is block l's backward (kFinalNorm: the
    /// final norm's), whose gradients are owed to that unit.
    void begin_deferred_block(int l) { m_deferred.begin_block(l); }
    static constexpr int kFinalNorm = DeferredWeightGrads::kFinalNorm;
    /// Adds what the backward owes block l's unit (kFinalNorm: the final norm's) into its
    /// gradient buffer `dw` (DeferredWeightGrads::run).
    void run_deferred(Backend& be, int l, UnitGrads dw) { m_deferred.run(be, l, dw); }
    /// Whether a backward's deferred gradients are still owed.
    bool owes_deferred() const { return m_deferred.owes(); }

  protected:
    static constexpr size_t kNoBias = ParallelLinear::kNoBias;
    /// What the family's products are made with: its group and its deferral.
    ProductContext products() { return ProductContext{&m_parallel, &m_deferred, m_lora}; }
    /// Sliding-window attention (Mistral): a query attends to the last `window` positions
    /// of its row at most, itself included (0: the whole causal context).
    void set_sliding_window(int window) { m_window = window; }
    /// Attention over the segments of m_rows (causal when it has none) and the sliding
    /// window: out, att from qkv.
    void attention_forward(Backend& be, ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                           int hs) {
        if (const int32_t* from = attend_from(B, T)) {
            be.gqa_attention_forward_segmented(out, att, qkv, from, B, T, NH, NKV, hs);
        } else {
            be.gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs);
        }
    }
    /// dqkv += the attention's gradient from dout. Under ActivationRecompute::kAttention the
    /// blocks share one att, so the forward runs again first: att from qkv, and out (the
    /// block's attention output, still kept) rewritten with the same values.
    void attention_backward(Backend& be, ActPtr dqkv, ConstActPtr dout, ConstActPtr qkv, ActPtr out, ActPtr att, int B,
                            int T, int NH, int NKV, int hs) {
        if (m_rebuild_probs) attention_forward(be, out, att, qkv, B, T, NH, NKV, hs);
        if (const int32_t* from = attend_from(B, T)) {
            be.gqa_attention_backward_segmented(dqkv, m_attention_scratch, dout, qkv, att, from, B, T, NH, NKV, hs);
        } else {
            be.gqa_attention_backward(dqkv, m_attention_scratch, dout, qkv, att, B, T, NH, NKV, hs);
        }
    }
    /// Where a norm's parameter gradient (n floats at `offset` of the unit's) is computed
    /// (NormGrads::at); add_norm_grads adds what sequence parallelism left as partial sums.
    float* norm_grad(Backend& be, UnitGrads dw, size_t offset, size_t n) { return m_norm_grads.at(be, dw, offset, n); }
    /// The same for a norm over this rank's heads (NormGrads::at's `heads`), pieces in the
    /// family's `scratch` (set once, under a group).
    float* head_norm_grad(Backend& be, UnitGrads dw, size_t offset, size_t n) {
        return m_norm_grads.at(be, dw, offset, n, /*heads=*/true);
    }
    void set_head_norm_scratch(float* scratch, size_t floats) { m_norm_grads.set_heads_scratch(scratch, floats); }
    void add_norm_grads(Backend& be) { m_norm_grads.sum(be); }

    RowSegments m_rows;
    const TensorParallel m_parallel;  ///< the tensor group (parts() 1: none)
    float* m_attention_scratch = nullptr;

  private:
    /// The blocks share the driver's one probabilities buffer (DriverScratch::probs, given
    /// under ActivationRecompute::kAttention): attention_backward rebuilds it first.
    bool m_rebuild_probs = false;
    const LoraAdapters* m_lora = nullptr;
    /// Where each query's keys start ((B, T), Backend::gqa_attention_forward_segmented): the
    /// segments' starts, moved up to the sliding window's (key j is seen from query t iff
    /// t - j < window, transformers' sliding mask); null (plain causal) when the rows have no
    /// segments and the window spans them.
    const int32_t* attend_from(int B, int T) {
        if (m_window <= 0 || m_window >= T) return m_rows.attend_from;
        m_window_from.resize(static_cast<size_t>(B) * static_cast<size_t>(T));
        for (size_t i = 0; i < m_window_from.size(); ++i) {
            const int t = static_cast<int>(i % static_cast<size_t>(T));
            const int segment = m_rows.attend_from != nullptr ? m_rows.attend_from[i] : 0;
            m_window_from[i] = std::max(segment, t - m_window + 1);
        }
        return m_window_from.data();
    }

    DeferredWeightGrads m_deferred;
    NormGrads m_norm_grads;
    int m_window = 0;
    std::vector<int32_t> m_window_from;  ///< attend_from's window, (B, T) host memory
};

/// One layer's key/value cache for generation: rows are positions, (seq_len, NKV hs) each, in
/// backend memory (keys of Llama already rotated).
struct KvLayer {
    float* k = nullptr;
    float* v = nullptr;
    /// The cache from row `row` on, rows of `width` floats.
    KvLayer from_row(int row, size_t width) const {
        const size_t at = static_cast<size_t>(row) * width;
        return {k + at, v + at};
    }
};

/// The new rows of a decoder forward, span after span. One span is plain decoding; spans
/// of one sequence at the same pos are branches that each continue it (the spans run one
/// after another in each block, so a branch overwrites the previous one's keys); spans at
/// different cache rows are separate sequences sharing the forward's products.
struct DecodeRows {
    std::vector<DecodeSpan> spans;
    int total() const {
        int n = 0;
        for (const DecodeSpan& s : spans) n += s.length;
        return n;
    }
};

/// One family's inference forward with a key/value cache (generator.cpp drives it): new
/// tokens of one sequence (or branches of it, DecodeRows), each block computing q, k, v for
/// those rows only and attending over its layer's cache. Buffers for up to max_rows new rows
/// are its own (no activations are kept for a backward).
class FamilyDecoder {
  public:
    virtual ~FamilyDecoder() = default;
    /// out (rows.total(), C) from the tokens of `rows` and unit 0.
    virtual void embed(Backend& be, float* out, const int32_t* tokens, const float* unit0, const DecodeRows& rows) = 0;
    /// x (rows.total(), C), block l's input, becomes its output; k and v of the rows go into kv.
    virtual void block(Backend& be, const float* w, float* x, KvLayer kv, const DecodeRows& rows) = 0;
    /// The final norm: out (n, C) from in with the last unit's weights w.
    virtual void final_norm(Backend& be, float* out, const float* in, const float* w, int n) = 0;
};

/// A family: its manifest, its activation count and its blocks. activations is what `make`
/// takes from the arena for these arguments (without the driver's own buffers).
struct FamilyTraits {
    ModelLayout (*layout)(const ModelConfig& cfg, TensorSplit split);
    /// For one rank of a tensor group of `tensor` ranks.
    /// `sequence`: under sequence parallelism (the norms' rows 1/tensor of the batch's).
    ActivationCount (*activations)(const ModelConfig& cfg, int max_batch, ActivationRecompute recompute, int tensor,
                                   bool sequence);
    std::unique_ptr<ModelFamily> (*make)(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend,
                                         ActivationArena& arena, const DriverScratch& scratch, int max_batch,
                                         ActivationRecompute recompute);
    /// The inference path (generator.cpp) for up to max_rows new tokens per call.
    std::unique_ptr<FamilyDecoder> (*make_decoder)(const ModelConfig& cfg, const ModelLayout& layout,
                                                   Backend& backend, int max_rows);
};

const FamilyTraits& gpt2_traits();
const FamilyTraits& llama_traits();
/// The traits of cfg.arch's family.
const FamilyTraits& family_traits(const ModelConfig& cfg);

}  // namespace zt
