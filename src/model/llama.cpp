// The Llama block (Hugging Face LlamaDecoderLayer), forward and backward op by op:
//   x2 = x + o_proj(attn(rope(qkv_proj(rmsnorm1(x)))))
//   y  = x2 + down_proj(silu(gate_proj(h)) * up_proj(h)),  h = rmsnorm2(x2)
// with grouped-query attention (NKV key/value heads) and no biases. The embedding, final
// norm, LM head, loss and unit protocol are gpt.cpp's.
#include <cmath>
#include <vector>

#include "ztrain/backend/rope.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/gpt.hpp"
#include "gpt_layer.hpp"

namespace zt {

namespace {
RopeOptions rope_options(const ModelConfig& m) {
    RopeOptions o;
    o.theta = m.rope_theta;
    o.llama3_scaling = m.rope_scaling == RopeScaling::kLlama3;
    o.llama3.factor = m.rope_factor;
    o.llama3.low_freq_factor = m.rope_low_freq_factor;
    o.llama3.high_freq_factor = m.rope_high_freq_factor;
    o.llama3.original_max_position_embeddings = m.rope_original_context;
    return o;
}
}  // namespace

void Gpt::llama_init(int max_batch) {
    const ModelConfig& cfg = m_cfg;
    auto off = [&](const char* suffix) { return m_layout.find(str("model.layers.0.", suffix)).offset; };
    if (cfg.n_layer > 0) {
        m_off = BlockOffsets{};
        m_off.ln1w = off("input_layernorm.weight");
        m_off.qkvw = off("self_attn.q_proj.weight");
        m_off.attprojw = off("self_attn.o_proj.weight");
        m_off.ln2w = off("post_attention_layernorm.weight");
        m_off.fcw = off("mlp.gate_proj.weight");
        m_off.fcprojw = off("mlp.down_proj.weight");
        // The packed products rely on k|v following q and up following gate with no gap.
        const size_t C = static_cast<size_t>(cfg.n_embd);
        ZT_REQUIRE(off("self_attn.v_proj.weight") + static_cast<size_t>(cfg.kv_heads() * cfg.head_size()) * C ==
                           m_off.qkvw + static_cast<size_t>(cfg.qkv_dim()) * C &&
                       off("mlp.up_proj.weight") == m_off.fcw + static_cast<size_t>(cfg.ffn_dim) * C,
                   "Llama layout: q|k|v and gate|up must be contiguous");
    }
    m_head_offset = cfg.tie_embeddings ? 0 : m_layout.find("lm_head.weight").offset;
    const size_t BT = static_cast<size_t>(max_batch) * static_cast<size_t>(cfg.seq_len);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t NH = static_cast<size_t>(cfg.n_head);
    const size_t T = static_cast<size_t>(cfg.seq_len);
    const size_t QKV = static_cast<size_t>(cfg.qkv_dim());
    const size_t F = static_cast<size_t>(cfg.ffn_dim);
    const size_t Vp = static_cast<size_t>(cfg.padded_vocab());
    const size_t hs = static_cast<size_t>(cfg.head_size());
    m_layers.resize(static_cast<size_t>(cfg.n_layer));
    for (size_t l = 0; l < m_layers.size(); ++l) {
        Layer& L = m_layers[l];
        if (m_recompute && l > 0) {
            L = m_layers[0];
            L.residual3 = take(BT * C);
            continue;
        }
        L.ln1 = take(BT * C);
        L.ln1_rstd = take(BT);
        L.qkv = take(BT * QKV);
        L.atty = take(BT * C);
        L.att = take(static_cast<size_t>(max_batch) * NH * T * T);
        L.residual2 = take(BT * C);
        L.ln2 = take(BT * C);
        L.ln2_rstd = take(BT);
        L.fch = take(BT * 2 * F);
        L.fch_gelu = take(BT * F);
        L.residual3 = take(BT * C);
    }
    m_encoded = take(BT * C);
    m_lnf = take(BT * C);
    m_lnf_rstd = take(BT);
    m_logits = take(BT * Vp);
    m_losses = take(BT);
    m_dresidual = take(BT * C);
    m_dln = take(BT * C);
    m_datty = take(BT * C);
    m_dqkv = take(BT * QKV);
    m_dfch = take(BT * 2 * F);
    m_dfch_gelu = take(BT * F);
    m_zero_wpe = take(T * C);  // alloc_floats zero-initializes; never written
    m_rope = take(T * hs);
    const std::vector<float> rope = rope_table(cfg.seq_len, cfg.head_size(), rope_options(cfg));
    m_backend.to_device(m_rope, rope.data(), rope.size() * sizeof(float));
    m_att_scratch = take(m_backend.attention_scratch_floats(max_batch, cfg.seq_len, cfg.n_head));
    m_tokens_be = static_cast<int32_t*>(m_backend.alloc_bytes(BT * sizeof(int32_t)));
    m_targets_be = static_cast<int32_t*>(m_backend.alloc_bytes(BT * sizeof(int32_t)));
    ZT_REQUIRE(static_cast<double>(m_activation_floats) ==
                   activation_floats(cfg, max_batch, m_recompute,
                                     m_backend.attention_scratch_floats(max_batch, cfg.seq_len, cfg.n_head)),
               "activation plan differs from the allocation: ", m_activation_floats, " floats allocated");
}

double Gpt::llama_activation_floats(const ModelConfig& cfg, int max_batch, bool recompute,
                                    size_t attention_scratch_floats) {
    const double BT = static_cast<double>(max_batch) * cfg.seq_len;
    const double C = cfg.n_embd;
    const double T = cfg.seq_len;
    const double QKV = cfg.qkv_dim();
    const double F = cfg.ffn_dim;
    // Per block: ln1, atty, residual2, ln2, residual3 (5 x BTC), qkv (QKV), gate|up (2F) and
    // the SwiGLU output (F), the attention probabilities (B NH T T), two RMSNorm rstd.
    const double block = BT * (5 * C + QKV + 3 * F) + static_cast<double>(max_batch) * cfg.n_head * T * T + 2 * BT;
    const double blocks = recompute ? block + (cfg.n_layer - 1) * BT * C : cfg.n_layer * block;
    // Whole model: encoded, lnf (2 x BTC), lnf rstd and losses (2 x BT), logits (BT Vp);
    // gradient scratch: dresidual, dln, datty (3 x BTC), dqkv (QKV), d gate|up (2F), d swiglu
    // (F); the zero position table (T C) and the rotary table (T hs).
    const double model = BT * C * 2 + 2 * BT + BT * cfg.padded_vocab() + BT * (3 * C + QKV + 3 * F) + T * C +
                         T * cfg.head_size();
    return blocks + model + static_cast<double>(attention_scratch_floats);
}

void Gpt::llama_layer_forward(int l, const float* w, const float* in, int B, int T) {
    const BlockOffsets& o = m_off;
    Layer& L = m_layers[static_cast<size_t>(l)];
    const int C = m_cfg.n_embd;
    const int NH = m_cfg.n_head;
    const int NKV = m_cfg.kv_heads();
    const int hs = m_cfg.head_size();
    const int F = m_cfg.ffn_dim;
    const int N = B * T;
    const float eps = static_cast<float>(m_cfg.norm_eps);
    Backend& be = *m_compute;
    be.rmsnorm_forward(L.ln1, L.ln1_rstd, in, w + o.ln1w, N, C, eps);
    be.matmul_forward(L.qkv, L.ln1, w + o.qkvw, nullptr, N, C, m_cfg.qkv_dim());
    // Rotated in place: attention and its backward only need the rotated q and k.
    be.rope_forward(L.qkv, L.qkv, m_rope, B, T, NH, NKV, hs);
    be.gqa_attention_forward(L.atty, L.att, L.qkv, B, T, NH, NKV, hs);
    be.matmul_residual_forward(L.residual2, L.atty, w + o.attprojw, nullptr, in, N, C, C);
    be.rmsnorm_forward(L.ln2, L.ln2_rstd, L.residual2, w + o.ln2w, N, C, eps);
    be.matmul_forward(L.fch, L.ln2, w + o.fcw, nullptr, N, C, 2 * F);
    be.swiglu_forward(L.fch_gelu, L.fch, N, F);
    be.matmul_residual_forward(L.residual3, L.fch_gelu, w + o.fcprojw, nullptr, L.residual2, N, F, C);
}

void Gpt::llama_layer_backward(int l, const float* w, float* dw, bool zero_dw, const float* in, float* dres, int B,
                               int T) {
    const BlockOffsets& o = m_off;
    Layer& L = m_layers[static_cast<size_t>(l)];
    const int C = m_cfg.n_embd;
    const int NH = m_cfg.n_head;
    const int NKV = m_cfg.kv_heads();
    const int hs = m_cfg.head_size();
    const int F = m_cfg.ffn_dim;
    const int QKV = m_cfg.qkv_dim();
    const int N = B * T;
    const size_t n = static_cast<size_t>(N);
    const size_t Cs = static_cast<size_t>(C);
    const size_t Fs = static_cast<size_t>(F);
    Backend& be = *m_compute;
    // dres holds d loss / d block output; each branch's RMSNorm backward adds into it, so it
    // becomes d/d residual2 and then d/d block input (as in the GPT-2 block).
    be.zero(m_dfch_gelu, n * Fs);
    zero_grad_if(zero_dw, dw + o.fcprojw, Cs * Fs);
    be.matmul_backward(m_dfch_gelu, dw + o.fcprojw, nullptr, dres, L.fch_gelu, w + o.fcprojw, N, F, C);
    be.zero(m_dfch, n * 2 * Fs);
    be.swiglu_backward(m_dfch, L.fch, m_dfch_gelu, N, F);
    be.zero(m_dln, n * Cs);
    zero_grad_if(zero_dw, dw + o.fcw, 2 * Fs * Cs);
    be.matmul_backward(m_dln, dw + o.fcw, nullptr, m_dfch, L.ln2, w + o.fcw, N, C, 2 * F);
    zero_grad_if(zero_dw, dw + o.ln2w, Cs);
    be.rmsnorm_backward(dres, dw + o.ln2w, m_dln, L.residual2, w + o.ln2w, L.ln2_rstd, N, C);

    be.zero(m_datty, n * Cs);
    zero_grad_if(zero_dw, dw + o.attprojw, Cs * Cs);
    be.matmul_backward(m_datty, dw + o.attprojw, nullptr, dres, L.atty, w + o.attprojw, N, C, C);
    be.zero(m_dqkv, n * static_cast<size_t>(QKV));
    be.gqa_attention_backward(m_dqkv, m_att_scratch, m_datty, L.qkv, L.att, B, T, NH, NKV, hs);
    // The gradient w.r.t. the unrotated q|k|v, in place.
    be.rope_backward(m_dqkv, m_dqkv, m_rope, B, T, NH, NKV, hs);
    be.zero(m_dln, n * Cs);
    zero_grad_if(zero_dw, dw + o.qkvw, static_cast<size_t>(QKV) * Cs);
    be.matmul_backward(m_dln, dw + o.qkvw, nullptr, m_dqkv, L.ln1, w + o.qkvw, N, C, QKV);
    zero_grad_if(zero_dw, dw + o.ln1w, Cs);
    be.rmsnorm_backward(dres, dw + o.ln1w, m_dln, in, w + o.ln1w, L.ln1_rstd, N, C);
}

}  // namespace zt
