// GPT-2 forward and backward, written out op by op (no autograd); the parts Llama shares
// (embedding, final norm, LM head, loss, the unit protocol). Llama's block: llama.cpp.
//
// Order of UnitStore calls per micro-step (a sharded store relies on it):
//   forward:  acquire(0) encoder release(0) | for l: acquire(1+l) ... release(1+l) |
//             acquire(L+1) ln_f release(L+1) | acquire(0) LM head (kept for backward)
//   backward: LM head with unit 0 (still held) | acquire(L+1) grads_done(L+1) release(L+1) |
//             for l descending: acquire(1+l) ... grads_done(1+l) release(1+l) |
//             encoder, grads_done(0), release(0)
// So per micro-step a sharded store gathers every unit twice, unit 0 included.
// The next unit is announced with prefetch() before the current one is used.
#include "ztrain/model/gpt.hpp"

#include <cmath>

#include "ztrain/backend/activation_rounding.hpp"
#include "ztrain/core/error.hpp"
#include "gpt_layer.hpp"

namespace zt {

float* Gpt::take(size_t n) {
    float* p = m_backend.alloc_floats(n);
    m_allocations.push_back(p);
    m_activation_floats += n;
    return p;
}

Gpt::Gpt(const ModelConfig& cfg, Backend& backend, int max_batch, bool recompute)
    : m_cfg(cfg), m_backend(backend), m_layout(make_gpt_layout(cfg)), m_max_batch(max_batch), m_recompute(recompute) {
    ZT_REQUIRE(max_batch >= 1, "max_batch ", max_batch);
    if (cfg.is_llama()) {
        llama_init(max_batch);
        return;
    }
    auto off = [&](const char* suffix) { return m_layout.find(str("h.0.", suffix)).offset; };
    if (cfg.n_layer > 0) {
        m_off = BlockOffsets{off("ln_1.weight"),       off("ln_1.bias"),          off("attn.c_attn.weight"),
                             off("attn.c_attn.bias"),  off("attn.c_proj.weight"), off("attn.c_proj.bias"),
                             off("ln_2.weight"),       off("ln_2.bias"),          off("mlp.c_fc.weight"),
                             off("mlp.c_fc.bias"),     off("mlp.c_proj.weight"),  off("mlp.c_proj.bias")};
    }
    m_wpe_offset = m_layout.find("wpe.weight").offset;
    m_lnf_bias_offset = m_layout.find("ln_f.bias").offset;
    const size_t BT = static_cast<size_t>(max_batch) * static_cast<size_t>(cfg.seq_len);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t NH = static_cast<size_t>(cfg.n_head);
    const size_t T = static_cast<size_t>(cfg.seq_len);
    const size_t Vp = static_cast<size_t>(cfg.padded_vocab());
    m_layers.resize(static_cast<size_t>(cfg.n_layer));
    for (size_t l = 0; l < m_layers.size(); ++l) {
        Layer& L = m_layers[l];
        if (recompute && l > 0) {
            // Everything but the block output is shared with block 0 and rebuilt on demand.
            L = m_layers[0];
            L.residual3 = take(BT * C);
            continue;
        }
        L.ln1 = take(BT * C);
        L.ln1_mean = take(BT);
        L.ln1_rstd = take(BT);
        L.qkv = take(BT * 3 * C);
        L.atty = take(BT * C);
        L.att = take(static_cast<size_t>(max_batch) * NH * T * T);
        L.residual2 = take(BT * C);
        L.ln2 = take(BT * C);
        L.ln2_mean = take(BT);
        L.ln2_rstd = take(BT);
        L.fch = take(BT * 4 * C);
        L.fch_gelu = take(BT * 4 * C);
        L.residual3 = take(BT * C);
    }
    m_encoded = take(BT * C);
    m_lnf = take(BT * C);
    m_lnf_mean = take(BT);
    m_lnf_rstd = take(BT);
    m_logits = take(BT * Vp);
    m_losses = take(BT);
    m_dresidual = take(BT * C);
    m_dln = take(BT * C);
    m_datty = take(BT * C);
    m_dqkv = take(BT * 3 * C);
    m_dfch = take(BT * 4 * C);
    m_dfch_gelu = take(BT * 4 * C);
    m_att_scratch = take(backend.attention_scratch_floats(max_batch, cfg.seq_len, cfg.n_head));
    m_tokens_be = static_cast<int32_t*>(backend.alloc_bytes(BT * sizeof(int32_t)));
    m_targets_be = static_cast<int32_t*>(backend.alloc_bytes(BT * sizeof(int32_t)));
    // The memory plan predicts this figure: the two must never drift apart.
    ZT_REQUIRE(static_cast<double>(m_activation_floats) ==
                   activation_floats(cfg, max_batch, recompute, backend.attention_scratch_floats(max_batch, cfg.seq_len,
                                                                                                cfg.n_head)),
               "activation plan differs from the allocation: ", m_activation_floats, " floats allocated");
}

double Gpt::activation_floats(const ModelConfig& cfg, int max_batch, bool recompute, size_t attention_scratch_floats) {
    if (cfg.is_llama()) return llama_activation_floats(cfg, max_batch, recompute, attention_scratch_floats);
    const double BT = static_cast<double>(max_batch) * cfg.seq_len;
    const double C = cfg.n_embd;
    const double T = cfg.seq_len;
    // Per block (Layer): ln1, residual2, ln2, atty, residual3 (5 x BTC), qkv (3), fch and
    // fch_gelu (4 each), the attention probabilities (B NH T T), four LayerNorm statistics.
    const double block = BT * C * (5 + 3 + 8) + static_cast<double>(max_batch) * cfg.n_head * T * T + 4 * BT;
    const double blocks = recompute ? block + (cfg.n_layer - 1) * BT * C : cfg.n_layer * block;
    // Whole model: encoded, lnf (2 x BTC), lnf mean/rstd and losses (3 x BT), logits (BT Vp);
    // gradient scratch: dresidual, dln, datty (3 x BTC), dqkv (3), dfch, dfch_gelu (4 each).
    const double model = BT * C * 2 + 3 * BT + BT * cfg.padded_vocab() + BT * C * (3 + 3 + 8);
    return blocks + model + static_cast<double>(attention_scratch_floats);
}

Gpt::~Gpt() {
    for (float* p : m_allocations) m_backend.free(p);
    m_backend.free(m_tokens_be);
    m_backend.free(m_targets_be);
}

void Gpt::set_activation_dtype(DType t) {
    if (t == DType::kF32) {
        m_rounding.reset();
        m_compute = &m_backend;
        return;
    }
    m_rounding = std::make_unique<ActivationRoundingBackend>(m_backend, t);
    m_compute = m_rounding.get();
}

void Gpt::logits_row_to_host(int row, float* out) const {
    const size_t Vp = static_cast<size_t>(m_cfg.padded_vocab());
    m_backend.to_host(out, m_logits + static_cast<size_t>(row) * Vp, Vp * sizeof(float));
}

void Gpt::layer_forward(int l, const float* w, const float* in, int B, int T) {
    if (m_cfg.is_llama()) {
        llama_layer_forward(l, w, in, B, T);
        return;
    }
    const BlockOffsets& o = m_off;
    Layer& L = m_layers[static_cast<size_t>(l)];
    const int C = m_cfg.n_embd;
    const int NH = m_cfg.n_head;
    const int N = B * T;
    const size_t NC = static_cast<size_t>(N) * static_cast<size_t>(C);
    Backend& be = *m_compute;
    be.layernorm_forward(L.ln1, L.ln1_mean, L.ln1_rstd, in, w + o.ln1w, w + o.ln1b, N, C);
    be.matmul_forward(L.qkv, L.ln1, w + o.qkvw, w + o.qkvb, N, C, 3 * C);
    be.attention_forward(L.atty, L.att, L.qkv, B, T, C, NH);
    // residual2 = in + atty @ Wproj^T + bproj in one op: no separate projection buffer.
    be.matmul_residual_forward(L.residual2, L.atty, w + o.attprojw, w + o.attprojb, in, N, C, C);
    be.layernorm_forward(L.ln2, L.ln2_mean, L.ln2_rstd, L.residual2, w + o.ln2w, w + o.ln2b, N, C);
    be.matmul_forward(L.fch, L.ln2, w + o.fcw, w + o.fcb, N, C, 4 * C);
    be.gelu_forward(L.fch_gelu, L.fch, NC * 4);
    be.matmul_residual_forward(L.residual3, L.fch_gelu, w + o.fcprojw, w + o.fcprojb, L.residual2, N, 4 * C, C);
}

float Gpt::forward(UnitStore& store, const int32_t* inputs, const int32_t* targets, int B, int T,
                   float dloss) {
    ZT_REQUIRE(B >= 1 && B <= m_max_batch, "batch ", B, " outside [1, ", m_max_batch, "]");
    ZT_REQUIRE(T >= 1 && T <= m_cfg.seq_len, "sequence length ", T, " outside [1, ", m_cfg.seq_len, "]");
    m_B = B;
    m_T = T;
    const int C = m_cfg.n_embd;
    const int V = m_cfg.vocab_size;
    const int Vp = m_cfg.padded_vocab();
    const int N = B * T;
    const int nL = m_cfg.n_layer;
    // The callers' token arrays are host memory; the backend reads its own copies (data in
    // is one of the edges where host memory crosses to the backend; a memcpy on the CPU).
    const size_t token_bytes = static_cast<size_t>(N) * sizeof(int32_t);
    const int32_t* targets_be = nullptr;
    m_backend.to_device(m_tokens_be, inputs, token_bytes);
    inputs = m_tokens_be;
    if (targets != nullptr) {
        m_backend.to_device(m_targets_be, targets, token_bytes);
        targets_be = m_targets_be;
    }
    m_inputs = inputs;

    store.prefetch(0);
    const float* emb = store.acquire(0);
    store.prefetch(1);
    // Llama has no learned positions (RoPE rotates q and k instead): it adds a zero table.
    m_compute->encoder_forward(m_encoded, inputs, emb, m_cfg.is_llama() ? m_zero_wpe : emb + m_wpe_offset, B, T, C);
    store.release(0);

    const float* x = m_encoded;
    for (int l = 0; l < nL; ++l) {
        const float* w = store.acquire(1 + l);
        store.prefetch(l + 2 <= nL ? l + 2 : nL + 1);
        layer_forward(l, w, x, B, T);
        store.release(1 + l);
        x = m_layers[static_cast<size_t>(l)].residual3;
    }
    const float* wf = store.acquire(nL + 1);
    store.prefetch(0);
    if (m_cfg.is_llama()) {
        m_compute->rmsnorm_forward(m_lnf, m_lnf_rstd, x, wf, N, C, static_cast<float>(m_cfg.norm_eps));
    } else {
        m_compute->layernorm_forward(m_lnf, m_lnf_mean, m_lnf_rstd, x, wf, wf + m_lnf_bias_offset, N, C);
    }
    store.release(nL + 1);

    // LM head, tied to the token embedding or Llama's untied lm_head (also in unit 0):
    // logits (N, Vp) = lnf (N, C) @ head (Vp, C)^T.
    const float* wte = store.acquire(0) + m_head_offset;
    m_compute->matmul_forward(m_logits, m_lnf, wte, nullptr, N, C, Vp);
    m_have_dlogits = false;
    if (targets == nullptr) {
        store.release(0);
        return 0.f;
    }
    m_compute->softmax_cross_entropy(m_losses, m_logits, targets_be, N, V, Vp, dloss);
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
    m_have_dlogits = dloss != 0.f;
    if (m_have_dlogits) {
        m_head_weights = wte;  // held through backward(), released at its end
    } else {
        store.release(0);
    }
    return counted > 0 ? static_cast<float>(sum / counted) : 0.f;
}

void Gpt::layer_backward(int l, const float* w, float* dw, bool zero_dw, const float* in, float* dres, int B,
                         int T) {
    if (m_cfg.is_llama()) {
        llama_layer_backward(l, w, dw, zero_dw, in, dres, B, T);
        return;
    }
    const BlockOffsets& o = m_off;
    Layer& L = m_layers[static_cast<size_t>(l)];
    const int C = m_cfg.n_embd;
    const int NH = m_cfg.n_head;
    const int N = B * T;
    const size_t NC = static_cast<size_t>(N) * static_cast<size_t>(C);
    Backend& be = *m_compute;
    const size_t CC = static_cast<size_t>(C) * static_cast<size_t>(C);
    // dres holds d loss / d residual3. residual3 = residual2 + mlp(...): the MLP branch gets
    // dres as is, and its LayerNorm backward adds into dres, turning it into d/d residual2.
    be.zero(m_dfch_gelu, NC * 4);
    zero_grad_if(zero_dw, dw + o.fcprojw, 4 * CC);
    zero_grad_if(zero_dw, dw + o.fcprojb, static_cast<size_t>(C));
    be.matmul_backward(m_dfch_gelu, dw + o.fcprojw, dw + o.fcprojb, dres, L.fch_gelu, w + o.fcprojw, N, 4 * C, C);
    be.zero(m_dfch, NC * 4);
    be.gelu_backward(m_dfch, L.fch, m_dfch_gelu, NC * 4);
    be.zero(m_dln, NC);
    zero_grad_if(zero_dw, dw + o.fcw, 4 * CC);
    zero_grad_if(zero_dw, dw + o.fcb, 4 * static_cast<size_t>(C));
    be.matmul_backward(m_dln, dw + o.fcw, dw + o.fcb, m_dfch, L.ln2, w + o.fcw, N, C, 4 * C);
    zero_grad_if(zero_dw, dw + o.ln2w, static_cast<size_t>(C));
    zero_grad_if(zero_dw, dw + o.ln2b, static_cast<size_t>(C));
    be.layernorm_backward(dres, dw + o.ln2w, dw + o.ln2b, m_dln, L.residual2, w + o.ln2w, L.ln2_mean, L.ln2_rstd, N, C);
    // Same for the attention branch: dres becomes d/d block input.
    be.zero(m_datty, NC);
    zero_grad_if(zero_dw, dw + o.attprojw, CC);
    zero_grad_if(zero_dw, dw + o.attprojb, static_cast<size_t>(C));
    be.matmul_backward(m_datty, dw + o.attprojw, dw + o.attprojb, dres, L.atty, w + o.attprojw, N, C, C);
    be.zero(m_dqkv, NC * 3);
    be.attention_backward(m_dqkv, m_att_scratch, m_datty, L.qkv, L.att, B, T, C, NH);
    be.zero(m_dln, NC);
    zero_grad_if(zero_dw, dw + o.qkvw, 3 * CC);
    zero_grad_if(zero_dw, dw + o.qkvb, 3 * static_cast<size_t>(C));
    be.matmul_backward(m_dln, dw + o.qkvw, dw + o.qkvb, m_dqkv, L.ln1, w + o.qkvw, N, C, 3 * C);
    zero_grad_if(zero_dw, dw + o.ln1w, static_cast<size_t>(C));
    zero_grad_if(zero_dw, dw + o.ln1b, static_cast<size_t>(C));
    be.layernorm_backward(dres, dw + o.ln1w, dw + o.ln1b, m_dln, in, w + o.ln1w, L.ln1_mean, L.ln1_rstd, N, C);
}

void Gpt::backward(UnitStore& store) {
    ZT_REQUIRE(m_have_dlogits, "backward() needs a preceding forward() with targets and dloss != 0");
    m_have_dlogits = false;
    const int B = m_B;
    const int T = m_T;
    const int C = m_cfg.n_embd;
    const int Vp = m_cfg.padded_vocab();
    const int N = B * T;
    const int nL = m_cfg.n_layer;
    const size_t NC = static_cast<size_t>(N) * static_cast<size_t>(C);

    // LM head: unit 0 is still acquired from forward() and stays so until the encoder's
    // backward at the very end (the embedding is tied, so a sharded store need not gather it
    // a third time).
    float* demb = store.grads(0);
    const bool zero_emb = store.grads_need_zero(0);
    store.prefetch(nL + 1);
    m_backend.zero(m_dln, NC);
    zero_grad_if(zero_emb, demb + m_head_offset, static_cast<size_t>(Vp) * static_cast<size_t>(C));  // head
    m_compute->matmul_backward(m_dln, demb + m_head_offset, nullptr, m_logits, m_lnf, m_head_weights, N, C, Vp);

    const float* x_last = nL > 0 ? m_layers[static_cast<size_t>(nL - 1)].residual3 : m_encoded;
    const float* wf = store.acquire(nL + 1);
    float* dwf = store.grads(nL + 1);
    const bool zero_f = store.grads_need_zero(nL + 1);
    store.prefetch(nL);
    m_backend.zero(m_dresidual, NC);
    zero_grad_if(zero_f, dwf, m_layout.unit_numel[static_cast<size_t>(nL + 1)]);
    if (m_cfg.is_llama()) {
        m_compute->rmsnorm_backward(m_dresidual, dwf, m_dln, x_last, wf, m_lnf_rstd, N, C);
    } else {
        m_compute->layernorm_backward(m_dresidual, dwf, dwf + m_lnf_bias_offset, m_dln, x_last, wf, m_lnf_mean,
                                      m_lnf_rstd, N, C);
    }
    store.grads_done(nL + 1);
    store.release(nL + 1);

    for (int l = nL - 1; l >= 0; --l) {
        const float* w = store.acquire(1 + l);
        float* dw = store.grads(1 + l);
        const bool zero_dw = store.grads_need_zero(1 + l);
        store.prefetch(l >= 1 ? l : 0);
        const float* in = l == 0 ? m_encoded : m_layers[static_cast<size_t>(l - 1)].residual3;
        // Recompute writes the same values again into the block's (shared) buffers; its
        // residual3 is recomputed in place with bit-identical results.
        if (m_recompute) layer_forward(l, w, in, B, T);
        layer_backward(l, w, dw, zero_dw, in, m_dresidual, B, T);
        store.grads_done(1 + l);
        store.release(1 + l);
    }

    if (m_cfg.is_llama()) {
        // The token embedding's gradient was zeroed with the head's when they are one tensor.
        if (m_head_offset != 0) zero_grad_if(zero_emb, demb, static_cast<size_t>(Vp) * static_cast<size_t>(C));
        m_compute->encoder_backward(demb, nullptr, m_dresidual, m_inputs, B, T, C);
    } else {
        zero_grad_if(zero_emb, demb + m_wpe_offset, static_cast<size_t>(m_cfg.seq_len) * static_cast<size_t>(C));
        m_compute->encoder_backward(demb, demb + m_wpe_offset, m_dresidual, m_inputs, B, T, C);
    }
    store.grads_done(0);
    store.release(0);
    m_head_weights = nullptr;
}

}  // namespace zt
