// What a model family supplies to the shared driver (transformer.cpp): its tensor manifest,
// its block (forward, backward, the activation slots it keeps, its gradient scratch), and
// the two places outside the blocks where families differ: the embedding (learned
// positions or none) and the final norm. Private to model/.
//
// Adding a family: one file in src/model/ defining its Family (ztrain/model/family.hpp:
// keys, counts, banner, Hugging Face names) and its FamilyTraits, one line in
// family_registry.cpp, and its model.arch name (config/); GPT-2 and Llama keep their traits
// in *_block.cpp, the rest in *_family.cpp. README.md, "Adding a model family".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/model/transformer.hpp"

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
    /// Sums the units into total_numel once every tensor is added.
    void finish();

  private:
    void add_at(const std::string& name, std::vector<size_t> shape, bool decay, float init_std, float init_value,
                size_t init_numel, size_t align, SplitAlong split);

    ModelLayout& m_layout;
    size_t m_next_global = 0;
};

/// One Slots per block, each with an `output` member: fill(slots) takes a block's buffers
/// from the arena. With recompute only block 0 is filled; the others share its buffers
/// (rebuilt on demand by re-running the block's forward) and own just their output of
/// output_elements, the next block's input.
template <typename Slots, typename Fill>
std::vector<Slots> allocate_block_slots(int n_layer, bool recompute, ActivationArena& arena, size_t output_elements,
                                        Fill fill) {
    std::vector<Slots> slots(static_cast<size_t>(n_layer));
    for (size_t l = 0; l < slots.size(); ++l) {
        if (recompute && l > 0) {
            slots[l] = slots[0];
            slots[l].output = arena.take_act(output_elements);
        } else {
            fill(slots[l]);
        }
    }
    return slots;
}

/// Buffers the driver owns and lends to the family's blocks: `dscratch` (B, T, C) is free
/// once the final norm's backward has read it, `attention_scratch` is the backend's
/// attention backward scratch. Under sequence parallelism also: `gathered` (B, T, C), free
/// while the blocks run (the final norm's output); `dshard` (B T / t, C), a reduce-scattered
/// gradient; `norm_grads` (4 C floats), the norm weights' gradients before their sum.
struct DriverScratch {
    ActPtr dscratch;
    float* attention_scratch = nullptr;
    ActPtr gathered;
    ActPtr dshard;
    float* norm_grads = nullptr;
    size_t norm_grads_floats = 0;
};

/// An acquired unit's parameters as the ops take them: the fp32 view (norm weights, biases,
/// tables) and, where the backend's products read them so (Backend::reads_weights_in), the
/// unit's own 16-bit storage for the matrices, which then need no conversion back per
/// product.
struct UnitWeights {
    const float* f32 = nullptr;
    ConstActPtr stored;  ///< data null: the products take the fp32 view too
    /// The matrix starting at element `offset`, as the products take it.
    ConstActPtr matrix(size_t offset) const {
        return stored.data != nullptr ? stored.offset(offset) : ConstActPtr(f32 + offset);
    }
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

/// A unit's gradient buffer as block_backward and final_norm_backward add into it: `base`,
/// zeroed first where `zero` (UnitStore::grads_need_zero); or, under deferred weight
/// gradients, none yet (base null): the family keeps what it owes as offsets into the unit
/// and adds it in run_deferred (zero-bubble's weight pass), so a backward leaves the store's
/// gradients untouched.
struct UnitGrads {
    float* base = nullptr;
    bool zero = false;
};

/// Zeroes n gradient floats at p when `zero` (see UnitStore::grads_need_zero): the driver's
/// and every family's gradients start their accumulation through it.
inline void zero_grad_if(Backend& be, bool zero, float* p, size_t n) {
    if (zero) be.zero(p, n);
}

/// Zeroes n activation elements at p (any dtype): an activation gradient before an op
/// accumulates into it.
inline void zero_act(Backend& be, ActPtr p, size_t n) { be.zero_bytes(p.data, n * dtype_size(p.dtype)); }

/// One family's blocks at run time. Every method runs on the backend it is given (the
/// model's compute backend: possibly a rounding decorator); weights w and gradients dw are
/// a unit's buffers, `in` the block's input, dres d loss / d block output on entry and
/// d loss / d block input on return.
class ModelFamily {
  public:
    /// `parts`: the tensor group's ranks (the layout's split); `sequence`: sequence
    /// parallelism over them (ignored for one rank).
    ModelFamily(DriverScratch scratch, int parts, bool sequence)
        : m_scratch(scratch), m_parts(parts), m_sequence(sequence && parts > 1) {}
    virtual ~ModelFamily() {
        for (const NormPiece& p : m_norm_pieces) {
            if (p.data != nullptr && m_pieces_backend != nullptr) m_pieces_backend->free(p.data);
        }
    }
    /// The segments of the rows the next forward (and its backward, and recompute) runs on;
    /// the driver keeps what they point to alive until the next forward.
    void set_rows(const RowSegments& rows) { m_rows = rows; }
    /// The tensor group the blocks split their products over (null: none). The family's
    /// layout is this rank's split (ModelLayout::split).
    void set_tensor_group(TensorGroup* group) { m_tensor = group; }
    /// The rows of a (B T = n)-row buffer this rank's norms and residual stream hold: n, or
    /// under sequence parallelism n / t rounded up (the last rows of the last ranks padding).
    int local_rows(int n) const { return m_sequence ? (n + m_parts - 1) / m_parts : n; }
    /// Zeroes rows [N, local_rows(N) t) of a (.., width) buffer of the whole batch: the rows
    /// sequence parallelism pads to a multiple of t, so the norms on them see zeros.
    void zero_padding(Backend& be, ActPtr x, int N, int width) const {
        const size_t pad = static_cast<size_t>(local_rows(N) * m_parts - N) * static_cast<size_t>(width);
        if (m_sequence && pad > 0) {
            be.zero_bytes(x.offset(static_cast<size_t>(N) * static_cast<size_t>(width)).data, pad * dtype_size(x.dtype));
        }
    }
    /// The whole batch's rows (N, width) of a buffer whose local_rows(N) this rank holds:
    /// the buffer itself, or under sequence parallelism the group's rows gathered into the
    /// driver's `gathered` scratch (valid until the next gather).
    ConstActPtr gather_rows(ConstActPtr local, int N, int width) const {
        if (!m_sequence) return local;
        m_tensor->all_gather(local, m_scratch.gathered, static_cast<size_t>(local_rows(N)) * static_cast<size_t>(width));
        return m_scratch.gathered;
    }
    /// A column-parallel product's input gradient: `partial` (N rows; the padding zeroed by
    /// the caller) summed over the group, in place, or under sequence parallelism
    /// reduce-scattered into this rank's rows (the driver's `dshard`). Returns the sum.
    ActPtr sum_input_grad(ActPtr partial, int N, int width) const {
        if (!m_sequence) {
            sum_over_group(partial, static_cast<size_t>(N) * static_cast<size_t>(width));
            return partial;
        }
        m_tensor->reduce_scatter(partial, m_scratch.dshard, static_cast<size_t>(local_rows(N)) * static_cast<size_t>(width));
        return m_scratch.dshard;
    }
    /// Rows the whole-batch buffers of N rows span: N padded to a multiple of t under
    /// sequence parallelism.
    size_t padded_elements(int N, int width) const {
        return static_cast<size_t>(local_rows(N) * (m_sequence ? m_parts : 1)) * static_cast<size_t>(width);
    }
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
    /// input gradients only and keep what they owe the unit's gradient (the products' weight
    /// and bias gradients, the norms' parameter gradients) for run_deferred.
    void defer_product_weight_grads(bool on) { m_defer = on; }
    /// Under deferred weight gradients: what follows is block l's backward (kFinalNorm: the
    /// final norm's), whose gradients are owed to that unit.
    void begin_deferred_block(int l) { m_defer_block = l; }
    static constexpr int kFinalNorm = -1;
    /// Adds what the backward owes block l's unit (kFinalNorm: the final norm's) into its
    /// gradient buffer `dw` (zeroed first where dw.zero), in the order the backward left it.
    /// Blocks come in the backward's order; the last one's call leaves nothing owed.
    void run_deferred(Backend& be, int l, UnitGrads dw) {
        ZT_REQUIRE(dw.base != nullptr, "run_deferred: no gradient buffer for block ", l);
        for (; m_next_product < m_deferred.size() && m_deferred[m_next_product].block == l; ++m_next_product) {
            const DeferredProduct& d = m_deferred[m_next_product];
            // No input gradient, so no weight: the product's weights may be released by now
            // (a ZeRO-3 store gathers them for the backward only); its dtype picks the same
            // product kernel as the backward's. Sequence parallelism gathers an operand's rows
            // again (collective over the group, whose ranks run the same passes).
            if (d.summed) {
                add_summed_weight_grad(be, dw.base + d.dw_offset, dw.zero, operand(d.dout, d.N, d.OC),
                                       operand(d.inp, d.N, d.C), d.w_dtype, d.N, d.C, d.OC);
                continue;
            }
            const ProductGrads g = product_grads(be, dw, d.dw_offset, d.db_offset, d.C, d.OC);
            be.matmul_backward(ActPtr{nullptr, d.dout.data.dtype}, g.dw, g.db, operand(d.dout, d.N, d.OC),
                               operand(d.inp, d.N, d.C), ConstActPtr{nullptr, d.w_dtype}, d.N, d.C, d.OC);
        }
        for (; m_next_norm < m_deferred_norms.size() && m_deferred_norms[m_next_norm].block == l; ++m_next_norm) {
            const DeferredNorm& d = m_deferred_norms[m_next_norm];
            float* piece = m_norm_pieces[m_next_norm].data;
            // Under sequence parallelism each rank's piece covers its rows: summed over the group.
            if (m_sequence) m_tensor->all_reduce_floats(piece, d.n, /*max=*/false);
            float* g = dw.base + d.offset;
            zero_grad_if(be, dw.zero, g, d.n);
            be.accumulate(g, DType::kF32, piece, d.n);
        }
        if (m_next_product == m_deferred.size() && m_next_norm == m_deferred_norms.size()) {
            m_deferred.clear();
            m_deferred_norms.clear();
            m_next_product = m_next_norm = 0;
        }
    }
    /// Whether a backward's deferred gradients are still owed.
    bool owes_deferred() const { return !m_deferred.empty() || !m_deferred_norms.empty(); }

  protected:
    static constexpr size_t kNoBias = SIZE_MAX;
    /// A product's weight (OC, C) and bias (OC; null for kNoBias) gradients at their offsets
    /// in the unit's gradient buffer, zeroed first where dw.zero.
    struct ProductGrads {
        float* dw;
        float* db;
    };
    static ProductGrads product_grads(Backend& be, UnitGrads dw, size_t w_offset, size_t b_offset, int C, int OC) {
        const ProductGrads g{dw.base + w_offset, b_offset == kNoBias ? nullptr : dw.base + b_offset};
        zero_grad_if(be, dw.zero, g.dw, static_cast<size_t>(OC) * static_cast<size_t>(C));
        if (g.db != nullptr) zero_grad_if(be, dw.zero, g.db, static_cast<size_t>(OC));
        return g;
    }
    /// A product's operand as the block holds it: whole on every rank, or this rank's rows of
    /// it (`rows`), which sequence parallelism gathers over the group for the product.
    struct ProductOperand {
        ConstActPtr data;
        bool rows = false;
    };
    static ProductOperand whole_operand(ConstActPtr x) { return {x, false}; }
    static ProductOperand rows_operand(ConstActPtr x) { return {x, true}; }
    /// The N rows (of `width`) the product reads: x itself, or its rows gathered (gather_rows).
    ConstActPtr operand(ProductOperand x, int N, int width) const {
        return x.rows ? gather_rows(x.data, N, width) : x.data;
    }
    /// A product's backward (Backend::matmul_backward) inside block_backward, its weight's
    /// gradient at `w_offset` of the unit's and its bias's at `b_offset` (kNoBias: none),
    /// zeroed first where dw.zero: all of it, or under deferred weight gradients the input
    /// gradient now, with this rank's dout copied into `keep` for the weight and bias
    /// gradients. `keep` (dout's elements and dtype) is an activation of the block that its
    /// backward has read for the last time (the product's own output, or what it was computed
    /// from), so the weight pass costs no memory beyond 1F1B's; inp is the block's activation
    /// and stays until then. Under sequence parallelism at most one operand is rows (both
    /// would be gathered into the driver's one `gathered` buffer). `summed`: the weight
    /// gradient goes through add_summed_weight_grad (no bias).
    void product_backward(Backend& be, ActPtr dinp, UnitGrads dw, size_t w_offset, size_t b_offset,
                          ProductOperand dout, ProductOperand inp, ConstActPtr w, ActPtr keep, int N, int C, int OC,
                          bool summed = false) {
        ZT_REQUIRE(!(dout.rows && inp.rows), "product backward: both operands gathered into one buffer");
        ZT_REQUIRE(!summed || b_offset == kNoBias, "a summed weight gradient with a bias");
        const ConstActPtr d = operand(dout, N, OC);
        if (!m_defer && summed) {
            be.matmul_backward(dinp, nullptr, nullptr, d, ConstActPtr{nullptr, inp.data.dtype}, w, N, C, OC);
            add_summed_weight_grad(be, dw.base + w_offset, dw.zero, d, operand(inp, N, C), w.dtype, N, C, OC);
            return;
        }
        if (!m_defer) {
            const ProductGrads g = product_grads(be, dw, w_offset, b_offset, C, OC);
            be.matmul_backward(dinp, g.dw, g.db, d, operand(inp, N, C), w, N, C, OC);
            return;
        }
        // The input gradient reads no input.
        be.matmul_backward(dinp, nullptr, nullptr, d, ConstActPtr{nullptr, inp.data.dtype}, w, N, C, OC);
        const size_t n = static_cast<size_t>(dout.rows ? local_rows(N) : N) * static_cast<size_t>(OC);
        ZT_REQUIRE(keep.data != nullptr && keep.dtype == dout.data.dtype, "deferred product: no ",
                   dtype_name(dout.data.dtype), " buffer to keep its output gradient in");
        be.cast(keep.data, keep.dtype, dout.data.data, dout.data.dtype, n);
        m_deferred.push_back(DeferredProduct{m_defer_block, w_offset, b_offset, ProductOperand{keep, dout.rows}, inp,
                                             w.dtype, N, C, OC, summed});
    }
    /// A product's weight gradient (OC, C) from dout (N, OC) and inp (N, C) that this rank does
    /// not own alone (Llama's key/value heads shared by tensor ranks): added into dw (zeroed
    /// first where `zero`), with the shared part summed over the group. `w_dtype` picks the
    /// product kernel as the weights' dtype would. Default: the family has no such product.
    virtual void add_summed_weight_grad(Backend& be, float* dw, bool zero, ConstActPtr dout, ConstActPtr inp,
                                        DType w_dtype, int N, int C, int OC) {
        (void)be, (void)dw, (void)zero, (void)dout, (void)inp, (void)w_dtype, (void)N, (void)C, (void)OC;
        ZT_REQUIRE(false, "this model family has no summed weight gradient");
    }

    /// Attention over the segments of m_rows (causal when it has none): out, att from qkv.
    void attention_forward(Backend& be, ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                           int hs) const {
        if (m_rows.attend_from != nullptr) {
            be.gqa_attention_forward_segmented(out, att, qkv, m_rows.attend_from, B, T, NH, NKV, hs);
        } else {
            be.gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs);
        }
    }
    /// Whether this rank adds the terms a sum over the tensor group must hold once (a
    /// row-parallel product's bias and residual, the position embedding): rank 0 of the group.
    bool adds_once() const { return m_tensor == nullptr || m_tensor->split().rank == 0; }
    /// Sums each rank's partial x over the tensor group, in place (nothing without one).
    void sum_over_group(ActPtr x, size_t n) const {
        if (m_tensor != nullptr) m_tensor->all_reduce(x, n);
    }
    /// A row-parallel product (Megatron's RowParallelLinear) with the residual stream:
    /// out = residual + inp @ w^T + bias, where inp (N, K) and w (M, K) hold this rank's
    /// slice of K; the partial products are summed over the group, bias and residual added
    /// once.
    /// Under sequence parallelism out and residual hold this rank's local_rows(N): the
    /// partial products (N rows, the padding zero) are reduce-scattered, then the residual added.
    void row_parallel_residual(Backend& be, ActPtr out, ConstActPtr inp, ConstActPtr w, const float* bias,
                               ConstActPtr residual, int N, int K, int M) const {
        const float* once = adds_once() ? bias : nullptr;
        if (m_sequence) {
            const ActPtr partial = m_scratch.dscratch;
            be.matmul_forward(partial, inp, w, once, N, K, M);
            zero_padding(be, partial, N, M);
            const size_t local = static_cast<size_t>(local_rows(N)) * static_cast<size_t>(M);
            m_tensor->reduce_scatter(partial, out, local);
            be.residual_forward(out, out, residual, local);
            return;
        }
        if (adds_once()) {
            be.matmul_residual_forward(out, inp, w, bias, residual, N, K, M);
        } else {
            be.matmul_forward(out, inp, w, nullptr, N, K, M);
        }
        sum_over_group(out, static_cast<size_t>(N) * static_cast<size_t>(M));
    }
    /// Where a norm's parameter gradient (n floats at `offset` of the unit's gradient, zeroed
    /// first where dw.zero) is computed: there; under sequence parallelism (the norm saw this
    /// rank's rows only) a zeroed piece of the driver's `norm_grads`, which add_norm_grads
    /// sums over the group and adds there; under deferred weight gradients a zeroed piece
    /// kept for run_deferred.
    float* norm_grad(Backend& be, UnitGrads dw, size_t offset, size_t n) {
        if (m_defer) {
            float* piece = norm_piece(m_deferred_norms.size(), n, be);
            be.zero(piece, n);
            m_deferred_norms.push_back(DeferredNorm{m_defer_block, offset, n});
            return piece;
        }
        float* g = dw.base + offset;
        zero_grad_if(be, dw.zero, g, n);
        if (!m_sequence) return g;
        ZT_REQUIRE(m_norm_grad_used + n <= m_scratch.norm_grads_floats, "norm gradients: ", m_norm_grad_used + n,
                   " floats pending, the scratch holds ", m_scratch.norm_grads_floats);
        float* piece = m_scratch.norm_grads + m_norm_grad_used;
        be.zero(piece, n);
        m_pending_norm_grads.push_back({g, m_norm_grad_used, n});
        m_norm_grad_used += n;
        return piece;
    }
    /// One sum over the group of the pieces norm_grad handed out since the last call, each
    /// added to its gradient.
    void add_norm_grads(Backend& be) {
        if (m_pending_norm_grads.empty()) return;
        m_tensor->all_reduce_floats(m_scratch.norm_grads, m_norm_grad_used, /*max=*/false);
        for (const PendingNormGrad& p : m_pending_norm_grads) {
            be.accumulate(p.dw, DType::kF32, m_scratch.norm_grads + p.at, p.n);
        }
        m_pending_norm_grads.clear();
        m_norm_grad_used = 0;
    }
    void attention_backward(Backend& be, ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                            ConstActPtr att, int B, int T, int NH, int NKV, int hs) const {
        if (m_rows.attend_from != nullptr) {
            be.gqa_attention_backward_segmented(dqkv, scratch, dout, qkv, att, m_rows.attend_from, B, T, NH, NKV, hs);
        } else {
            be.gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs);
        }
    }

    RowSegments m_rows;
    DriverScratch m_scratch;
    int m_parts = 1;  ///< the tensor group's ranks (the layout's split)
    bool m_sequence = false;
    TensorGroup* m_tensor = nullptr;

  private:
    struct PendingNormGrad {
        float* dw;
        size_t at;
        size_t n;
    };
    std::vector<PendingNormGrad> m_pending_norm_grads;
    size_t m_norm_grad_used = 0;
    struct DeferredProduct {
        int block;         ///< whose unit (begin_deferred_block)
        size_t dw_offset;  ///< the weight's gradient in that unit's
        size_t db_offset;  ///< the bias's, or kNoBias
        ProductOperand dout;  ///< this rank's, kept
        ProductOperand inp;
        DType w_dtype;  ///< the weights' (not read for weight gradients, but picking the kernel)
        int N, C, OC;
        bool summed;  ///< through add_summed_weight_grad
    };
    struct DeferredNorm {
        int block;
        size_t offset;  ///< the norm parameters' gradient in the unit's
        size_t n;       ///< floats, in the piece of the same index (m_norm_pieces)
    };
    /// A norm's deferred parameter gradient: fp32 kept from one backward to the next
    /// (allocated once, grown if needed).
    struct NormPiece {
        float* data = nullptr;
        size_t n = 0;
    };
    /// Piece k, at least n floats.
    float* norm_piece(size_t k, size_t n, Backend& be) {
        if (k == m_norm_pieces.size()) m_norm_pieces.push_back(NormPiece{});
        NormPiece& p = m_norm_pieces[k];
        if (p.n < n) {
            if (p.data != nullptr) be.free(p.data);
            p.data = be.alloc_floats(n);
            p.n = n;
            m_pieces_backend = &be;
        }
        return p.data;
    }
    bool m_defer = false;
    int m_defer_block = -1;
    std::vector<DeferredProduct> m_deferred;
    std::vector<DeferredNorm> m_deferred_norms;
    size_t m_next_product = 0;  ///< run_deferred's place in m_deferred
    size_t m_next_norm = 0;     ///< and in m_deferred_norms
    std::vector<NormPiece> m_norm_pieces;  ///< one per norm of a backward
    Backend* m_pieces_backend = nullptr;
};

/// One layer's key/value cache for generation: rows are positions, (seq_len, NKV hs) each, in
/// backend memory (keys of Llama already rotated).
struct KvLayer {
    float* k = nullptr;
    float* v = nullptr;
};

/// One family's inference forward with a key/value cache (generator.cpp drives it): n new
/// tokens at positions [pos, pos + n) of one sequence, each block computing q, k, v for those
/// rows only and attending over its layer's cache. Buffers for up to max_rows new rows are
/// its own (no activations are kept for a backward).
class FamilyDecoder {
  public:
    virtual ~FamilyDecoder() = default;
    /// out (n, C) from the tokens at positions [pos, pos + n) and unit 0.
    virtual void embed(Backend& be, float* out, const int32_t* tokens, const float* unit0, int pos, int n) = 0;
    /// x (n, C), block l's input, becomes its output; k and v of the rows go into kv.
    virtual void block(Backend& be, const float* w, float* x, KvLayer kv, int pos, int n) = 0;
    /// The final norm: out (n, C) from in with the last unit's weights w.
    virtual void final_norm(Backend& be, float* out, const float* in, const float* w, int n) = 0;
};

/// A family: its manifest, its activation count and its blocks. activations is what `make`
/// takes from the arena for these arguments (without the driver's own buffers).
struct FamilyTraits {
    ModelLayout (*layout)(const ModelConfig& cfg, TensorSplit split);
    /// For one rank of a tensor group of `tensor` ranks.
    /// `sequence`: under sequence parallelism (the norms' rows 1/tensor of the batch's).
    ActivationCount (*activations)(const ModelConfig& cfg, int max_batch, bool recompute, int tensor, bool sequence);
    std::unique_ptr<ModelFamily> (*make)(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend,
                                         ActivationArena& arena, DriverScratch scratch, int max_batch,
                                         bool recompute, bool sequence);
    /// The inference path (generator.cpp) for up to max_rows new tokens per call.
    std::unique_ptr<FamilyDecoder> (*make_decoder)(const ModelConfig& cfg, const ModelLayout& layout,
                                                   Backend& backend, int max_rows);
};

const FamilyTraits& gpt2_traits();
const FamilyTraits& llama_traits();
/// The traits of cfg.arch's family.
const FamilyTraits& family_traits(const ModelConfig& cfg);

}  // namespace zt
