// The column- and row-parallel products' forward and backward over the tensor group and the
// norms' parameter gradients under sequence parallelism (parallel_products.hpp); what they
// defer goes to deferred_grads.hpp.
#include "parallel_products.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ztrain/core/error.hpp"
#include "deferred_grads.hpp"

namespace zt {

namespace {
/// A product's weight (out, in) and bias (out; null for kNoBias) gradients at their offsets
/// in the unit's gradient buffer, and how the product writes them: assigned where dw.zero
/// (it is their only writer, so no zeroing pass), else added.
struct ProductGrads {
    float* dw;
    float* db;
    GradWrite write;
};
ProductGrads product_grads(UnitGrads dw, const ParallelLinear::Shape& s) {
    return ProductGrads{dw.base + s.w_offset, s.b_offset == ParallelLinear::kNoBias ? nullptr : dw.base + s.b_offset,
                        dw.zero ? GradWrite::kAssign : GradWrite::kAdd};
}
}  // namespace

void ParallelLinear::find_adapters() {
    if (m_ctx.lora == nullptr || !m_ctx.lora->frozen_base()) return;
    m_frozen = true;
    m_adapters = m_ctx.lora->of_product(m_shape.w_offset, m_shape.in, m_shape.out);
}

bool ParallelLinear::on_shared_rows(const ProductAdapter& a) const {
    return m_shared.slots > 0 && a.out_begin + a.out_width > m_shared.owned_rows;
}

float* ParallelLinear::shared_slot(Backend& be, size_t n) const {
    const SharedWeightRows& s = m_shared;
    ZT_REQUIRE(n <= static_cast<size_t>(s.shared_rows) * static_cast<size_t>(m_shape.in),
               "an adapter's shared-row gradient of ", n, " floats exceeds the exchange buffer");
    const size_t slot = static_cast<size_t>(parallel().rank() / (parallel().parts() / s.slots));
    be.zero(s.exchange, static_cast<size_t>(s.slots) * n);
    return s.exchange + slot * n;
}

void ParallelLinear::add_shared_slot(Backend& be, float* g, size_t n, bool zero) const {
    const SharedWeightRows& s = m_shared;
    const size_t slot = static_cast<size_t>(parallel().rank() / (parallel().parts() / s.slots));
    parallel().sum_floats(s.exchange, static_cast<size_t>(s.slots) * n);
    if (zero) {
        be.copy(g, s.exchange + slot * n, n);
    } else {
        be.accumulate(g, DType::kF32, s.exchange + slot * n, n);
    }
}

DropoutMask ParallelLinear::input_mask(const ProductAdapter& a) const {
    // A row-parallel product's input is this rank's slice of the features.
    return m_ctx.lora->mask(a, m_in_rows ? 0 : parallel().rank() * m_shape.in);
}

ConstActPtr ParallelLinear::adapter_input(Backend& be, ConstActPtr x, const ProductAdapter& a, int N) const {
    if (!m_ctx.lora->dropping()) return x;
    const ActPtr dropped = m_ctx.lora->scratch().dropped;
    be.dropout(dropped, x, N, m_shape.in, input_mask(a));
    return dropped;
}

void ParallelLinear::adapter_inner(Backend& be, ActPtr u, ConstActPtr x, const UnitWeights& w, const ProductAdapter& a,
                                   int N) const {
    be.matmul_forward(u, x, w.trained_matrix(a.a_offset), nullptr, N, m_shape.in, a.rank);
    // A row-parallel product's A is cut by input features: each rank holds a partial u.
    if (!m_in_rows && parallel().parts() > 1)
        parallel().sum_over_group(u, static_cast<size_t>(N) * static_cast<size_t>(a.rank));
}

void ParallelLinear::add_adapters(Backend& be, ActPtr out, ConstActPtr x, const UnitWeights& w, int N) const {
    if (m_adapters.empty()) return;
    const LoraAdapters::Scratch& s = m_ctx.lora->scratch();
    for (const ProductAdapter& a : m_adapters) {
        // u = x A^T (N, r) (x dropped out under lora.dropout), v = u B^T (N, out_width), then
        // out's features += scale v; a row-parallel product's out is summed over the group,
        // so one rank adds v.
        adapter_inner(be, s.u, adapter_input(be, x, a, N), w, a, N);
        if (!m_in_rows && !parallel().adds_once()) continue;
        be.matmul_add_columns(out, m_shape.out, a.out_begin, s.u, w.trained_matrix(a.b_offset), N, a.rank,
                              a.out_width, m_ctx.lora->scale(), s.v);
    }
}

float* ParallelLinear::adapter_grad(Backend& be, UnitGrads dw, size_t offset, size_t n) const {
    // Zero-bubble's weight pass adds it later: it may no longer hold the adapter's weights.
    if (m_ctx.deferred->on()) return m_ctx.deferred->keep_grad(be, offset, n, false);
    float* g = dw.base + offset;
    zero_grad_if(be, dw.zero, g, n);
    return g;
}

void ParallelLinear::adapters_backward(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr x,
                                       const UnitWeights& w, int N) const {
    const LoraAdapters::Scratch& s = m_ctx.lora->scratch();
    const size_t n = static_cast<size_t>(N);
    const int C = m_shape.in;
    // A column-parallel product's B is cut by output features: du is each rank's partial sum.
    const bool partial_du = m_in_rows && parallel().parts() > 1;
    const bool drop = m_ctx.lora->dropping();
    for (const ProductAdapter& a : m_adapters) {
        const size_t r = static_cast<size_t>(a.rank);
        const size_t rows = static_cast<size_t>(a.out_width);
        const ConstActPtr A = w.trained_matrix(a.a_offset);
        float* dA = adapter_grad(be, dw, a.a_offset, r * static_cast<size_t>(C));
        float* dB = adapter_grad(be, dw, a.b_offset, rows * r);
        // u again (cheaper to recompute than to keep per block); du and dB from scale * dout's
        // features (s.v: the backend's scratch where it copies them).
        const ConstActPtr xa = adapter_input(be, x, a, N);
        adapter_inner(be, s.u, xa, w, a, N);
        zero_act(be, s.du, n * r);
        const auto b_grads = [&](float* g) {
            be.matmul_backward_columns(s.du, g, dout, m_shape.out, a.out_begin, s.u, w.trained_matrix(a.b_offset), N,
                                       a.rank, a.out_width, m_ctx.lora->scale(), s.v);
        };
        if (on_shared_rows(a)) {
            // B's rows of a key/value head several ranks share: each rank's gradient covers its
            // own query heads' share, so the ranks sharing the head sum theirs.
            b_grads(shared_slot(be, rows * r));
            add_shared_slot(be, dB, rows * r, false);
        } else {
            b_grads(dB);
        }
        if (!partial_du && !drop) {
            be.matmul_backward(dinp, dA, nullptr, s.du, x, A, N, C, a.rank);
            continue;
        }
        const auto a_grad = [&](ConstActPtr input) {
            be.matmul_backward(ActPtr{nullptr, dinp.dtype}, dA, nullptr, s.du, input, ConstActPtr{nullptr, A.dtype}, N,
                               C, a.rank);
        };
        if (!partial_du) a_grad(xa);  // before the input gradient's share overwrites the dropped x
        // The input gradient's share du A (each rank's partial where du is partial: the group
        // sums the input gradient anyway), through the same mask as x.
        if (drop) {
            zero_act(be, s.dropped, n * static_cast<size_t>(C));
            be.matmul_backward(s.dropped, nullptr, nullptr, s.du, ConstActPtr{nullptr, x.dtype}, A, N, C, a.rank);
            be.dropout(s.dropped, s.dropped, N, C, input_mask(a));
            be.residual_forward(dinp, dinp, s.dropped, n * static_cast<size_t>(C));
        } else {
            be.matmul_backward(dinp, nullptr, nullptr, s.du, ConstActPtr{nullptr, x.dtype}, A, N, C, a.rank);
        }
        if (!partial_du) continue;
        // A's gradient takes the whole du: the group's sum.
        parallel().sum_over_group(s.du, n * r);
        a_grad(adapter_input(be, x, a, N));
    }
}

void ParallelLinear::backward_into(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr inp,
                                   const UnitWeights& uw, ActPtr keep, int N) {
    const int C = m_shape.in;
    const int OC = m_shape.out;
    const ConstActPtr w = uw.matrix(m_shape.w_offset);
    const bool shared = m_shared.weight_grad != nullptr;
    const bool defer = m_ctx.deferred->on();
    const ConstActPtr d = operand(dout, m_dout_rows, N, OC);
    if (m_frozen) {
        // The base's gradient is never computed nor written (shared rows' included): the store
        // keeps none for it, and under deferral nothing is owed for it.
        be.matmul_backward(dinp, nullptr, nullptr, d, ConstActPtr{nullptr, inp.dtype}, w, N, C, OC);
        if (!m_adapters.empty()) adapters_backward(be, dinp, dw, d, operand(inp, m_in_rows, N, C), uw, N);
        return;
    }
    if (!defer && shared) {
        be.matmul_backward(dinp, nullptr, nullptr, d, ConstActPtr{nullptr, inp.dtype}, w, N, C, OC);
        add_shared_weight_grad(be, dw.base + m_shape.w_offset, dw.zero, d, operand(inp, m_in_rows, N, C), w.dtype, N);
        return;
    }
    if (!defer) {
        const ProductGrads g = product_grads(dw, m_shape);
        be.matmul_backward(dinp, g.dw, g.db, d, operand(inp, m_in_rows, N, C), w, N, C, OC, g.write);
        return;
    }
    // The input gradient reads no input.
    be.matmul_backward(dinp, nullptr, nullptr, d, ConstActPtr{nullptr, inp.dtype}, w, N, C, OC);
    const size_t n = static_cast<size_t>(m_dout_rows ? parallel().local_rows(N) : N) * static_cast<size_t>(OC);
    ZT_REQUIRE(keep.data != nullptr && keep.dtype == dout.dtype, "deferred product: no ", dtype_name(dout.dtype),
               " buffer to keep its output gradient in");
    be.cast(keep.data, keep.dtype, dout.data, dout.dtype, n);
    m_ctx.deferred->keep_product(*this, keep, inp, w.dtype, N);
}

void ParallelLinear::weight_grads(Backend& be, UnitGrads dw, ConstActPtr dout, ConstActPtr inp, DType w_dtype,
                                  int N) const {
    // No input gradient, so no weight: the product's weights may be released by now (a
    // ZeRO-3 store gathers them for the backward only); its dtype picks the same product
    // kernel as the backward's. Sequence parallelism gathers an operand's rows again
    // (collective over the group, whose ranks run the same passes).
    const int C = m_shape.in;
    const int OC = m_shape.out;
    if (m_shared.weight_grad != nullptr) {
        add_shared_weight_grad(be, dw.base + m_shape.w_offset, dw.zero, operand(dout, m_dout_rows, N, OC),
                               operand(inp, m_in_rows, N, C), w_dtype, N);
        return;
    }
    const ProductGrads g = product_grads(dw, m_shape);
    be.matmul_backward(ActPtr{nullptr, dout.dtype}, g.dw, g.db, operand(dout, m_dout_rows, N, OC),
                       operand(inp, m_in_rows, N, C), ConstActPtr{nullptr, w_dtype}, N, C, OC, g.write);
}

void ParallelLinear::add_shared_weight_grad(Backend& be, float* dw, bool zero, ConstActPtr dout, ConstActPtr inp,
                                            DType w_dtype, int N) const {
    const SharedWeightRows& s = m_shared;
    const size_t C = static_cast<size_t>(m_shape.in);
    be.zero(s.weight_grad, static_cast<size_t>(m_shape.out) * C);
    be.matmul_backward(ActPtr{nullptr, dout.dtype}, s.weight_grad, nullptr, dout, inp, ConstActPtr{nullptr, w_dtype}, N,
                       m_shape.in, m_shape.out);
    const size_t owned = static_cast<size_t>(s.owned_rows) * C;
    const size_t shared = static_cast<size_t>(s.shared_rows) * C;
    const auto add = [&](float* dst, const float* src, size_t n) {
        if (zero) {
            be.copy(dst, src, n);
        } else {
            be.accumulate(dst, DType::kF32, src, n);
        }
    };
    add(dw, s.weight_grad, owned);
    // Each rank's shared rows' gradient comes from its own owned rows' outputs only: the
    // group sums every slot, each rank filling its own (one all-reduce of all slots, not a
    // sub-group's communicator).
    be.copy(shared_slot(be, shared), s.weight_grad + owned, shared);
    add_shared_slot(be, dw + owned, shared, zero);
    if (m_shape.b_offset == kNoBias) return;
    // The bias (Qwen2's q|k|v) the same way, through the same buffers, now free: its
    // gradient in weight_grad, its shared rows' in exchange.
    float* db = dw - m_shape.w_offset + m_shape.b_offset;
    const size_t out = static_cast<size_t>(m_shape.out);
    const size_t owned_b = static_cast<size_t>(s.owned_rows);
    const size_t shared_b = static_cast<size_t>(s.shared_rows);
    be.zero(s.weight_grad, out);
    be.matmul_backward(ActPtr{nullptr, dout.dtype}, nullptr, s.weight_grad, dout, inp, ConstActPtr{nullptr, w_dtype},
                       N, m_shape.in, m_shape.out);
    add(db, s.weight_grad, owned_b);
    be.copy(shared_slot(be, shared_b), s.weight_grad + owned_b, shared_b);
    add_shared_slot(be, db + owned_b, shared_b, zero);
}

ColumnParallelLinear::ColumnParallelLinear(ProductContext ctx, Shape shape, SharedWeightRows shared)
    : ParallelLinear(ctx, shape, false, true) {
    ZT_REQUIRE(shared.weight_grad != nullptr && shared.exchange != nullptr && shared.slots > 0,
               "shared weight rows without their buffers");
    m_shared = shared;
}

ActPtr ColumnParallelLinear::backward(Backend& be, UnitGrads dw, ConstActPtr dout, ConstActPtr in,
                                      const UnitWeights& w, ActPtr keep, int N) {
    const ActPtr partial = parallel().buffers().partial;
    zero_act(be, partial, parallel().padded_elements(N, m_shape.in));
    backward_into(be, partial, dw, dout, in, w, keep, N);
    return parallel().sum_input_grad(partial, N, m_shape.in);
}

void RowParallelLinear::forward_residual(Backend& be, ActPtr out, ConstActPtr in, const UnitWeights& w,
                                         ConstActPtr residual, int N) const {
    const TensorParallel& tp = parallel();
    const ConstActPtr weight = w.matrix(m_shape.w_offset);
    const int K = m_shape.in;
    const int M = m_shape.out;
    if (tp.sequence()) {
        // The partial products (N rows, the padding zero) reduce-scattered, then the residual.
        const ActPtr partial = tp.partial_output(out);
        be.matmul_forward(partial, in, weight, tp.adds_once() ? bias(w) : nullptr, N, K, M);
        add_adapters(be, partial, in, w, N);
        tp.sum_output(be, partial, out, N, M);
        be.residual_forward(out, out, residual, tp.local_elements(N, M));
        return;
    }
    if (tp.adds_once()) {
        be.matmul_residual_forward(out, in, weight, bias(w), residual, N, K, M);
    } else {
        be.matmul_forward(out, in, weight, nullptr, N, K, M);
    }
    add_adapters(be, out, in, w, N);
    tp.sum_over_group(out, static_cast<size_t>(N) * static_cast<size_t>(M));
}

float* NormGrads::at(Backend& be, UnitGrads dw, size_t offset, size_t n, bool heads) {
    const TensorParallel& tp = *m_ctx.parallel;
    const bool partial = tp.sequence() || (heads && tp.parts() > 1);
    // A frozen norm (LoRA): no gradient (the ops take a null one), and none stored.
    if (m_ctx.lora != nullptr && m_ctx.lora->frozen_base()) return nullptr;
    if (m_ctx.deferred->on()) return m_ctx.deferred->keep_grad(be, offset, n, partial);
    float* g = dw.base + offset;
    zero_grad_if(be, dw.zero, g, n);
    if (!partial) return g;
    Scratch& s = heads ? m_heads : m_rows;
    ZT_REQUIRE(s.used + n <= s.floats, "norm gradients: ", s.used + n, " floats pending, the scratch holds ",
               s.floats);
    float* piece = s.data + s.used;
    be.zero(piece, n);
    m_pending.push_back({g, piece, n});
    s.used += n;
    return piece;
}

void NormGrads::sum(Backend& be) {
    if (m_pending.empty()) return;
    for (Scratch* s : {&m_rows, &m_heads}) {
        if (s->used > 0) m_ctx.parallel->sum_floats(s->data, s->used);
        s->used = 0;
    }
    for (const Pending& p : m_pending) be.accumulate(p.dw, DType::kF32, p.piece, p.n);
    m_pending.clear();
}

VocabParallel::VocabParallel(const ModelConfig& cfg, TensorGroup* group, Backend& backend, size_t max_tokens)
    : m_group(group != nullptr && group->split().size > 1 ? group : nullptr),
      m_backend(backend),
      m_vocab_size(cfg.vocab_size) {
    const TensorSplit split = m_group != nullptr ? m_group->split() : TensorSplit{};
    m_local = cfg.padded_vocab() / split.size;
    m_begin = split.rank * m_local;
    m_live = std::max(0, std::min(m_local, cfg.vocab_size - m_begin));
    if (m_group != nullptr) {
        m_tokens_be = static_cast<int32_t*>(backend.alloc_bytes(max_tokens * sizeof(int32_t)));
        m_tokens.resize(max_tokens);
    }
}

VocabParallel::~VocabParallel() {
    if (m_tokens_be != nullptr) m_backend.free(m_tokens_be);
}

const int32_t* VocabParallel::embedding_tokens(const int32_t* tokens, const int32_t* targets, const int32_t* copied,
                                               int N) {
    if (m_group == nullptr) return copied;
    // The embedding reads its rows of this rank's slice; the others' tokens are -1.
    for (int i = 0; i < N; ++i) {
        const int local = tokens[i] - m_begin;
        m_tokens[static_cast<size_t>(i)] = local >= 0 && local < m_local ? local : -1;
        ZT_REQUIRE(targets == nullptr || targets[i] < m_vocab_size, "cross-entropy: target ", targets[i], " of row ", i,
                   " is not below the vocabulary size ", m_vocab_size);
    }
    m_backend.to_device(m_tokens_be, m_tokens.data(), static_cast<size_t>(N) * sizeof(int32_t));
    return m_tokens_be;
}

void VocabParallel::cross_entropy(Backend& be, float* losses, ActPtr logits, const int32_t* targets, int N,
                                  float dloss) const {
    if (m_group == nullptr) {
        be.softmax_cross_entropy(losses, logits, targets, N, m_vocab_size, m_local, dloss);
        return;
    }
    // Three backend passes around the group's reductions of the rows' maxima and of their
    // sums of exponentials and target logits.
    const size_t n = static_cast<size_t>(N);
    be.cross_entropy_row_max(m_row_max, logits, N, m_live, m_local);
    m_group->all_reduce_floats(m_row_max, n, /*max=*/true);
    be.cross_entropy_row_sums(m_row_sums, logits, m_row_max, targets, N, m_live, m_local, m_begin);
    m_group->all_reduce_floats(m_row_sums, 2 * n, /*max=*/false);
    be.split_cross_entropy(losses, logits, m_row_max, m_row_sums, targets, N, m_live, m_local, m_begin, dloss);
}

void VocabParallel::logits_row_to_host(ConstActPtr logits, int row, float* out) const {
    const size_t Vp = static_cast<size_t>(m_local);
    const ConstActPtr src = logits.offset(static_cast<size_t>(row) * Vp);
    // Under a group this rank's columns first, then every rank's in order.
    std::vector<float> slice(m_group != nullptr ? Vp : 0);
    float* mine = m_group != nullptr ? slice.data() : out;
    if (src.f32()) {
        m_backend.to_host(mine, src.data, Vp * sizeof(float));
    } else {
        std::vector<uint16_t> stored(Vp);
        m_backend.to_host(stored.data(), src.data, Vp * sizeof(uint16_t));
        convert_to_f32(stored.data(), mine, Vp, src.dtype);
    }
    if (m_group != nullptr) m_group->all_gather_host(mine, out, Vp);
}

}  // namespace zt
