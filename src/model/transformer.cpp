// The driver of the unit protocol, shared by every family: embedding, blocks, final norm,
// LM head and loss, forward and backward, recompute. The family's blocks (model_family.hpp)
// do the per-family math.
//
// Order of UnitStore calls per micro-step (a sharded store relies on it):
//   forward:  acquire(0) embedding release(0) | for l: acquire(1+l) ... release(1+l) |
//             acquire(L+1) final norm release(L+1) | acquire(0) LM head (kept for backward;
//             a chunked head's training forward asks for grads(0) here, not in backward)
//   backward: LM head with unit 0 (still held) | acquire(L+1) grads_done(L+1) release(L+1) |
//             for l descending: acquire(1+l) ... grads_done(1+l) release(1+l) |
//             embedding, grads_done(0), release(0)
// So per micro-step a sharded store gathers every unit twice, except unit 0, which it keeps
// through the training step (ParameterStore::hold_first_unit).
// A pipeline stage (StageBlocks) makes the same calls for its part: without the embedding
// the forward starts at its first block, without the head it ends at its last; unit 0's
// grads_done is the last call of a backward on every stage that uses unit 0.
// The next unit is announced with prefetch() before the current one is used.
#include "ztrain/model/transformer.hpp"

#include "ztrain/backend/activation_rounding.hpp"
#include "ztrain/core/error.hpp"
#include "model_family.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace zt {

ActivationArena::~ActivationArena() {
    for (void* p : m_all) m_backend.free(p);
}

float* ActivationArena::take(size_t n) {
    float* p = m_backend.alloc_floats(n);
    m_all.push_back(p);
    m_count.f32 += static_cast<double>(n);
    return p;
}

ActPtr ActivationArena::take_act(size_t n) {
    void* p = m_backend.alloc_bytes(n * dtype_size(m_dtype));
    m_all.push_back(p);
    m_count.act += static_cast<double>(n);
    return ActPtr(p, m_dtype);
}

const FamilyTraits& family_traits(const ModelConfig& cfg) { return model_family(cfg).traits(); }

namespace {
/// The driver's own buffers: embedding output, final norm output, d residual, d final norm
/// (4 x BTC) and the logits (head rows x Vp / T) in the activation dtype; the losses (BT) fp32, and
/// under tensor parallelism the cross-entropy's row maxima and sums (3 BT). Under sequence
/// parallelism the embedding output and d residual hold BT / T rows, plus the reduce-scattered
/// gradient (BT C / T) and the norm weights' gradients (4 C floats). A pipeline stage without
/// the head keeps no logits, losses or row statistics.
ActivationCount driver_activations(const ModelConfig& cfg, int max_batch, int tensor, bool sequence, bool head,
                                   int head_rows) {
    const double BT = static_cast<double>(max_batch) * cfg.seq_len;
    const double C = cfg.n_embd;
    const double ce = head ? BT * (tensor > 1 ? 4 : 1) : 0.0;
    const double logits = head ? static_cast<double>(head_rows) * (cfg.padded_vocab() / tensor) : 0.0;
    // LoRA: the adapters' scratch (LoraAdapters::Scratch), shared by every product.
    const double lora = cfg.lora.on() ? static_cast<double>(LoraAdapters::scratch_elements(
                                            make_model_layout(cfg, TensorSplit{tensor, 0}), static_cast<size_t>(BT)))
                                      : 0.0;
    if (sequence && tensor > 1) return {2 * BT * C + 3 * BT / tensor * C + logits + lora, ce + 4 * C};
    return {4 * BT * C + logits + lora, ce};
}

/// The configuration the family's blocks are made for: the stage's blocks only.
ModelConfig stage_config(const ModelConfig& cfg, StageBlocks stage) {
    ModelConfig c = cfg;
    c.n_layer = stage.last(cfg.n_layer) - stage.begin;
    return c;
}
}  // namespace

std::vector<int> stage_units(const ModelConfig& cfg, StageBlocks stage) {
    std::vector<int> units;
    if (stage.first_stage() || stage.last_stage(cfg.n_layer)) units.push_back(0);
    for (int l = stage.begin; l < stage.last(cfg.n_layer); ++l) units.push_back(1 + l);
    if (stage.last_stage(cfg.n_layer)) units.push_back(cfg.n_layer + 1);
    return units;
}

int Transformer::chunked_head_rows(const ModelConfig& cfg, int max_batch, int tensor) {
    constexpr long kChunkElements = 1L << 24;
    constexpr long kLeastRows = 128;
    const long all = static_cast<long>(max_batch) * cfg.seq_len;
    const long local = std::max(1, cfg.padded_vocab() / std::max(1, tensor));
    const long most = std::min(all, std::max(kLeastRows, kChunkElements / local));
    // Chunks of equal size over a full micro-batch: no last chunk nearly empty.
    const long chunks = (all + most - 1) / most;
    return static_cast<int>((all + chunks - 1) / chunks);
}

int Transformer::logit_rows(int head_rows, int rows) { return head_rows > 0 ? std::min(head_rows, rows) : rows; }

ActivationCount Transformer::activations(const ModelConfig& cfg, int max_batch, ActivationRecompute recompute,
                                         size_t attention_scratch_floats, int tensor, bool sequence,
                                         StageBlocks stage, int head_rows) {
    const ActivationCount driver = driver_activations(cfg, max_batch, tensor, sequence, stage.last_stage(cfg.n_layer),
                                                      logit_rows(head_rows, max_batch * cfg.seq_len));
    const ModelConfig blocks = stage_config(cfg, stage);
    const ActivationCount family = family_traits(cfg).activations(blocks, max_batch, recompute, tensor, sequence);
    return {driver.act + family.act, driver.f32 + family.f32 + static_cast<double>(attention_scratch_floats),
            family.probs};
}

Transformer::Transformer(const ModelConfig& cfg, Backend& backend, int max_batch, const TransformerOptions& options)
    : m_cfg(cfg),
      m_stage{options.stage.begin, options.stage.last(cfg.n_layer)},
      m_blocks(m_stage.end - m_stage.begin),
      m_backend(backend),
      m_tensor(options.tensor != nullptr && options.tensor->split().size > 1 ? options.tensor : nullptr),
      m_sequence(options.sequence && m_tensor != nullptr),
      m_layout(make_model_layout(cfg, m_tensor != nullptr ? m_tensor->split() : TensorSplit{})),
      m_lora(std::make_unique<LoraAdapters>(m_layout)),
      m_max_batch(max_batch),
      m_recompute(options.recompute),
      m_shared_probs(options.shared_probs),
      m_chunk_rows(options.head_rows) {
    ZT_REQUIRE(max_batch >= 1, "max_batch ", max_batch);
    ZT_REQUIRE(m_stage.begin >= 0 && m_stage.end <= cfg.n_layer && (m_blocks >= 1 || cfg.n_layer == 0),
               "pipeline stage: blocks [", m_stage.begin, ", ", m_stage.end, ") are not a non-empty range of the ",
               cfg.n_layer, " blocks");
    ZT_REQUIRE(!m_sequence || cfg.seq_len % m_layout.split.size == 0, "sequence parallelism: seq_len ", cfg.seq_len,
               " is not a multiple of the tensor group's ", m_layout.split.size, " ranks");
    const size_t BT = static_cast<size_t>(max_batch) * static_cast<size_t>(cfg.seq_len);
    m_tokens_be = static_cast<int32_t*>(backend.alloc_bytes(BT * sizeof(int32_t)));
    m_targets_be = static_cast<int32_t*>(backend.alloc_bytes(BT * sizeof(int32_t)));
    // This rank's vocabulary rows (the embedding's and the LM head's slice).
    m_vocab = std::make_unique<VocabParallel>(cfg, m_tensor, backend, BT);
    if (options.activation == DType::kF32) {
        allocate_activations(DType::kF32);
    } else {
        set_activation_dtype(options.activation);
    }
}

void Transformer::allocate_activations(DType stored) {
    m_family.reset();
    m_arena.reset();
    const ModelConfig& cfg = m_cfg;
    const size_t BT = static_cast<size_t>(m_max_batch) * static_cast<size_t>(cfg.seq_len);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const int tensor = m_layout.split.size;
    // The residual stream's rows on this rank: all, or 1/T under sequence parallelism.
    const size_t BTl = m_sequence ? BT / static_cast<size_t>(tensor) : BT;
    m_arena = std::make_unique<ActivationArena>(m_backend, stored);
    ActivationArena& a = *m_arena;
    m_encoded = a.take_act(BTl * C);
    m_normed = a.take_act(BT * C);
    const bool head = last_stage();
    if (head) {
        m_head_rows = logit_rows(m_chunk_rows, static_cast<int>(BT));
        m_logits = a.take_act(static_cast<size_t>(m_head_rows) * static_cast<size_t>(m_vocab->local()));
        m_losses = a.take(BT);
    }
    if (head && m_vocab->needs_row_statistics()) {
        float* row_max = a.take(BT);
        m_vocab->set_row_statistics(row_max, a.take(2 * BT));
    }
    m_dresidual = a.take_act(BTl * C);
    m_dnormed = a.take_act(BT * C);
    const size_t att_scratch = m_backend.attention_scratch_floats(m_max_batch, cfg.seq_len, cfg.n_head / tensor);
    DriverScratch scratch;
    TensorParallel::Buffers buffers;
    buffers.partial = m_dnormed;
    scratch.attention_scratch = a.take(att_scratch);
    if (m_recompute == ActivationRecompute::kAttention) {
        const size_t probs = static_cast<size_t>(attention_probs_elements(cfg, m_max_batch, tensor));
        ZT_REQUIRE(m_shared_probs.data == nullptr || m_shared_probs.dtype == stored,
                   "a shared attention probabilities buffer in ", dtype_name(m_shared_probs.dtype), " for ",
                   dtype_name(stored), " activations");
        m_probs = m_shared_probs.data != nullptr ? m_shared_probs : a.take_act(probs);
        scratch.probs = m_probs;
    }
    if (m_sequence) {
        // The blocks gather into the final norm's output buffer: it is written after them in
        // forward and read before them in backward.
        buffers.gathered = m_normed;
        buffers.dshard = a.take_act(BTl * C);
        scratch.norm_grads_floats = 4 * C;  // GPT-2's block: both LayerNorms' weights and biases
        scratch.norm_grads = a.take(scratch.norm_grads_floats);
    }
    scratch.parallel = TensorParallel(m_tensor, m_sequence, buffers);
    if (m_lora->frozen_base()) {
        const size_t r = static_cast<size_t>(m_lora->max_rank());
        const ActPtr u = a.take_act(BT * r);
        const ActPtr du = a.take_act(BT * r);
        const ActPtr v = a.take_act(BT * static_cast<size_t>(m_lora->widest()));
        const ActPtr dropped =
            m_lora->dropout() > 0.f ? a.take_act(BT * static_cast<size_t>(m_lora->widest_input())) : ActPtr{};
        m_lora->set_scratch({u, du, v, dropped});
        scratch.lora = m_lora.get();
    }
    m_family = family_traits(cfg).make(stage_config(cfg, m_stage), m_layout, m_backend, a, scratch, m_max_batch,
                                       m_recompute);
    // The memory plan predicts this figure: the two must never drift apart.
    const ActivationCount plan =
        activations(cfg, m_max_batch, m_recompute, att_scratch, tensor, m_sequence, m_stage, m_chunk_rows);
    // A shared probabilities buffer (kAttention: the family counts one block's) is the lender's.
    const double probs = m_shared_probs.data != nullptr ? 0 : plan.probs;
    ZT_REQUIRE(a.count().act == plan.act + probs && a.count().f32 == plan.f32,
               "activation plan differs from the allocation: ", a.count().act, " activation elements and ",
               a.count().f32, " floats allocated, ", plan.act + probs, " and ", plan.f32, " planned");
}

Transformer::~Transformer() {
    m_family.reset();
    m_arena.reset();
    m_backend.free(m_tokens_be);
    m_backend.free(m_targets_be);
    m_vocab.reset();
}

size_t Transformer::activation_bytes() const { return m_arena->bytes(); }

void Transformer::set_activation_dtype(DType t, ActivationStorage storage) {
    const BackendCapabilities caps = m_backend.capabilities();
    ZT_REQUIRE(caps.supports(t), "activation dtype ", dtype_name(t), ": backend ", m_backend.name(),
               " supports precision ", caps.work_dtypes(), " only");
    m_backend.set_activation_dtype(t);
    m_act_dtype = t;
    const bool emulate = t != DType::kF32 && storage == ActivationStorage::kEmulated;
    m_rounding = emulate ? std::make_unique<ActivationRoundingBackend>(m_backend, t) : nullptr;
    m_compute = emulate ? m_rounding.get() : &m_backend;
    const DType stored = emulate ? DType::kF32 : t;
    if (!m_arena || m_arena->activation_dtype() != stored) allocate_activations(stored);
}

void Transformer::logits_row_to_host(int row, float* out) const {
    ZT_REQUIRE(row >= m_logits_begin && row < m_logits_end, "logits of row ", row,
               ": the last forward without targets kept rows [", m_logits_begin, ", ", m_logits_end, ")");
    m_vocab->logits_row_to_host(m_logits, row - m_logits_begin, out);
}

float Transformer::forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                           float dloss) {
    return forward(store, inputs, targets, B, T, dloss, TokenRows{});
}

void Transformer::set_rows(const TokenRows& rows, int B, int T) {
    RowSegments seg;
    const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
    // Reserved for the largest batch at once (row_segment_bytes: the memory plan's figure),
    // so the copies never grow step by step.
    const size_t max_tokens = static_cast<size_t>(m_max_batch) * static_cast<size_t>(m_cfg.seq_len);
    if (rows.positions != nullptr) {
        m_runs.reserve(max_tokens);
        // Cut each row where the position does not continue the previous token's.
        m_runs.clear();
        for (int b = 0; b < B; ++b) {
            for (int t = 0; t < T; ++t) {
                const int i = b * T + t;
                const int p = rows.positions[i];
                ZT_REQUIRE(p >= 0 && p < m_cfg.seq_len, "position ", p, " of token ", i, " outside [0, ",
                           m_cfg.seq_len, ")");
                PositionRun* last = m_runs.empty() ? nullptr : &m_runs.back();
                if (t > 0 && last != nullptr && p == last->position + last->length) {
                    ++last->length;
                } else {
                    m_runs.push_back(PositionRun{i, 1, p});
                }
            }
        }
        seg.runs = &m_runs;
    }
    if (rows.segment_start != nullptr) {
        m_attend_from.reserve(max_tokens);
        m_attend_from.assign(rows.segment_start, rows.segment_start + N);
        seg.attend_from = m_attend_from.data();
    }
    m_family->set_rows(seg);
}

float Transformer::forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                           float dloss, const TokenRows& rows) {
    ZT_REQUIRE(B >= 1 && B <= m_max_batch, "batch ", B, " outside [1, ", m_max_batch, "]");
    ZT_REQUIRE(T >= 1 && T <= m_cfg.seq_len, "sequence length ", T, " outside [1, ", m_cfg.seq_len, "]");
    m_B = B;
    m_T = T;
    // The callers' token arrays are host memory; the backend reads its own copies (data in
    // is one of the edges where host memory crosses to the backend; a memcpy on the CPU).
    const int N = B * T;
    const size_t token_bytes = static_cast<size_t>(N) * sizeof(int32_t);
    const int32_t* targets_be = nullptr;
    m_backend.to_device(m_tokens_be, inputs, token_bytes);
    if (targets != nullptr) {
        m_backend.to_device(m_targets_be, targets, token_bytes);
        targets_be = m_targets_be;
    }
    m_inputs = m_vocab->embedding_tokens(inputs, targets, m_tokens_be, N);
    set_rows(rows, B, T);
    m_lora->set_rows(m_dropout_rows, T);
    embed_and_blocks(store, m_inputs, B, T);
    if (last_stage()) return head_and_loss(store, targets, targets_be, N, dloss);
    m_loss_sum = 0.0;
    m_target_count = 0;
    m_have_dlogits = targets != nullptr && dloss != 0.f;
    return 0.f;
}

ConstActPtr Transformer::stage_output() const {
    return m_blocks > 0 ? m_family->block_output(m_blocks - 1) : ConstActPtr(m_encoded);
}

UnitWeights Transformer::unit_weights(UnitStore& store, int unit) const {
    // The products take the unit's 16-bit storage itself where the backend reads it so;
    // the fp32 view then needs only the vectors (norm weights, biases) and, under fp32
    // activations, the adapters of a 16-bit LoRA base (its frozen products run on bf16).
    const DType t = store.stored_dtype();
    if (t == DType::kF32 || !m_backend.reads_weights_in(t)) return UnitWeights{store.acquire(unit), {}};
    UnitWeights w{store.acquire_vectors(unit), store.acquired_storage(unit)};
    w.trained_from_f32 = m_act_dtype == DType::kF32;
    ZT_REQUIRE(w.stored.data != nullptr && w.stored.dtype == t, "unit ", unit, ": the store keeps ", dtype_name(t),
               " weights but hands out no such storage");
    return w;
}

void Transformer::embed_and_blocks(UnitStore& store, const int32_t* inputs, int B, int T) {
    const int nL = m_cfg.n_layer;
    const int first_unit = 1 + m_stage.begin;  // the stage's first block's unit
    const int N = B * T;
    const int C = m_cfg.n_embd;
    if (first_stage()) {
        store.prefetch(0);
        const float* emb = store.acquire(0);
        store.prefetch(first_unit);
        // Each rank embeds the tokens of its vocabulary slice (zeros for the others'); the
        // group sums them, each rank keeping its rows under sequence parallelism.
        const TensorParallel& tp = m_family->parallel();
        const ActPtr partial = tp.partial_output(m_encoded);
        m_family->embed_forward(*m_compute, partial, inputs, emb, B, T);
        tp.sum_output(m_backend, partial, m_encoded, N, C);
        store.release(0);
    } else {
        store.prefetch(first_unit);
    }

    ConstActPtr x = m_encoded;
    for (int l = 0; l < m_blocks; ++l) {
        const UnitWeights w = unit_weights(store, first_unit + l);
        if (l + 1 < m_blocks || last_stage()) store.prefetch(l + 1 < m_blocks ? first_unit + l + 1 : nL + 1);
        m_lora->set_block(m_stage.begin + l);
        m_family->block_forward(*m_compute, l, w, x, B, T);
        store.release(first_unit + l);
        x = m_family->block_output(l);
    }
    if (!last_stage()) return;
    const float* wf = store.acquire(nL + 1);
    store.prefetch(0);
    // This rank's rows of the output in place, then every rank's (sequence parallelism).
    const TensorParallel& tp = m_family->parallel();
    m_family->final_norm_forward(*m_compute, tp.own_rows(m_normed, N, C), x, wf, tp.local_rows(N));
    tp.gather_in_place(m_normed, N, C);
    store.release(nL + 1);
}

size_t Transformer::local_elements(int N) const {
    return m_family->parallel().local_elements(N, m_cfg.n_embd);
}

float Transformer::head_and_loss(UnitStore& store, const int32_t* targets, const int32_t* targets_be, int N,
                                 float dloss) {
    const int C = m_cfg.n_embd;
    const int Vp = m_vocab->local();
    // LM head, tied to the token embedding or an untied head (also in unit 0):
    // logits (N, Vp) = normed (N, C) @ head (Vp, C)^T, Vp of this rank's vocabulary slice.
    m_head = unit_weights(store, 0).matrix(m_layout.head_offset);
    m_have_dlogits = false;
    m_head_grads_done = false;
    m_loss_sum = 0.0;
    m_target_count = 0;
    if (targets == nullptr) {
        head_logits(N);
        store.release(0);
        m_head = ConstActPtr{};
        return 0.f;
    }
    // A chunked head takes its gradients chunk by chunk, before the next chunk's logits
    // overwrite the dlogits they need.
    const bool training = dloss != 0.f;
    const bool in_forward = training && m_chunk_rows > 0;
    GradWrite write = in_forward ? begin_head_gradients(store, N) : GradWrite::kAdd;
    for (int r0 = 0; r0 < N; r0 += m_head_rows) {
        const int n = std::min(m_head_rows, N - r0);
        m_compute->matmul_forward(m_logits, m_normed.offset(static_cast<size_t>(r0) * C), m_head, nullptr, n, C, Vp);
        m_vocab->cross_entropy(*m_compute, m_losses + r0, m_logits, targets_be + r0, n, dloss);
        if (!in_forward) continue;
        head_gradients(r0, n, write);
        write = GradWrite::kAdd;
    }
    m_head_grads_done = in_forward;
    m_logits_begin = m_logits_end = 0;
    // The mean is taken on the host (targets is the caller's host array).
    m_losses_host.resize(static_cast<size_t>(N));
    m_backend.to_host(m_losses_host.data(), m_losses, static_cast<size_t>(N) * sizeof(float));
    const float* losses = m_losses_host.data();
    double sum = 0.0;
    int counted = 0;
    for (int i = 0; i < N; ++i) {
        if (targets[i] >= 0) {
            sum += losses[i];
            ++counted;
        }
    }
    m_loss_sum = sum;
    m_target_count = counted;
    m_have_dlogits = training;
    if (!training) {
        store.release(0);
        m_head = ConstActPtr{};
    }  // else held through backward(), released at its end
    return counted > 0 ? static_cast<float>(sum / counted) : 0.f;
}

void Transformer::head_logits(int N) {
    const int C = m_cfg.n_embd;
    const int n = std::min(N, m_head_rows);
    m_logits_begin = N - n;
    m_logits_end = N;
    m_compute->matmul_forward(m_logits, m_normed.offset(static_cast<size_t>(m_logits_begin) * C), m_head, nullptr, n,
                              C, m_vocab->local());
}

GradWrite Transformer::begin_head_gradients(UnitStore& store, int N) {
    // Unit 0's gradient is asked for once per micro-step, by its first user: the head on the
    // last stage (here), the embedding on a first stage without the head.
    m_unit0_grads = store.grads(0);
    m_unit0_zero = store.grads_need_zero(0);
    const TensorParallel& tp = m_family->parallel();
    zero_act(m_backend, m_dnormed, tp.padded_elements(N, m_cfg.n_embd));
    // The head's product writes its gradient first (assigned, no zeroing pass). A last stage
    // without the embedding owns all of unit 0's gradient buffer but adds only the head's:
    // the rest must read zero when the stages' copies are summed. A frozen head (LoRA) has
    // no gradient buffer.
    const bool frozen = m_lora->frozen_base();
    if (!frozen && !first_stage()) zero_grad_if(m_backend, m_unit0_zero, m_unit0_grads, m_layout.unit_numel[0]);
    return !frozen && first_stage() && m_unit0_zero ? GradWrite::kAssign : GradWrite::kAdd;
}

void Transformer::head_gradients(int r0, int n, GradWrite write) {
    const int C = m_cfg.n_embd;
    const size_t at = static_cast<size_t>(r0) * static_cast<size_t>(C);
    // A frozen head (LoRA): its input gradient only.
    float* dhead = m_lora->frozen_base() ? nullptr : m_unit0_grads + m_layout.head_offset;
    m_compute->matmul_backward(m_dnormed.offset(at), dhead, nullptr, m_logits, m_normed.offset(at), m_head, n, C,
                               m_vocab->local(), write);
}

void Transformer::head_backward(UnitStore& store, int N) {
    const int C = m_cfg.n_embd;
    const int nL = m_cfg.n_layer;
    // LM head: unit 0 is still acquired from forward(); on the whole model it stays so until
    // the embedding's backward at the very end (the embedding is tied, so a sharded store
    // need not gather it a third time).
    store.prefetch(nL + 1);
    if (!m_head_grads_done) head_gradients(0, N, begin_head_gradients(store, N));
    m_head_grads_done = false;
    // The LM head is column-parallel: each rank's input gradient covers its vocabulary slice.
    const TensorParallel& tp = m_family->parallel();
    const ActPtr dnormed = tp.sum_input_grad(m_dnormed, N, C);

    const ConstActPtr x_last = stage_output();
    const float* wf = store.acquire(nL + 1);
    // Deferred weight gradients: the final norm's are kept for backward_weights.
    UnitGrads dwf;
    if (m_defer_weights) {
        m_family->begin_deferred_block(ModelFamily::kFinalNorm);
    } else {
        dwf = UnitGrads{store.grads(nL + 1), store.grads_need_zero(nL + 1)};
    }
    store.prefetch(m_stage.end);
    zero_act(m_backend, m_dresidual, local_elements(N));
    m_family->final_norm_backward(*m_compute, m_dresidual, dwf, dnormed, x_last, wf, tp.local_rows(N));
    grads_done(store, nL + 1);
    store.release(nL + 1);
}

void Transformer::backward(UnitStore& store) {
    ZT_REQUIRE(m_have_dlogits, "backward() needs a preceding forward() with targets and dloss != 0");
    m_have_dlogits = false;
    UnitGrads demb;
    if (last_stage()) {
        head_backward(store, m_B * m_T);
        demb = UnitGrads{m_unit0_grads, m_unit0_zero};
    } else {
        // A stage without the head starts from the d residual its caller wrote.
        store.prefetch(m_stage.end);  // the last block's unit
    }
    blocks_backward(store);
    if (first_stage()) embedding_backward(store, demb);
    // Unit 0's gradient is the last a backward finishes, on every stage that has it (a
    // store reduces buckets and releases the held unit 0 on that promise).
    if (first_stage() || last_stage()) {
        grads_done(store, 0);
        store.release(0);
        m_head = ConstActPtr{};
    }
}

void Transformer::blocks_backward(UnitStore& store) {
    const int first_unit = 1 + m_stage.begin;
    for (int l = m_blocks - 1; l >= 0; --l) {
        const UnitWeights w = unit_weights(store, first_unit + l);
        // Deferred weight gradients: the block's are kept for backward_weights, which asks
        // for the unit's buffer then (a store reducing each micro-step's gradients keeps
        // each unit's between one grads() and its grads_done()).
        UnitGrads dw;
        if (m_defer_weights) {
            m_family->begin_deferred_block(l);
        } else {
            dw = UnitGrads{store.grads(first_unit + l), store.grads_need_zero(first_unit + l)};
        }
        if (l >= 1 || first_stage()) store.prefetch(l >= 1 ? first_unit + l - 1 : 0);
        const ConstActPtr in = l == 0 ? ConstActPtr(m_encoded) : m_family->block_output(l - 1);
        // Recompute writes the same values again into the block's (shared) buffers; its
        // output is recomputed in place with bit-identical results.
        m_lora->set_block(m_stage.begin + l);
        if (m_recompute == ActivationRecompute::kBlocks) m_family->block_forward(*m_compute, l, w, in, m_B, m_T);
        m_family->block_backward(*m_compute, l, w, dw, in, m_dresidual, m_B, m_T);
        grads_done(store, first_unit + l);
        store.release(first_unit + l);
    }
}

void Transformer::embedding_backward(UnitStore& store, UnitGrads demb) {
    const int C = m_cfg.n_embd;
    const size_t head_numel = static_cast<size_t>(m_vocab->local()) * static_cast<size_t>(C);
    // The token embedding's gradient was zeroed with the head's when they are one tensor; a
    // first stage without the head asks for unit 0's now and zeroes all of it (the head's
    // part reads zero).
    if (!last_stage()) demb = UnitGrads{store.grads(0), store.grads_need_zero(0)};
    // A frozen embedding (LoRA): no gradient, and no buffer for one.
    if (m_lora->frozen_base()) return;
    if (!last_stage()) {
        zero_grad_if(m_backend, demb.zero, demb.base, m_layout.unit_numel[0]);
    } else if (m_layout.head_offset != 0) {
        zero_grad_if(m_backend, demb.zero, demb.base, head_numel);
    }
    // The embedding's gradient reads every row (under sequence parallelism gathered into the
    // final norm's output, no longer needed).
    const ConstActPtr dout = m_family->parallel().gather_rows(m_dresidual, m_B * m_T, C);
    m_family->embed_backward(*m_compute, demb.base, demb.zero, dout, m_inputs, m_B, m_T);
}

void Transformer::grads_done(UnitStore& store, int unit) {
    if (m_defer_weights) {
        m_done_later.push_back(unit);
    } else {
        store.grads_done(unit);
    }
}

void Transformer::defer_weight_grads(bool on) {
    ZT_REQUIRE(!on || m_recompute != ActivationRecompute::kBlocks,
               "deferred weight gradients need the blocks' activations kept (no recompute of whole blocks)");
    ZT_REQUIRE(m_done_later.empty(), "defer_weight_grads: the last backward's weight gradients are still owed");
    m_defer_weights = on;
    m_family->defer_product_weight_grads(on);
}

void Transformer::backward_weights(UnitStore& store) {
    // The units in the backward's order, each one's gradients asked for, added and finished
    // here, as a plain backward does: a store that reduces each unit's gradient at
    // grads_done sees one micro-step's complete unit at a time. Unit 0's (the head's and the
    // embedding's) were added by the backward itself: its buffer is kept through the step.
    const int nL = m_cfg.n_layer;
    const int first_unit = 1 + m_stage.begin;
    for (int u : m_done_later) {
        const bool block = u >= first_unit && u < first_unit + m_blocks;
        if (block || u == nL + 1) {
            const UnitGrads dw{store.grads(u), store.grads_need_zero(u)};
            m_family->run_deferred(*m_compute, block ? u - first_unit : ModelFamily::kFinalNorm, dw);
        }
        store.grads_done(u);
    }
    m_done_later.clear();
    ZT_REQUIRE(!m_family->owes_deferred(), "backward_weights: deferred gradients left for no unit");
}

}  // namespace zt
