// The GPT-2 family: its manifest (Hugging Face GPT-2 names), its block written out op by op
// (no autograd), learned position embeddings and the final LayerNorm.
//   x2 = x + c_proj(attn(c_attn(ln_1(x))))
//   y  = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/core/error.hpp"
#include "model_family.hpp"

namespace zt {

namespace {

/// c_attn's rows: q, k and v, each cut by head.
constexpr SplitAlong kQkvRows{0, 3};

/// Under tensor parallelism (Megatron's split): c_attn (q|k|v, three blocks of rows) and
/// c_fc are column-parallel, their outputs' rows cut by head and by hidden unit; both
/// c_proj are row-parallel, cut by input columns, their biases whole (added once); wte is
/// cut by vocabulary rows; wpe and the LayerNorms are whole.
ModelLayout gpt2_layout(const ModelConfig& cfg, TensorSplit split) {
    ModelLayout layout;
    layout.model = cfg;
    layout.split = split;
    LayoutBuilder b(layout);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t Vp = static_cast<size_t>(cfg.padded_vocab());
    const size_t T = static_cast<size_t>(cfg.seq_len);
    const float std_base = 0.02f;
    // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer): each block adds two.
    const float std_resid = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));

    b.begin_unit();
    b.add("wte.weight", {Vp, C}, true, std_base, 0.f, static_cast<size_t>(cfg.vocab_size) * C, kRows);
    b.add("wpe.weight", {T, C}, true, std_base);
    for (int l = 0; l < cfg.n_layer; ++l) {
        const std::string h = str("h.", l, ".");
        b.begin_unit();
        b.add(h + "ln_1.weight", {C}, false, 0.f, 1.f);
        b.add(h + "ln_1.bias", {C}, false, 0.f);
        b.add(h + "attn.c_attn.weight", {3 * C, C}, true, std_base, kQkvRows);
        b.add(h + "attn.c_attn.bias", {3 * C}, false, 0.f, kQkvRows);
        b.add(h + "attn.c_proj.weight", {C, C}, true, std_resid, kColumns);
        b.add(h + "attn.c_proj.bias", {C}, false, 0.f);
        b.add(h + "ln_2.weight", {C}, false, 0.f, 1.f);
        b.add(h + "ln_2.bias", {C}, false, 0.f);
        b.add(h + "mlp.c_fc.weight", {4 * C, C}, true, std_base, kRows);
        b.add(h + "mlp.c_fc.bias", {4 * C}, false, 0.f, kRows);
        b.add(h + "mlp.c_proj.weight", {C, 4 * C}, true, std_resid, kColumns);
        b.add(h + "mlp.c_proj.bias", {C}, false, 0.f);
    }
    b.begin_unit();
    b.add("ln_f.weight", {C}, false, 0.f, 1.f);
    b.add("ln_f.bias", {C}, false, 0.f);
    b.finish();
    return layout;
}

ActivationCount gpt2_activations(const ModelConfig& cfg, int max_batch, ActivationRecompute recompute, int tensor,
                                 bool sequence) {
    const double BT = static_cast<double>(max_batch) * cfg.seq_len;
    // The rows of the residual stream and the norms: under sequence parallelism 1/t of them.
    const double BTl = TensorParallel::local_rows(BT, tensor, sequence);
    const double C = cfg.n_embd;
    const double Cs = C / tensor;  // this rank's attention width (its heads)
    // Per block (Slots): ln1, residual2, ln2, output (4 x BTl C), the rank's atty (BT C/t),
    // qkv (3), fc and fc_gelu (4 each), its heads' attention probabilities (B NH/t T T); four
    // LayerNorm statistics (fp32, BTl).
    const double block = BTl * 4 * C + BT * Cs * (1 + 3 + 8);
    const double probs = attention_probs_elements(cfg, max_batch, tensor);
    const bool blocks_once = recompute == ActivationRecompute::kBlocks;
    const double blocks = blocks_once ? block + (cfg.n_layer - 1) * BTl * C : cfg.n_layer * block;
    const double stats = (blocks_once ? 1 : cfg.n_layer) * 4 * BTl;
    // Gradient scratch: datty (BT C/t), dqkv (3), dfc and dfc_gelu (4 each); ln_f's mean and
    // rstd (2 x BTl, fp32).
    return {blocks + BT * Cs * (1 + 3 + 8), stats + 2 * BTl,
            (recompute == ActivationRecompute::kNone ? cfg.n_layer : 1) * probs};
}

/// Offsets of one block's tensors inside its unit (identical for every block).
struct Gpt2Offsets {
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

Gpt2Offsets gpt2_offsets(const ModelLayout& layout) {
    auto off = [&](const char* suffix) { return layout.find(str("h.0.", suffix)).offset; };
    return Gpt2Offsets{off("ln_1.weight"),      off("ln_1.bias"),          off("attn.c_attn.weight"),
                       off("attn.c_attn.bias"), off("attn.c_proj.weight"), off("attn.c_proj.bias"),
                       off("ln_2.weight"),      off("ln_2.bias"),          off("mlp.c_fc.weight"),
                       off("mlp.c_fc.bias"),    off("mlp.c_proj.weight"),  off("mlp.c_proj.bias")};
}

class Gpt2Blocks final : public ModelFamily {
  public:
    Gpt2Blocks(const ModelConfig& cfg, const ModelLayout& layout, ActivationArena& arena,
               const DriverScratch& scratch, int max_batch, ActivationRecompute recompute);

    // With position runs (packed examples) each run reads the rows of wpe from its first
    // position on: the same op over a slice, so a run is embedded exactly as the same tokens
    // alone at the start of a row.
    void embed_forward(Backend& be, ActPtr out, const int32_t* tokens, const float* unit0, int B,
                       int T) override {
        const int C = m_cfg.n_embd;
        // The tensor group sums its ranks' embeddings: the positions are added by one of them.
        const float* wpe = m_parallel.adds_once() ? unit0 + m_wpe_offset : nullptr;
        if (m_rows.runs == nullptr) {
            be.encoder_forward(out, tokens, unit0, wpe, B, T, C);
            return;
        }
        for (const PositionRun& r : *m_rows.runs) {
            be.encoder_forward(out.offset(row_offset(r.offset)), tokens + r.offset, unit0,
                               wpe != nullptr ? wpe + row_offset(r.position) : nullptr, 1, r.length, C);
        }
    }
    void embed_backward(Backend& be, float* dunit0, bool zero, ConstActPtr dout, const int32_t* tokens, int B,
                        int T) override {
        const int C = m_cfg.n_embd;
        zero_grad_if(be, zero, dunit0 + m_wpe_offset, row_offset(m_cfg.seq_len));
        if (m_rows.runs == nullptr) {
            be.encoder_backward(dunit0, dunit0 + m_wpe_offset, dout, tokens, B, T, C);
            return;
        }
        for (const PositionRun& r : *m_rows.runs) {
            be.encoder_backward(dunit0, dunit0 + m_wpe_offset + row_offset(r.position),
                                dout.offset(row_offset(r.offset)),
                                tokens + r.offset, 1, r.length, C);
        }
    }
    void block_forward(Backend& be, int l, const UnitWeights& uw, ConstActPtr in, int B, int T) override;
    void block_backward(Backend& be, int l, const UnitWeights& uw, UnitGrads dw, ConstActPtr in, ActPtr dres, int B,
                        int T) override;
    ConstActPtr block_output(int l) const override { return m_slots[static_cast<size_t>(l)].output; }
    void final_norm_forward(Backend& be, ActPtr out, ConstActPtr in, const float* w, int N) override {
        be.layernorm_forward(out, m_lnf_mean, m_lnf_rstd, in, w, w + m_lnf_bias_offset, N, m_cfg.n_embd);
    }
    void final_norm_backward(Backend& be, ActPtr dinp, UnitGrads dw, ConstActPtr dout, ConstActPtr in, const float* w,
                             int N) override {
        const size_t C = static_cast<size_t>(m_cfg.n_embd);
        be.layernorm_backward(dinp, norm_grad(be, dw, 0, C), norm_grad(be, dw, m_lnf_bias_offset, C), dout, in, w,
                              m_lnf_mean, m_lnf_rstd, N, m_cfg.n_embd);
        add_norm_grads(be);
    }

  private:
    /// Floats before token (or position) i of a (.., C) buffer.
    size_t row_offset(int i) const { return static_cast<size_t>(i) * static_cast<size_t>(m_cfg.n_embd); }
    /// A block's sizes for B sequences of T tokens: width, this rank's heads and their width
    /// (C under no tensor parallelism), head size, rows, this rank's rows of the residual
    /// stream (N but under sequence parallelism), and its elements.
    struct Sizes {
        int C, NH, Ch, hs, N, Nl;
        size_t NlC;
    };
    Sizes sizes(int B, int T) const {
        const int N = B * T;
        const int C = m_cfg.n_embd;
        const int Nl = m_parallel.local_rows(N);
        const int t = m_parallel.parts();
        return {C, m_cfg.n_head / t, C / t, mha_head_size(C, m_cfg.n_head), N, Nl,
                static_cast<size_t>(Nl) * static_cast<size_t>(C)};
    }
    /// What one block keeps for its backward. Shapes (B, T, ...) at allocation size.
    struct Slots {
        ActPtr ln1;                  // (B, T, C)
        float* ln1_mean = nullptr;   // (B, T)
        float* ln1_rstd = nullptr;   // (B, T)
        ActPtr qkv;                  // (B, T, 3C)
        ActPtr atty;                 // (B, T, C)
        ActPtr att;                  // (B, NH, T, T)
        ActPtr residual2;            // (B, T, C)
        ActPtr ln2;                  // (B, T, C)
        float* ln2_mean = nullptr;   // (B, T)
        float* ln2_rstd = nullptr;   // (B, T)
        ActPtr fc;                   // (B, T, 4C)
        ActPtr fc_gelu;              // (B, T, 4C)
        ActPtr output;               // (B, T, C)
    };
    ModelConfig m_cfg;
    Gpt2Offsets m_off{};
    size_t m_wpe_offset = 0;
    size_t m_lnf_bias_offset = 0;
    std::vector<Slots> m_slots;
    // The products: c_attn and c_fc column-parallel, both c_proj row-parallel.
    ColumnParallelLinear m_qkv;
    RowParallelLinear m_attn_proj;
    ColumnParallelLinear m_fc;
    RowParallelLinear m_fc_proj;
    float* m_lnf_mean = nullptr;  // (B, T)
    float* m_lnf_rstd = nullptr;  // (B, T)
    // Gradient scratch reused by every block (backward accumulates, so each is zeroed first).
    ActPtr m_datty;     // (B, T, C)
    ActPtr m_dqkv;      // (B, T, 3C)
    ActPtr m_dfc;       // (B, T, 4C)
    ActPtr m_dfc_gelu;  // (B, T, 4C)
};

Gpt2Blocks::Gpt2Blocks(const ModelConfig& cfg, const ModelLayout& layout, ActivationArena& arena,
                       const DriverScratch& scratch, int max_batch, ActivationRecompute recompute)
    : ModelFamily(scratch), m_cfg(cfg) {
    if (cfg.n_layer > 0) m_off = gpt2_offsets(layout);
    const Gpt2Offsets& o = m_off;
    // This rank's features of the products: the width and its heads' width (C / t).
    const int width = cfg.n_embd;
    const int heads_width = width / m_parallel.parts();
    m_qkv = ColumnParallelLinear(products(), {o.qkvw, o.qkvb, width, 3 * heads_width});
    m_attn_proj = RowParallelLinear(products(), {o.attprojw, o.attprojb, heads_width, width});
    m_fc = ColumnParallelLinear(products(), {o.fcw, o.fcb, width, 4 * heads_width});
    m_fc_proj = RowParallelLinear(products(), {o.fcprojw, o.fcprojb, 4 * heads_width, width});
    m_wpe_offset = layout.find("wpe.weight").offset;
    m_lnf_bias_offset = layout.find("ln_f.bias").offset;
    const size_t BT = static_cast<size_t>(max_batch) * static_cast<size_t>(cfg.seq_len);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t Ch = static_cast<size_t>(heads_width);
    const size_t BTl = static_cast<size_t>(m_parallel.local_rows(static_cast<int>(BT)));
    const size_t probs = static_cast<size_t>(attention_probs_elements(cfg, max_batch, m_parallel.parts()));
    m_slots = allocate_block_slots<Slots>(cfg.n_layer, recompute, arena, BTl * C, [&](Slots& L) {
        L.ln1 = arena.take_act(BTl * C);
        L.ln1_mean = arena.take(BTl);
        L.ln1_rstd = arena.take(BTl);
        L.qkv = arena.take_act(BT * 3 * Ch);
        L.atty = arena.take_act(BT * Ch);
        // kAttention: every block's probabilities go in the driver's one buffer.
        L.att = scratch.probs.data != nullptr ? scratch.probs : arena.take_act(probs);
        L.residual2 = arena.take_act(BTl * C);
        L.ln2 = arena.take_act(BTl * C);
        L.ln2_mean = arena.take(BTl);
        L.ln2_rstd = arena.take(BTl);
        L.fc = arena.take_act(BT * 4 * Ch);
        L.fc_gelu = arena.take_act(BT * 4 * Ch);
        L.output = arena.take_act(BTl * C);
    });
    m_lnf_mean = arena.take(BTl);
    m_lnf_rstd = arena.take(BTl);
    m_datty = arena.take_act(BT * Ch);
    m_dqkv = arena.take_act(BT * 3 * Ch);
    m_dfc = arena.take_act(BT * 4 * Ch);
    m_dfc_gelu = arena.take_act(BT * 4 * Ch);
}

// Under tensor parallelism (Ch = C / t, NH = n_head / t) the products say what the group
// does (parallel_products.hpp): c_attn and c_fc are column-parallel, both c_proj
// row-parallel. Under sequence parallelism the LayerNorms and residuals run on this rank's
// Nl rows; the products gather them (in forward, and again for the weight gradients in
// backward, rather than keep them whole).
void Gpt2Blocks::block_forward(Backend& be, int l, const UnitWeights& uw, ConstActPtr in, int B, int T) {
    const float* w = uw.f32;
    const Gpt2Offsets& o = m_off;
    Slots& L = m_slots[static_cast<size_t>(l)];
    const auto [C, NH, Ch, hs, N, Nl, NlC] = sizes(B, T);
    const size_t NCh = static_cast<size_t>(N) * static_cast<size_t>(Ch);
    be.layernorm_forward(L.ln1, L.ln1_mean, L.ln1_rstd, in, w + o.ln1w, w + o.ln1b, Nl, C);
    m_qkv.forward(be, L.qkv, L.ln1, uw, N);
    attention_forward(be, L.atty, L.att, L.qkv, B, T, NH, NH, hs);
    // residual2 = in + atty @ Wproj^T + bproj in one op: no separate projection buffer.
    m_attn_proj.forward_residual(be, L.residual2, L.atty, uw, in, N);
    be.layernorm_forward(L.ln2, L.ln2_mean, L.ln2_rstd, L.residual2, w + o.ln2w, w + o.ln2b, Nl, C);
    m_fc.forward(be, L.fc, L.ln2, uw, N);
    be.gelu_forward(L.fc_gelu, L.fc, NCh * 4);
    m_fc_proj.forward_residual(be, L.output, L.fc_gelu, uw, L.residual2, N);
}

void Gpt2Blocks::block_backward(Backend& be, int l, const UnitWeights& uw, UnitGrads dw, ConstActPtr in, ActPtr dres,
                                int B, int T) {
    const float* w = uw.f32;
    const Gpt2Offsets& o = m_off;
    Slots& L = m_slots[static_cast<size_t>(l)];
    const auto [C, NH, Ch, hs, N, Nl, NlC] = sizes(B, T);
    const size_t NCh = static_cast<size_t>(N) * static_cast<size_t>(Ch);
    const size_t Cs = static_cast<size_t>(C);
    // dres holds d loss / d output (this rank's Nl rows). output = residual2 + mlp(...): the
    // MLP branch gets dres as is, and its LayerNorm backward adds into dres, turning it into
    // d/d residual2.
    // Deferred weight gradients keep each product's output gradient in an activation this
    // backward has read for the last time: the product's output (output, residual2) or its
    // input's source (fc before the GELU, qkv after the attention's backward).
    m_fc_proj.backward(be, m_dfc_gelu, dw, dres, L.fc_gelu, uw, L.output, N);
    zero_act(be, m_dfc, NCh * 4);
    be.gelu_backward(m_dfc, L.fc, m_dfc_gelu, NCh * 4);
    ActPtr dln = m_fc.backward(be, dw, m_dfc, L.ln2, uw, L.fc, N);
    be.layernorm_backward(dres, norm_grad(be, dw, o.ln2w, Cs), norm_grad(be, dw, o.ln2b, Cs), dln, L.residual2,
                          w + o.ln2w, L.ln2_mean, L.ln2_rstd, Nl, C);
    // Same for the attention branch: dres becomes d/d block input.
    m_attn_proj.backward(be, m_datty, dw, dres, L.atty, uw, L.residual2, N);
    zero_act(be, m_dqkv, NCh * 3);
    attention_backward(be, m_dqkv, m_datty, L.qkv, L.atty, L.att, B, T, NH, NH, hs);
    dln = m_qkv.backward(be, dw, m_dqkv, L.ln1, uw, L.qkv, N);
    be.layernorm_backward(dres, norm_grad(be, dw, o.ln1w, Cs), norm_grad(be, dw, o.ln1b, Cs), dln, in, w + o.ln1w,
                          L.ln1_mean, L.ln1_rstd, Nl, C);
    add_norm_grads(be);
}

std::unique_ptr<ModelFamily> make_gpt2_blocks(const ModelConfig& cfg, const ModelLayout& layout, Backend& /*backend*/,
                                              ActivationArena& arena, const DriverScratch& scratch, int max_batch,
                                              ActivationRecompute recompute) {
    return std::make_unique<Gpt2Blocks>(cfg, layout, arena, scratch, max_batch, recompute);
}

/// GPT-2's block for new rows only, over a key/value cache: the same ops as block_forward,
/// with learned positions taken from row pos of wpe.
class Gpt2Decoder final : public FamilyDecoder {
  public:
    Gpt2Decoder(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend, int max_rows)
        : m_cfg(cfg), m_arena(backend) {
        if (cfg.n_layer > 0) m_off = gpt2_offsets(layout);
        m_wpe_offset = layout.find("wpe.weight").offset;
        m_lnf_bias_offset = layout.find("ln_f.bias").offset;
        const size_t rows = static_cast<size_t>(max_rows);
        const size_t C = static_cast<size_t>(cfg.n_embd);
        for (float** p : {&m_ln, &m_atty, &m_residual2}) *p = take(rows * C);
        for (float** p : {&m_mean, &m_rstd}) *p = take(rows);
        m_qkv = take(rows * 3 * C);
        m_fc = take(rows * 4 * C);
        m_fc_gelu = take(rows * 4 * C);
    }

    void embed(Backend& be, float* out, const int32_t* tokens, const float* unit0, const DecodeRows& rows) override {
        const size_t C = static_cast<size_t>(m_cfg.n_embd);
        size_t first = 0;
        for (const DecodeSpan& s : rows.spans) {
            const float* wpe = unit0 + m_wpe_offset + static_cast<size_t>(s.pos) * C;
            be.encoder_forward(out + first * C, tokens + first, unit0, wpe, 1, s.length, m_cfg.n_embd);
            first += static_cast<size_t>(s.length);
        }
    }
    void block(Backend& be, const float* w, float* x, KvLayer kv, const DecodeRows& rows) override {
        const Gpt2Offsets& o = m_off;
        const int C = m_cfg.n_embd;
        const int NH = m_cfg.n_head;
        const int n = rows.total();
        const size_t NC = static_cast<size_t>(n) * static_cast<size_t>(C);
        be.layernorm_forward(m_ln, m_mean, m_rstd, x, w + o.ln1w, w + o.ln1b, n, C);
        be.matmul_forward(m_qkv, m_ln, w + o.qkvw, w + o.qkvb, n, C, 3 * C);
        size_t first = 0;
        for (const DecodeSpan& s : rows.spans) {
            const KvLayer seq = kv.from_row(s.cache, static_cast<size_t>(C));
            be.gqa_attention_cached(m_atty + first * static_cast<size_t>(C), m_qkv + first * 3 * static_cast<size_t>(C),
                                    seq.k, seq.v, s.pos, s.length, NH, NH, mha_head_size(C, NH), 0);
            first += static_cast<size_t>(s.length);
        }
        be.matmul_residual_forward(m_residual2, m_atty, w + o.attprojw, w + o.attprojb, x, n, C, C);
        be.layernorm_forward(m_ln, m_mean, m_rstd, m_residual2, w + o.ln2w, w + o.ln2b, n, C);
        be.matmul_forward(m_fc, m_ln, w + o.fcw, w + o.fcb, n, C, 4 * C);
        be.gelu_forward(m_fc_gelu, m_fc, NC * 4);
        // x is free once residual2 holds it: the block's output goes back into it.
        be.matmul_residual_forward(x, m_fc_gelu, w + o.fcprojw, w + o.fcprojb, m_residual2, n, 4 * C, C);
    }
    void final_norm(Backend& be, float* out, const float* in, const float* w, int n) override {
        be.layernorm_forward(out, m_mean, m_rstd, in, w, w + m_lnf_bias_offset, n, m_cfg.n_embd);
    }

  private:
    float* take(size_t n) { return m_arena.take(n); }

    ModelConfig m_cfg;
    ActivationArena m_arena;  // every buffer below, freed with the decoder
    Gpt2Offsets m_off{};
    size_t m_wpe_offset = 0;
    size_t m_lnf_bias_offset = 0;
    // (rows, ...) buffers of one block, reused by every block.
    float* m_ln = nullptr;
    float* m_mean = nullptr;
    float* m_rstd = nullptr;
    float* m_qkv = nullptr;
    float* m_atty = nullptr;
    float* m_residual2 = nullptr;
    float* m_fc = nullptr;
    float* m_fc_gelu = nullptr;
};

std::unique_ptr<FamilyDecoder> make_gpt2_decoder(const ModelConfig& cfg, const ModelLayout& layout, Backend& backend,
                                                 int max_rows) {
    return std::make_unique<Gpt2Decoder>(cfg, layout, backend, max_rows);
}

}  // namespace

const FamilyTraits& gpt2_traits() {
    static const FamilyTraits traits{gpt2_layout, gpt2_activations, make_gpt2_blocks, make_gpt2_decoder};
    return traits;
}

}  // namespace zt
