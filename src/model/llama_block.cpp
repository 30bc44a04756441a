// The Llama family (Hugging Face LlamaForCausalLM): its manifest, its block
// (LlamaDecoderLayer) forward and backward op by op, no learned positions (RoPE rotates q
// and k in each block) and the final RMSNorm.
//   x2 = x + o_proj(attn(rope(qkv_proj(rmsnorm1(x)))))
//   y  = x2 + down_proj(silu(gate_proj(h)) * up_proj(h)),  h = rmsnorm2(x2)
// with grouped-query attention (NKV key/value heads) and no biases. Qwen's options
// (qwen_family.cpp): q|k|v biases (model.qkv_bias), an RMSNorm over each head's q and k
// between the product and rope (model.qk_norm), a head size of its own (model.head_dim).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/rope.hpp"
#include "ztrain/core/error.hpp"
#include "model_family.hpp"

namespace zt {

namespace {

/// Hugging Face LlamaForCausalLM's tensors under its own names, so an importer or exporter
/// maps them one to one. q|k|v and gate|up are packed (add_packed) so each block runs one
/// product for the three projections and one for the two: rows [0, NH hs) of the packed
/// matrix are q_proj, then NKV hs rows of k_proj, then v_proj; gate_proj's F rows, then
/// up_proj's. An untied lm_head sits in unit 0 next to the embedding, so the unit protocol
/// (and the memory plan's "unit 0 is held from the LM head through backward") is GPT-2's.
/// Init as HF's _init_weights: normal(0, 0.02) for every matrix, RMSNorm weights 1.
/// Under tensor parallelism q, k, v (by head), gate and up (by hidden unit), the embedding
/// and the LM head (by vocabulary row) are cut by rows, o_proj and down_proj by columns, the
/// norms whole; each rank's q|k|v and gate|up slices stay packed. With fewer KV heads than
/// ranks, k and v are cut by KV head and each is held by the T / n_kv_head ranks whose query
/// heads read it (Megatron's replicated KV heads).
ModelLayout llama_layout(const ModelConfig& cfg, TensorSplit split) {
    ModelLayout layout;
    layout.model = cfg;
    layout.split = split;
    LayoutBuilder b(layout);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t Vp = static_cast<size_t>(cfg.padded_vocab());
    const size_t hs = static_cast<size_t>(cfg.head_size());
    const size_t q = static_cast<size_t>(cfg.n_head) * hs;
    const size_t kv = static_cast<size_t>(cfg.kv_heads()) * hs;
    const size_t F = static_cast<size_t>(cfg.ffn_dim);
    const float std_base = 0.02f;
    const size_t live_vocab = static_cast<size_t>(cfg.vocab_size) * C;
    const SplitAlong kv_rows{0, 1, cfg.kv_heads()};

    b.begin_unit();
    b.add("model.embed_tokens.weight", {Vp, C}, true, std_base, 0.f, live_vocab, kRows);
    if (!cfg.tie_embeddings) {
        b.add("lm_head.weight", {Vp, C}, true, std_base, 0.f, live_vocab, kRows);
        layout.head_offset = layout.params.back().offset;
    }
    for (int l = 0; l < cfg.n_layer; ++l) {
        const std::string h = str("model.layers.", l, ".");
        b.begin_unit();
        b.add(h + "input_layernorm.weight", {C}, false, 0.f, 1.f);
        b.add(h + "self_attn.q_proj.weight", {q, C}, true, std_base, kRows);
        b.add_packed(h + "self_attn.k_proj.weight", {kv, C}, true, std_base, kv_rows);
        b.add_packed(h + "self_attn.v_proj.weight", {kv, C}, true, std_base, kv_rows);
        if (cfg.qkv_bias) {  // Qwen2: packed as the weights, one bias for the q|k|v product
            b.add(h + "self_attn.q_proj.bias", {q}, false, 0.f, kRows);
            b.add_packed(h + "self_attn.k_proj.bias", {kv}, false, 0.f, kv_rows);
            b.add_packed(h + "self_attn.v_proj.bias", {kv}, false, 0.f, kv_rows);
        }
        if (cfg.qk_norm) {  // Qwen3: one RMSNorm weight for every q head, one for every k head
            b.add(h + "self_attn.q_norm.weight", {hs}, false, 0.f, 1.f);
            b.add(h + "self_attn.k_norm.weight", {hs}, false, 0.f, 1.f);
        }
        b.add(h + "self_attn.o_proj.weight", {C, q}, true, std_base, kColumns);
        b.add(h + "post_attention_layernorm.weight", {C}, false, 0.f, 1.f);
        b.add(h + "mlp.gate_proj.weight", {F, C}, true, std_base, kRows);
        b.add_packed(h + "mlp.up_proj.weight", {F, C}, true, std_base, kRows);
        b.add(h + "mlp.down_proj.weight", {C, F}, true, std_base, kColumns);
    }
    b.begin_unit();
    b.add("model.norm.weight", {C}, false, 0.f, 1.f);
    b.finish();
    return layout;
}

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

/// This rank's key/value heads under a tensor group of `tensor` ranks: its share, or the one
/// head its query heads read when there are fewer heads than ranks.
int local_kv_heads(const ModelConfig& cfg, int tensor) {
    return cfg.kv_heads() >= tensor ? cfg.kv_heads() / tensor : 1;
}

ActivationCount llama_activations(const ModelConfig& cfg, int max_batch, ActivationRecompute recompute, int tensor,
                                  bool sequence) {
    const double BT = static_cast<double>(max_batch) * cfg.seq_len;
    // The rows of the residual stream and the norms: under sequence parallelism 1/t of them.
    const double BTl = TensorParallel::local_rows(BT, tensor, sequence);
    const double C = cfg.n_embd;
    const double T = cfg.seq_len;
    const double hs = cfg.head_size();
    // This rank's slices under tensor parallelism: its heads' width, q|k|v and MLP width.
    const double Cq = cfg.n_head / tensor * hs;
    const double QKV = (cfg.n_head / tensor + 2 * local_kv_heads(cfg, tensor)) * hs;
    const double F = cfg.ffn_dim / tensor;
    // Per block (Slots): norm1, residual2, norm2, output (4 x BTl C), atty (BT Cq), qkv
    // (QKV), gate|up (2F) and the SwiGLU output (F), the attention probabilities (B NH T T);
    // two RMSNorm rstd (fp32, BTl).
    // Qwen3's head norms: the q|k|v product's output before them (QKV) and an rstd per q
    // and k head (fp32).
    const double head_norm = cfg.qk_norm ? BT * QKV : 0;
    const double head_rstd = cfg.qk_norm ? BT * (cfg.n_head / tensor + local_kv_heads(cfg, tensor)) : 0;
    const double block = BTl * 4 * C + BT * (Cq + QKV + 3 * F) + head_norm;
    const double probs = attention_probs_elements(cfg, max_batch, tensor);
    const bool blocks_once = recompute == ActivationRecompute::kBlocks;
    const double blocks = blocks_once ? block + (cfg.n_layer - 1) * BTl * C : cfg.n_layer * block;
    const double stats = (blocks_once ? 1 : cfg.n_layer) * (2 * BTl + head_rstd);
    // Gradient scratch: datty (BT Cq), dqkv (QKV), d gate|up (2F), d swiglu (F); the final
    // RMSNorm's rstd (BTl) and the rotary table (T hs), fp32.
    // Shared KV heads: q|k|v's weight gradient and the k, v gradients' exchange (fp32).
    const double shared_kv = cfg.kv_heads() < tensor ? QKV * C + cfg.kv_heads() * 2 * hs * C : 0;
    // Head norms under a group: their weights' partial gradients before the sum (2 hs).
    const double head_norm_grads = cfg.qk_norm && tensor > 1 ? 2 * hs : 0;
    return {blocks + BT * (Cq + QKV + 3 * F), stats + BTl + T * cfg.head_size() + shared_kv + head_norm_grads,
            (recompute == ActivationRecompute::kNone ? cfg.n_layer : 1) * probs};
}

/// Offsets of one block's tensors inside its unit (identical for every block); q|k|v and
/// gate|up are packed, so qkv and gate_up address one matrix each.
struct LlamaOffsets {
    size_t norm1, qkv, o_proj, norm2, gate_up, down_proj;
    /// Qwen's options: the packed q|k|v bias, the q and k head norms (kNoBias: none).
    size_t qkv_bias = ParallelLinear::kNoBias, q_norm = ParallelLinear::kNoBias, k_norm = ParallelLinear::kNoBias;
};

LlamaOffsets llama_offsets(const ModelConfig& cfg, const ModelLayout& layout) {
    auto off = [&](const char* suffix) { return layout.find(str("model.layers.0.", suffix)).offset; };
    LlamaOffsets o{off("input_layernorm.weight"),  off("self_attn.q_proj.weight"),
                         off("self_attn.o_proj.weight"), off("post_attention_layernorm.weight"),
                         off("mlp.gate_proj.weight"),    off("mlp.down_proj.weight")};
    if (cfg.qkv_bias) o.qkv_bias = off("self_attn.q_proj.bias");
    if (cfg.qk_norm) {
        o.q_norm = off("self_attn.q_norm.weight");
        o.k_norm = off("self_attn.k_norm.weight");
    }
    // The packed products rely on k|v following q and up following gate with no gap (in
    // this rank's slices under tensor parallelism).
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const int t = layout.split.size;
    const size_t kv = static_cast<size_t>(local_kv_heads(cfg, t) * cfg.head_size());
    const size_t qkv = static_cast<size_t>(cfg.n_head / t * cfg.head_size()) + 2 * kv;
    ZT_REQUIRE(off("self_attn.v_proj.weight") + kv * C == o.qkv + qkv * C &&
                   off("mlp.up_proj.weight") == o.gate_up + static_cast<size_t>(cfg.ffn_dim / t) * C,
               "Llama layout: q|k|v and gate|up must be contiguous");
    ZT_REQUIRE(!cfg.qkv_bias || off("self_attn.v_proj.bias") + kv == o.qkv_bias + qkv,
               "Llama layout: the q|k|v biases must be contiguous");
    return o;
}

class LlamaBlocks final : public ModelFamily {
  public:
    LlamaBlocks(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend, ActivationArena& arena,
                const DriverScratch& scratch, int max_batch, ActivationRecompute recompute);

    void embed_forward(Backend& be, ActPtr out, const int32_t* tokens, const float* unit0, int B,
                       int T) override {
        be.encoder_forward(out, tokens, unit0, nullptr, B, T, m_cfg.n_embd);
    }
    void embed_backward(Backend& be, float* dunit0, bool /*zero*/, ConstActPtr dout, const int32_t* tokens, int B,
                        int T) override {
        be.encoder_backward(dunit0, nullptr, dout, tokens, B, T, m_cfg.n_embd);
    }
    void block_forward(Backend& be, int l, const UnitWeights& uw, ConstActPtr in, int B, int T) override;
    void block_backward(Backend& be, int l, const UnitWeights& uw, UnitGrads dw, ConstActPtr in, ActPtr dres, int B,
                        int T) override;
    ConstActPtr block_output(int l) const override { return m_slots[static_cast<size_t>(l)].output; }
    /// RoPE on q and k of qkv in place (inverse: the gradient's R^T), at each token's position.
    void rotate(Backend& be, ActPtr qkv, int B, int T, bool inverse) const;
    void final_norm_forward(Backend& be, ActPtr out, ConstActPtr in, const float* w, int N) override {
        be.rmsnorm_forward(out, m_norm_rstd, in, w, N, m_cfg.n_embd, static_cast<float>(m_cfg.norm_eps));
    }
    void final_norm_backward(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr in, const float* w,
                             int N) override {
        be.rmsnorm_backward(dinp, norm_grad(be, dw, 0, static_cast<size_t>(m_cfg.n_embd)), dout, in, w, m_norm_rstd,
                            N, m_cfg.n_embd);
        add_norm_grads(be);
    }

  private:
    /// A block's sizes for B sequences of T tokens: width, this rank's query and key/value
    /// heads (all of them without tensor parallelism), head size, MLP width, packed q|k|v
    /// width, the heads' width (o_proj's input), rows, this rank's rows of the residual
    /// stream (N but under sequence parallelism).
    struct Sizes {
        int C, NH, NKV, hs, F, QKV, Cq, N, Nl;
    };
    Sizes sizes(int B, int T) const {
        const int t = m_parallel.parts();
        const int hs = m_cfg.head_size();
        const int kv = local_kv_heads(m_cfg, t);
        return {m_cfg.n_embd,          m_cfg.n_head / t, kv,    hs, m_cfg.ffn_dim / t, (m_cfg.n_head / t + 2 * kv) * hs,
                m_cfg.n_head / t * hs, B * T,            m_parallel.local_rows(B * T)};
    }
    /// What one block keeps for its backward. Shapes (B, T, ...) at allocation size.
    struct Slots {
        ActPtr norm1;                 // (B, T, C) input RMSNorm output
        float* norm1_rstd = nullptr;  // (B, T)
        ActPtr qkv;                   // (B, T, (NH + 2 NKV) hs), q and k rotated
        ActPtr qkv_proj;              // (B, T, (NH + 2 NKV) hs) before the head norms (qk_norm)
        float* qk_rstd = nullptr;     // (B, T, NH + NKV) the head norms' (qk_norm)
        ActPtr atty;                  // (B, T, C)
        ActPtr att;                   // (B, NH, T, T)
        ActPtr residual2;             // (B, T, C)
        ActPtr norm2;                 // (B, T, C) post-attention RMSNorm output
        float* norm2_rstd = nullptr;  // (B, T)
        ActPtr gate_up;               // (B, T, 2F)
        ActPtr swiglu;                // (B, T, F)
        ActPtr output;                // (B, T, C)
    };
    ModelConfig m_cfg;
    LlamaOffsets m_off{};
    std::vector<Slots> m_slots;
    // The products: q|k|v and gate|up column-parallel, o_proj and down_proj row-parallel.
    /// Makes them (and takes the shared KV heads' buffers from the arena).
    void make_products(ActivationArena& arena);
    ColumnParallelLinear m_qkv;
    RowParallelLinear m_o_proj;
    ColumnParallelLinear m_gate_up;
    RowParallelLinear m_down_proj;
    float* m_norm_rstd = nullptr;       // (B, T) the final RMSNorm's
    float* m_rope = nullptr;            // rope_table (T, hs) in backend memory
    // Gradient scratch reused by every block (backward accumulates, so each is zeroed first).
    ActPtr m_datty;     // (B, T, C)
    ActPtr m_dqkv;      // (B, T, QKV)
    ActPtr m_dgate_up;  // (B, T, 2F)
    ActPtr m_dswiglu;   // (B, T, F)
};

LlamaBlocks::LlamaBlocks(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend, ActivationArena& arena,
                         const DriverScratch& scratch, int max_batch, ActivationRecompute recompute)
    : ModelFamily(scratch), m_cfg(cfg) {
    set_sliding_window(cfg.sliding_window);
    if (cfg.n_layer > 0) m_off = llama_offsets(cfg, layout);
    const Sizes z = sizes(1, 1);
    const size_t BT = static_cast<size_t>(max_batch) * static_cast<size_t>(cfg.seq_len);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t T = static_cast<size_t>(cfg.seq_len);
    const size_t QKV = static_cast<size_t>(z.QKV);
    const size_t F = static_cast<size_t>(z.F);
    const size_t Cq = static_cast<size_t>(z.Cq);
    const size_t hs = static_cast<size_t>(cfg.head_size());
    const size_t BTl = static_cast<size_t>(m_parallel.local_rows(static_cast<int>(BT)));
    const size_t probs = static_cast<size_t>(attention_probs_elements(cfg, max_batch, m_parallel.parts()));
    m_slots = allocate_block_slots<Slots>(cfg.n_layer, recompute, arena, BTl * C, [&](Slots& L) {
        L.norm1 = arena.take_act(BTl * C);
        L.norm1_rstd = arena.take(BTl);
        L.qkv = arena.take_act(BT * QKV);
        if (cfg.qk_norm) {
            L.qkv_proj = arena.take_act(BT * QKV);
            L.qk_rstd = arena.take(BT * static_cast<size_t>(z.NH + z.NKV));
        }
        L.atty = arena.take_act(BT * Cq);
        // kAttention: every block's probabilities go in the driver's one buffer.
        L.att = scratch.probs.data != nullptr ? scratch.probs : arena.take_act(probs);
        L.residual2 = arena.take_act(BTl * C);
        L.norm2 = arena.take_act(BTl * C);
        L.norm2_rstd = arena.take(BTl);
        L.gate_up = arena.take_act(BT * 2 * F);
        L.swiglu = arena.take_act(BT * F);
        L.output = arena.take_act(BTl * C);
    });
    m_norm_rstd = arena.take(BTl);
    m_datty = arena.take_act(BT * Cq);
    m_dqkv = arena.take_act(BT * QKV);
    m_dgate_up = arena.take_act(BT * 2 * F);
    m_dswiglu = arena.take_act(BT * F);
    m_rope = arena.take(T * hs);
    if (cfg.qk_norm && m_parallel.parts() > 1) set_head_norm_scratch(arena.take(2 * hs), 2 * hs);
    make_products(arena);
    const std::vector<float> rope = rope_table(cfg.seq_len, cfg.head_size(), rope_options(cfg));
    backend.to_device(m_rope, rope.data(), rope.size() * sizeof(float));
}

void LlamaBlocks::make_products(ActivationArena& arena) {
    const Sizes z = sizes(1, 1);
    const LlamaOffsets& o = m_off;
    const ParallelLinear::Shape qkv{o.qkv, o.qkv_bias, z.C, z.QKV};
    if (m_cfg.kv_heads() < m_parallel.parts()) {
        // KV heads shared by several ranks: q|k|v's weight gradient (QKV, C) and the k, v
        // gradients of every head (n_kv_head, 2 hs, C), summed over the group.
        SharedWeightRows kv{z.NH * z.hs, 2 * z.hs, m_cfg.kv_heads(), nullptr, nullptr};
        const size_t C = static_cast<size_t>(z.C);
        kv.weight_grad = arena.take(static_cast<size_t>(z.QKV) * C);
        kv.exchange = arena.take(static_cast<size_t>(m_cfg.kv_heads() * 2 * z.hs) * C);
        m_qkv = ColumnParallelLinear(products(), qkv, kv);
    } else {
        m_qkv = ColumnParallelLinear(products(), qkv);
    }
    m_o_proj = RowParallelLinear(products(), {o.o_proj, kNoBias, z.Cq, z.C});
    m_gate_up = ColumnParallelLinear(products(), {o.gate_up, kNoBias, z.C, 2 * z.F});
    m_down_proj = RowParallelLinear(products(), {o.down_proj, kNoBias, z.F, z.C});
}

void LlamaBlocks::rotate(Backend& be, ActPtr qkv, int B, int T, bool inverse) const {
    const Sizes z = sizes(B, T);
    const int NH = z.NH;
    const int NKV = z.NKV;
    const int hs = z.hs;
    auto op = [&](ActPtr x, const float* table, int b, int t) {
        if (inverse) {
            be.rope_backward(x, x, table, b, t, NH, NKV, hs);
        } else {
            be.rope_forward(x, x, table, b, t, NH, NKV, hs);
        }
    };
    if (m_rows.runs == nullptr) {
        op(qkv, m_rope, B, T);
        return;
    }
    // Packed examples: each run rotates by the table rows of its own positions.
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * static_cast<size_t>(hs);
    for (const PositionRun& r : *m_rows.runs) {
        op(qkv.offset(static_cast<size_t>(r.offset) * row),
           m_rope + static_cast<size_t>(r.position) * static_cast<size_t>(hs),
           1, r.length);
    }
}

void LlamaBlocks::block_forward(Backend& be, int l, const UnitWeights& uw, ConstActPtr in, int B, int T) {
    const float* w = uw.f32;
    const LlamaOffsets& o = m_off;
    Slots& L = m_slots[static_cast<size_t>(l)];
    const auto [C, NH, NKV, hs, F, QKV, Cq, N, Nl] = sizes(B, T);
    const float eps = static_cast<float>(m_cfg.norm_eps);
    // Tensor and sequence parallelism as in GPT-2's block: the products know what the group
    // does; under sequence parallelism the norms run on this rank's Nl rows.
    be.rmsnorm_forward(L.norm1, L.norm1_rstd, in, w + o.norm1, Nl, C, eps);
    if (m_cfg.qk_norm) {
        m_qkv.forward(be, L.qkv_proj, L.norm1, uw, N);
        be.qk_norm_forward(L.qkv, L.qk_rstd, L.qkv_proj, w + o.q_norm, w + o.k_norm, N, NH, NKV, hs, eps);
    } else {
        m_qkv.forward(be, L.qkv, L.norm1, uw, N);
    }
    // Rotated in place: attention and its backward only need the rotated q and k.
    rotate(be, L.qkv, B, T, /*inverse=*/false);
    attention_forward(be, L.atty, L.att, L.qkv, B, T, NH, NKV, hs);
    m_o_proj.forward_residual(be, L.residual2, L.atty, uw, in, N);
    be.rmsnorm_forward(L.norm2, L.norm2_rstd, L.residual2, w + o.norm2, Nl, C, eps);
    m_gate_up.forward(be, L.gate_up, L.norm2, uw, N);
    be.swiglu_forward(L.swiglu, L.gate_up, N, F);
    m_down_proj.forward_residual(be, L.output, L.swiglu, uw, L.residual2, N);
}

void LlamaBlocks::block_backward(Backend& be, int l, const UnitWeights& uw, UnitGrads dw, ConstActPtr in, ActPtr dres,
                                 int B, int T) {
    const float* w = uw.f32;
    const LlamaOffsets& o = m_off;
    Slots& L = m_slots[static_cast<size_t>(l)];
    const auto [C, NH, NKV, hs, F, QKV, Cq, N, Nl] = sizes(B, T);
    const size_t n = static_cast<size_t>(N);
    const size_t Cs = static_cast<size_t>(C);
    const size_t Fs = static_cast<size_t>(F);
    // dres holds d loss / d block output; each branch's RMSNorm backward adds into it, so it
    // becomes d/d residual2 and then d/d block input (as in the GPT-2 block).
    // Deferred weight gradients keep each product's output gradient in an activation this
    // backward has read for the last time (as in the GPT-2 block).
    m_down_proj.backward(be, m_dswiglu, dw, dres, L.swiglu, uw, L.output, N);
    zero_act(be, m_dgate_up, n * 2 * Fs);
    be.swiglu_backward(m_dgate_up, L.gate_up, m_dswiglu, N, F);
    ActPtr dnorm = m_gate_up.backward(be, dw, m_dgate_up, L.norm2, uw, L.gate_up, N);
    be.rmsnorm_backward(dres, norm_grad(be, dw, o.norm2, Cs), dnorm, L.residual2, w + o.norm2, L.norm2_rstd, Nl,
                        C);

    m_o_proj.backward(be, m_datty, dw, dres, L.atty, uw, L.residual2, N);
    zero_act(be, m_dqkv, n * static_cast<size_t>(QKV));
    attention_backward(be, m_dqkv, m_datty, L.qkv, L.atty, L.att, B, T, NH, NKV, hs);
    // The gradient w.r.t. the unrotated q|k|v, in place.
    rotate(be, m_dqkv, B, T, /*inverse=*/true);
    ActPtr dproj = m_dqkv;
    ActPtr keep = L.qkv;
    if (m_cfg.qk_norm) {
        // Through the head norms into L.qkv, read for the last time by attention's backward;
        // the product keeps its output gradient in qkv_proj, read for the last time here.
        const size_t h = static_cast<size_t>(hs);
        zero_act(be, L.qkv, n * static_cast<size_t>(QKV));
        be.qk_norm_backward(L.qkv, head_norm_grad(be, dw, o.q_norm, h), head_norm_grad(be, dw, o.k_norm, h), m_dqkv,
                            L.qkv_proj, w + o.q_norm, w + o.k_norm, L.qk_rstd, N, NH, NKV, hs);
        dproj = L.qkv;
        keep = L.qkv_proj;
    }
    dnorm = m_qkv.backward(be, dw, dproj, L.norm1, uw, keep, N);
    be.rmsnorm_backward(dres, norm_grad(be, dw, o.norm1, Cs), dnorm, in, w + o.norm1, L.norm1_rstd, Nl, C);
    add_norm_grads(be);
}

std::unique_ptr<ModelFamily> make_llama_blocks(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend,
                                               ActivationArena& arena, const DriverScratch& scratch, int max_batch,
                                               ActivationRecompute recompute) {
    return std::make_unique<LlamaBlocks>(cfg, layout, backend, arena, scratch, max_batch, recompute);
}

/// Llama's block for new rows only, over a key/value cache: the same ops as block_forward,
/// q and k rotated at their own positions (rows pos.. of the rotary table), so the cache
/// holds rotated keys.
class LlamaDecoder final : public FamilyDecoder {
  public:
    LlamaDecoder(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend, int max_rows)
        : m_cfg(cfg), m_arena(backend) {
        if (cfg.n_layer > 0) m_off = llama_offsets(cfg, layout);
        const size_t rows = static_cast<size_t>(max_rows);
        const size_t C = static_cast<size_t>(cfg.n_embd);
        const size_t F = static_cast<size_t>(cfg.ffn_dim);
        for (float** p : {&m_norm, &m_residual2}) *p = take(rows * C);
        m_atty = take(rows * static_cast<size_t>(cfg.n_head * cfg.head_size()));
        m_rstd = take(rows);
        m_qkv = take(rows * static_cast<size_t>(cfg.qkv_dim()));
        if (cfg.qk_norm) {
            m_qkv_proj = take(rows * static_cast<size_t>(cfg.qkv_dim()));
            m_qk_rstd = take(rows * static_cast<size_t>(cfg.n_head + cfg.kv_heads()));
        }
        m_gate_up = take(rows * 2 * F);
        m_swiglu = take(rows * F);
        const std::vector<float> rope = rope_table(cfg.seq_len, cfg.head_size(), rope_options(cfg));
        m_rope = take(rope.size());
        backend.to_device(m_rope, rope.data(), rope.size() * sizeof(float));
    }

    void embed(Backend& be, float* out, const int32_t* tokens, const float* unit0, const DecodeRows& rows) override {
        be.encoder_forward(out, tokens, unit0, nullptr, 1, rows.total(), m_cfg.n_embd);
    }
    void block(Backend& be, const float* w, float* x, KvLayer kv, const DecodeRows& rows) override {
        const LlamaOffsets& o = m_off;
        const int C = m_cfg.n_embd;
        const int NH = m_cfg.n_head;
        const int NKV = m_cfg.kv_heads();
        const int hs = m_cfg.head_size();
        const int F = m_cfg.ffn_dim;
        const int n = rows.total();
        const float eps = static_cast<float>(m_cfg.norm_eps);
        be.rmsnorm_forward(m_norm, m_rstd, x, w + o.norm1, n, C, eps);
        const float* qkv_bias = o.qkv_bias == ParallelLinear::kNoBias ? nullptr : w + o.qkv_bias;
        if (m_cfg.qk_norm) {
            be.matmul_forward(m_qkv_proj, m_norm, w + o.qkv, qkv_bias, n, C, m_cfg.qkv_dim());
            be.qk_norm_forward(m_qkv, m_qk_rstd, m_qkv_proj, w + o.q_norm, w + o.k_norm, n, NH, NKV, hs, eps);
        } else {
            be.matmul_forward(m_qkv, m_norm, w + o.qkv, qkv_bias, n, C, m_cfg.qkv_dim());
        }
        // Row t of the table is position t: each span's rows rotate positions pos.. .
        const size_t qkv_row = static_cast<size_t>(m_cfg.qkv_dim());
        size_t first = 0;
        for (const DecodeSpan& s : rows.spans) {
            float* qkv = m_qkv + first * qkv_row;
            const float* rope_at_pos = m_rope + static_cast<size_t>(s.pos) * static_cast<size_t>(hs);
            be.rope_forward(qkv, qkv, rope_at_pos, 1, s.length, NH, NKV, hs);
            const KvLayer seq = kv.from_row(s.cache, static_cast<size_t>(NKV) * static_cast<size_t>(hs));
            be.gqa_attention_cached(m_atty + first * static_cast<size_t>(NH * hs), qkv, seq.k, seq.v, s.pos, s.length,
                                    NH, NKV, hs, m_cfg.sliding_window);
            first += static_cast<size_t>(s.length);
        }
        be.matmul_residual_forward(m_residual2, m_atty, w + o.o_proj, nullptr, x, n, NH * hs, C);
        be.rmsnorm_forward(m_norm, m_rstd, m_residual2, w + o.norm2, n, C, eps);
        be.matmul_forward(m_gate_up, m_norm, w + o.gate_up, nullptr, n, C, 2 * F);
        be.swiglu_forward(m_swiglu, m_gate_up, n, F);
        // x is free once residual2 holds it: the block's output goes back into it.
        be.matmul_residual_forward(x, m_swiglu, w + o.down_proj, nullptr, m_residual2, n, F, C);
    }
    void final_norm(Backend& be, float* out, const float* in, const float* w, int n) override {
        be.rmsnorm_forward(out, m_rstd, in, w, n, m_cfg.n_embd, static_cast<float>(m_cfg.norm_eps));
    }

  private:
    float* take(size_t n) { return m_arena.take(n); }

    ModelConfig m_cfg;
    ActivationArena m_arena;  // every buffer below, freed with the decoder
    LlamaOffsets m_off{};
    // (rows, ...) buffers of one block, reused by every block; the rotary table (seq_len, hs).
    float* m_norm = nullptr;
    float* m_rstd = nullptr;
    float* m_qkv = nullptr;
    float* m_qkv_proj = nullptr;  // before the head norms (qk_norm)
    float* m_qk_rstd = nullptr;
    float* m_atty = nullptr;
    float* m_residual2 = nullptr;
    float* m_gate_up = nullptr;
    float* m_swiglu = nullptr;
    float* m_rope = nullptr;
};

std::unique_ptr<FamilyDecoder> make_llama_decoder(const ModelConfig& cfg, const ModelLayout& layout,
                                                  Backend& backend, int max_rows) {
    return std::make_unique<LlamaDecoder>(cfg, layout, backend, max_rows);
}

}  // namespace

const FamilyTraits& llama_traits() {
    static const FamilyTraits traits{llama_layout, llama_activations, make_llama_blocks, make_llama_decoder};
    return traits;
}

}  // namespace zt
