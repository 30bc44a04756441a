// The products a block is built from, as types that carry their tensor group and its
// collectives (Megatron's ColumnParallelLinear and RowParallelLinear): a block asks for a
// column-parallel or a row-parallel product and writes the one-rank math; the product knows
// what the group sums, what sequence parallelism gathers and reduce-scatters, and what a
// zero-bubble pipeline defers of its backward (deferred_grads.hpp). Without a group (one
// rank) every collective here is nothing and every product the plain one. Also here: the
// norms' parameter gradients, which sequence parallelism leaves as partial sums. Private
// to model/.
//
// Also the vocabulary cut over the group (VocabParallel): the embedding's tokens, the
// cross-entropy over the LM head's logits, a row of them for the host.
//
// Not here: which tensor is cut how (the layouts, LayoutBuilder's SplitAlong).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/model/transformer.hpp"
#include "lora_adapters.hpp"

namespace zt {

class DeferredWeightGrads;

/// An acquired unit's parameters as the ops take them: the fp32 view (norm weights, biases,
/// tables) and, where the backend's products read them so (Backend::reads_weights_in), the
/// unit's own 16-bit storage for the matrices, which then need no conversion back per
/// product.
struct UnitWeights {
    const float* f32 = nullptr;
    ConstActPtr stored;  ///< data null: the products take the fp32 view too
    /// Whether a partly frozen unit's trained matrices (LoRA's adapters) come from the fp32
    /// view while its frozen ones are read as stored: fp32 activations over a 16-bit base.
    bool trained_from_f32 = false;
    /// The matrix starting at element `offset`, as the products take it.
    ConstActPtr matrix(size_t offset) const {
        return stored.data != nullptr ? stored.offset(offset) : ConstActPtr(f32 + offset);
    }
    /// A trained matrix of a partly frozen unit (an adapter's A or B), as the products take it.
    ConstActPtr trained_matrix(size_t offset) const {
        return trained_from_f32 ? ConstActPtr(f32 + offset) : matrix(offset);
    }
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

/// The tensor group as a model's products, norms and driver see it: its ranks (1 without a
/// group), whether sequence parallelism cuts the residual stream's rows over them, and the
/// driver's buffers its collectives gather into and reduce from. Every rank of the group
/// makes the same calls in the same order.
class TensorParallel {
  public:
    /// Lent by the driver: `gathered` (B, T, C), the whole batch's rows of an operand under
    /// sequence parallelism (valid until the next gather); `dshard` (B T / t, C), a
    /// reduce-scattered input gradient; `partial` (B, T, C), a product's partial sums
    /// before the group's (a column-parallel product's input gradient; under sequence
    /// parallelism a row-parallel product's output).
    struct Buffers {
        ActPtr gathered;
        ActPtr dshard;
        ActPtr partial;
    };
    TensorParallel() = default;
    /// `group` null or of one rank: none. `sequence`: sequence parallelism over it.
    TensorParallel(TensorGroup* group, bool sequence, Buffers buffers)
        : m_group(group != nullptr && group->split().size > 1 ? group : nullptr),
          m_parts(m_group != nullptr ? m_group->split().size : 1),
          m_sequence(sequence && m_parts > 1),
          m_row_parts(m_sequence ? m_parts : 1),
          m_buffers(buffers) {}

    /// The group's ranks (the layout's split): 1 without one.
    int parts() const { return m_parts; }
    /// This rank's place in the group (0 without one).
    int rank() const { return m_group != nullptr ? m_group->split().rank : 0; }
    const Buffers& buffers() const { return m_buffers; }
    /// The rows of a (B T = n)-row buffer this rank's norms and residual stream hold: n, or
    /// under sequence parallelism n / t rounded up (the last rows of the last ranks padding).
    int local_rows(int n) const { return (n + m_row_parts - 1) / m_row_parts; }
    /// The same as a count, for the memory plan: `rows` of the batch, a group of `tensor`
    /// ranks, with or without sequence parallelism (rows divisible by tensor).
    static double local_rows(double rows, int tensor, bool sequence) {
        return sequence && tensor > 1 ? rows / tensor : rows;
    }
    /// Elements of those rows of width `width`.
    size_t local_elements(int n, int width) const {
        return static_cast<size_t>(local_rows(n)) * static_cast<size_t>(width);
    }
    /// Elements the whole-batch buffers of N rows span: N padded to a multiple of t under
    /// sequence parallelism.
    size_t padded_elements(int N, int width) const {
        return static_cast<size_t>(local_rows(N) * m_row_parts) * static_cast<size_t>(width);
    }
    /// Zeroes rows [N, local_rows(N) t) of a (.., width) buffer of the whole batch: the rows
    /// sequence parallelism pads to a multiple of t, so the norms on them see zeros.
    void zero_padding(Backend& be, ActPtr x, int N, int width) const {
        const size_t pad = padded_elements(N, width) - static_cast<size_t>(N) * static_cast<size_t>(width);
        if (pad > 0) {
            be.zero_bytes(x.offset(static_cast<size_t>(N) * static_cast<size_t>(width)).data, pad * dtype_size(x.dtype));
        }
    }
    /// The whole batch's rows (N, width) of a buffer whose local_rows(N) this rank holds:
    /// the buffer itself, or under sequence parallelism the group's rows gathered into
    /// `gathered` (valid until the next gather).
    ConstActPtr gather_rows(ConstActPtr local, int N, int width) const {
        if (!m_sequence) return local;
        m_group->all_gather(local, m_buffers.gathered, local_elements(N, width));
        return m_buffers.gathered;
    }
    /// This rank's rows of a whole-batch buffer x (N, width), written before
    /// gather_in_place(x) fills in the others': x itself without sequence parallelism.
    ActPtr own_rows(ActPtr x, int N, int width) const {
        return m_sequence ? x.offset(local_elements(N, width) * static_cast<size_t>(rank())) : x;
    }
    /// Every rank's own_rows of x, gathered in place (nothing without sequence parallelism).
    void gather_in_place(ActPtr x, int N, int width) const {
        if (m_sequence) m_group->all_gather(ConstActPtr{}, x, local_elements(N, width));
    }
    /// A column-parallel product's input gradient: `partial` (N rows; the padding zeroed by
    /// the caller) summed over the group, in place, or under sequence parallelism
    /// reduce-scattered into this rank's rows (`dshard`). Returns the sum.
    ActPtr sum_input_grad(ActPtr partial, int N, int width) const {
        if (!m_sequence) {
            sum_over_group(partial, static_cast<size_t>(N) * static_cast<size_t>(width));
            return partial;
        }
        m_group->reduce_scatter(partial, m_buffers.dshard, local_elements(N, width));
        return m_buffers.dshard;
    }
    /// Where an op whose output the group sums (a row-parallel product, the
    /// vocabulary-parallel embedding) writes its partial output for `out` (this rank's rows):
    /// out itself, or under sequence parallelism the whole batch's rows in `partial`.
    ActPtr partial_output(ActPtr out) const { return m_sequence ? m_buffers.partial : out; }
    /// out (this rank's rows of width `width`) = the group's sum of partial_output(out):
    /// summed in place, or under sequence parallelism reduce-scattered (the padding rows
    /// zeroed first on `be`).
    void sum_output(Backend& be, ActPtr partial, ActPtr out, int N, int width) const {
        if (!m_sequence) {
            sum_over_group(out, static_cast<size_t>(N) * static_cast<size_t>(width));
            return;
        }
        zero_padding(be, partial, N, width);
        m_group->reduce_scatter(partial, out, local_elements(N, width));
    }
    /// Whether this rank adds the terms a sum over the group must hold once (a row-parallel
    /// product's bias and residual, the position embedding): rank 0 of the group.
    bool adds_once() const { return rank() == 0; }
    /// Sums each rank's partial x over the group, in place (nothing without one).
    void sum_over_group(ActPtr x, size_t n) const {
        if (m_group != nullptr) m_group->all_reduce(x, n);
    }
    /// The same for fp32 values: a sequence-parallel norm's parameter gradients, a shared
    /// weight gradient's rows. Only with a group.
    void sum_floats(float* x, size_t n) const { m_group->all_reduce_floats(x, n, /*max=*/false); }
    /// Whether the norms' rows are this rank's share of the batch's (their parameter
    /// gradients partial sums over the group).
    bool sequence() const { return m_sequence; }

  private:
    TensorGroup* m_group = nullptr;
    int m_parts = 1;
    bool m_sequence = false;
    int m_row_parts = 1;  ///< the ranks the batch's rows are cut over: t under sequence parallelism, else 1
    Buffers m_buffers;
};

/// What a block's products share: the group they run in and where a zero-bubble backward
/// keeps their weight gradients. Both outlive the products (the family owns them).
struct ProductContext {
    const TensorParallel* parallel = nullptr;
    DeferredWeightGrads* deferred = nullptr;
    /// The model's LoRA adapters (null or none: the plain products, every weight trained).
    const LoraAdapters* lora = nullptr;
};

/// Rows of a column-parallel product's weight (and bias) that this rank holds with others
/// (Llama's key/value heads when the group has more ranks than heads): its rows [owned_rows,
/// owned_rows + shared_rows) are one of `slots` blocks, each held by parts / slots
/// consecutive ranks, whose gradient those ranks sum. The buffers (fp32) are the family's.
struct SharedWeightRows {
    int owned_rows = 0;
    int shared_rows = 0;
    int slots = 0;
    float* weight_grad = nullptr;  ///< (out, in): the product's whole weight gradient
    float* exchange = nullptr;     ///< (slots, shared_rows, in): every slot's, summed over the group
};

/// A product out (N, out) = in (N, in) @ w^T (+ bias) of a unit's weight (out, in) at
/// `w_offset` and bias at `b_offset` (kNoBias: none), in this rank's slice; the column- and
/// row-parallel products below say which operand is cut how.
class ParallelLinear {
  public:
    static constexpr size_t kNoBias = SIZE_MAX;
    /// The weight's and bias's places in the unit and the features of this rank's slice.
    struct Shape {
        size_t w_offset = 0;
        size_t b_offset = kNoBias;
        int in = 0;
        int out = 0;
    };
    /// The weight (and bias) gradients from dout and inp as the backward left them (this
    /// rank's rows where the product reads rows; gathered again under sequence parallelism),
    /// added into dw: zero-bubble's weight pass (DeferredWeightGrads::run).
    void weight_grads(Backend& be, UnitGrads dw, ConstActPtr dout, ConstActPtr inp, DType w_dtype, int N) const;

  protected:
    /// `dout_rows`, `in_rows`: whether the backward's output gradient or the input is this
    /// rank's rows of the batch (gathered for the product under sequence parallelism) rather
    /// than all of them. At most one is: both would be gathered into one buffer.
    ParallelLinear(ProductContext ctx, Shape shape, bool dout_rows, bool in_rows)
        : m_ctx(ctx), m_shape(shape), m_dout_rows(dout_rows), m_in_rows(in_rows) {
        find_adapters();
    }
    const float* bias(const UnitWeights& w) const {
        return m_shape.b_offset == kNoBias ? nullptr : w.f32 + m_shape.b_offset;
    }
    /// dinp += d loss / d in (N rows, zeroed by the caller) from dout, and the weight and
    /// bias gradients into dw; or under deferred weight gradients the input gradient now,
    /// with dout copied into `keep` for the weight pass. `keep` (dout's elements and dtype)
    /// is an activation of the block its backward has read for the last time (the product's
    /// own output, or what it was computed from), so the weight pass costs no memory beyond
    /// 1F1B's; inp is the block's activation and stays until then.
    void backward_into(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr inp,
                       const UnitWeights& uw, ActPtr keep, int N);
    /// Whether adapter a adds to weight rows shared with other ranks (m_shared's).
    bool on_shared_rows(const ProductAdapter& a) const;
    /// This rank's slot (n floats) of m_shared's exchange buffer, every slot zeroed first;
    /// then add_shared_slot sums the slots over the group (collective) and adds this rank's
    /// slot's sum into g (copies it there with `zero`): a shared rows' gradient summed over
    /// the ranks sharing them.
    float* shared_slot(Backend& be, size_t n) const;
    void add_shared_slot(Backend& be, float* g, size_t n, bool zero) const;
    /// out (N, out) += the LoRA adapters' outputs from x (N, in), the product's input rows.
    void add_adapters(Backend& be, ActPtr out, ConstActPtr x, const UnitWeights& w, int N) const;
    const TensorParallel& parallel() const { return *m_ctx.parallel; }

    ProductContext m_ctx;
    Shape m_shape;
    /// Set for a product whose weight has rows shared with other ranks (summed gradient).
    SharedWeightRows m_shared;
    /// Its LoRA adapters (m_ctx.lora's for its weight) and whether its weight is frozen.
    std::vector<ProductAdapter> m_adapters;
    bool m_frozen = false;

  private:
    /// An operand the product reads whole: x itself, or its rows gathered (`rows`).
    ConstActPtr operand(ConstActPtr x, bool rows, int N, int width) const {
        return rows ? parallel().gather_rows(x, N, width) : x;
    }
    void find_adapters();
    /// Where an adapter's gradient (n floats at `offset` of the unit) is computed: the unit's
    /// buffer (zeroed first where dw.zero), or under deferral a piece the weight pass adds.
    float* adapter_grad(Backend& be, UnitGrads dw, size_t offset, size_t n) const;
    /// The dropout mask of adapter a's input (this rank's slice of its features).
    DropoutMask input_mask(const ProductAdapter& a) const;
    /// The adapter's input: x, or under lora.dropout x dropped out into the scratch.
    ConstActPtr adapter_input(Backend& be, ConstActPtr x, const ProductAdapter& a, int N) const;
    /// u (N, a.rank) = x A^T, summed over the group for a row-parallel product (whose A and
    /// x are cut by input features): the whole u on every rank. Collective then.
    void adapter_inner(Backend& be, ActPtr u, ConstActPtr x, const UnitWeights& w, const ProductAdapter& a,
                       int N) const;
    /// dinp += the adapters' input gradient; their A and B gradients into dw (dout, x: the
    /// product's whole rows). Under a group, a column-parallel product's A (whole on every
    /// rank) takes the group's sum of du, a row-parallel one's B the whole u: the adapters'
    /// gradients are then the same on every rank that holds the same slice.
    void adapters_backward(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr x,
                           const UnitWeights& w, int N) const;
    /// The weight gradient through m_shared: this rank's rows added, the shared ones summed
    /// over the group first.
    void add_shared_weight_grad(Backend& be, float* dw, bool zero, ConstActPtr dout, ConstActPtr inp, DType w_dtype,
                                int N) const;

    bool m_dout_rows;
    bool m_in_rows;
};

/// A product whose output features are cut over the group (Megatron's ColumnParallelLinear):
/// forward reads the whole batch's rows of its input (gathered under sequence parallelism)
/// and writes this rank's slice of the output, no sum; backward's input gradient is each
/// rank's partial sum, summed over the group (reduce-scattered into this rank's rows under
/// sequence parallelism).
class ColumnParallelLinear final : public ParallelLinear {
  public:
    ColumnParallelLinear() : ParallelLinear({}, {}, false, true) {}
    ColumnParallelLinear(ProductContext ctx, Shape shape) : ParallelLinear(ctx, shape, false, true) {}
    /// The same, with weight rows shared with other ranks (their gradient summed).
    ColumnParallelLinear(ProductContext ctx, Shape shape, SharedWeightRows shared);
    /// out (N, out) from in: this rank's rows of the batch (N of them without sequence
    /// parallelism).
    void forward(Backend& be, ActPtr out, ConstActPtr in, const UnitWeights& w, int N) const {
        const ConstActPtr x = parallel().gather_rows(in, N, m_shape.in);
        be.matmul_forward(out, x, w.matrix(m_shape.w_offset), bias(w), N, m_shape.in, m_shape.out);
        add_adapters(be, out, x, w, N);
    }
    /// d loss / d in (this rank's rows; in the driver's buffers, valid until the next
    /// product's backward) from dout (N, out), the weight and bias gradients into dw.
    ActPtr backward(Backend& be, UnitGrads dw, ConstActPtr dout, ConstActPtr in, const UnitWeights& w, ActPtr keep,
                    int N);
};

/// A product whose input features are cut over the group (Megatron's RowParallelLinear),
/// with the residual stream: out = residual + in @ w^T + bias, each rank's partial product
/// summed over the group (reduce-scattered into this rank's rows under sequence
/// parallelism), bias and residual added once.
class RowParallelLinear final : public ParallelLinear {
  public:
    RowParallelLinear() : ParallelLinear({}, {}, true, false) {}
    RowParallelLinear(ProductContext ctx, Shape shape) : ParallelLinear(ctx, shape, true, false) {}
    /// out and residual: this rank's rows; in (N, in) this rank's slice of the features.
    void forward_residual(Backend& be, ActPtr out, ConstActPtr in, const UnitWeights& w, ConstActPtr residual,
                          int N) const;
    /// dinp (N, in) = d loss / d in from dout (this rank's rows of d loss / d out), the
    /// weight and bias gradients into dw (the bias's from the whole batch's rows, gathered:
    /// the same on every rank); the residual's gradient is dout itself.
    void backward(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr in, const UnitWeights& w,
                  ActPtr keep, int N) {
        zero_act(be, dinp, static_cast<size_t>(N) * static_cast<size_t>(m_shape.in));
        backward_into(be, dinp, dw, dout, in, w, keep, N);
    }
};

/// The norms' parameter gradients (n floats at `offset` of the unit's gradient, zeroed first
/// where dw.zero): computed there; under sequence parallelism (a norm sees this rank's rows
/// only) into a zeroed piece of the driver's `norm_grads`, which sum() adds there summed over
/// the group; under deferred weight gradients into a piece kept for the weight pass.
class NormGrads {
  public:
    NormGrads() = default;
    /// `scratch`: scratch_floats fp32 values of the driver's (sequence parallelism only).
    NormGrads(ProductContext ctx, float* scratch, size_t scratch_floats)
        : m_ctx(ctx), m_rows{scratch, scratch_floats, 0} {}
    /// Where the norm's parameter gradient is to be computed (see above). `heads`: a norm
    /// over this rank's attention heads (Qwen3's q and k norms), whose gradient is a partial
    /// sum whenever there is a group (its pieces in set_heads_scratch's buffer).
    float* at(Backend& be, UnitGrads dw, size_t offset, size_t n, bool heads = false);
    /// The family's fp32 scratch for the head norms' pieces (under a group only).
    void set_heads_scratch(float* scratch, size_t floats) { m_heads = Scratch{scratch, floats, 0}; }
    /// One sum over the group of the pieces at() handed out since the last call (one per
    /// scratch used), each added to its gradient.
    void sum(Backend& be);

  private:
    struct Scratch {
        float* data = nullptr;
        size_t floats = 0;
        size_t used = 0;
    };
    struct Pending {
        float* dw;
        const float* piece;
        size_t n;
    };
    ProductContext m_ctx;
    Scratch m_rows;   ///< the driver's, for the norms over sequence-parallel rows
    Scratch m_heads;  ///< the family's, for the norms over this rank's heads
    std::vector<Pending> m_pending;
};

/// The vocabulary cut over the tensor group (Megatron's VocabParallelEmbedding and its
/// vocabulary-parallel cross-entropy): this rank holds rows [begin, begin + local) of the
/// padded vocabulary of the token embedding and the LM head, of which `live` are real tokens.
/// The logits are never exchanged: the loss sums 3 floats a row over the group.
class VocabParallel {
  public:
    /// For batches of up to max_tokens tokens; `group` null or of one rank: none.
    VocabParallel(const ModelConfig& cfg, TensorGroup* group, Backend& backend, size_t max_tokens);
    ~VocabParallel();
    VocabParallel(const VocabParallel&) = delete;
    VocabParallel& operator=(const VocabParallel&) = delete;
    int begin() const { return m_begin; }
    int local() const { return m_local; }
    /// Whether the cross-entropy needs the group's row statistics (set_row_statistics).
    bool needs_row_statistics() const { return m_group != nullptr; }
    /// Where they are kept (fp32, backend memory, the driver's arena): the rows' maxima (N)
    /// and their sums of exponentials and target logits (2, N), N the largest batch's rows.
    void set_row_statistics(float* row_max, float* row_sums) {
        m_row_max = row_max;
        m_row_sums = row_sums;
    }
    /// The N tokens as this rank's embedding reads them (backend memory): `copied` (the
    /// backend's copy of `tokens`), or under a group their rows of this slice (-1: another
    /// rank's). Under a group each target (if any) must be below the vocabulary size.
    const int32_t* embedding_tokens(const int32_t* tokens, const int32_t* targets, const int32_t* copied, int N);
    /// losses (N) and, with dloss != 0, dloss * d loss / d logits in place of the logits
    /// (N, local) from the targets (backend memory), over the whole vocabulary.
    void cross_entropy(Backend& be, float* losses, ActPtr logits, const int32_t* targets, int N, float dloss) const;
    /// Row `row` of the logits (N, local), widened to fp32, into host memory at out (every
    /// rank's slice in rank order). Collective over the group.
    void logits_row_to_host(ConstActPtr logits, int row, float* out) const;

  private:
    TensorGroup* m_group;
    Backend& m_backend;
    int m_vocab_size;
    int m_begin = 0;
    int m_local = 0;
    int m_live = 0;
    int32_t* m_tokens_be = nullptr;  ///< (max_tokens) the slice's rows of the tokens
    std::vector<int32_t> m_tokens;   ///< their host copy
    float* m_row_max = nullptr;
    float* m_row_sums = nullptr;
};

}  // namespace zt
