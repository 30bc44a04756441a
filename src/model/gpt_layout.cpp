// The tensor manifests (GPT-2, Llama) and their counter-based initialization.
//
// Tensor starts inside a unit are aligned to 16 floats (64 bytes) so vectorized kernels
// see aligned rows; the gaps are zero, get zero gradients and stay zero under AdamW.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/gpt.hpp"

namespace zt {

namespace {
constexpr size_t kTensorAlign = 16;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

class LayoutBuilder {
  public:
    explicit LayoutBuilder(ModelLayout& layout) : m_layout(layout) {}
    void begin_unit() {
        m_layout.unit_numel.push_back(0);
    }
    void add(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
             float init_value = 0.f, size_t init_numel = SIZE_MAX) {
        add_at(name, std::move(shape), decay, init_std, init_value, init_numel, kTensorAlign);
    }
    /// A tensor that starts right where the previous one ends (no alignment gap), so that
    /// consecutive tensors form one matrix: Llama's q|k|v and gate|up.
    void add_packed(const std::string& name, std::vector<size_t> shape, bool decay, float init_std) {
        add_at(name, std::move(shape), decay, init_std, 0.f, SIZE_MAX, 1);
    }

  private:
    void add_at(const std::string& name, std::vector<size_t> shape, bool decay, float init_std, float init_value,
                size_t init_numel, size_t align) {
        ParamSpec p;
        p.name = name;
        p.unit = static_cast<int>(m_layout.unit_numel.size()) - 1;
        p.shape = std::move(shape);
        p.numel = 1;
        for (size_t d : p.shape) p.numel *= d;
        size_t& unit_size = m_layout.unit_numel.back();
        p.offset = align_up(unit_size, align);
        unit_size = p.offset + p.numel;
        p.decay = decay;
        p.init_std = init_std;
        p.init_value = init_value;
        p.init_numel = init_numel < p.numel ? init_numel : p.numel;
        p.global_index = m_next_global;
        m_next_global += p.numel;
        m_layout.params.push_back(std::move(p));
    }

    ModelLayout& m_layout;
    size_t m_next_global = 0;
};
}  // namespace

const ParamSpec& ModelLayout::find(const std::string& name) const {
    for (const ParamSpec& p : params) {
        if (p.name == name) return p;
    }
    throw Error(str("no parameter named '", name, "' in the model layout"));
}

/// Hugging Face LlamaForCausalLM's tensors under its own names, so an importer or exporter
/// maps them one to one. q|k|v and gate|up are packed (add_packed) so each block runs one
/// product for the three projections and one for the two: rows [0, NH hs) of the packed
/// matrix are q_proj, then NKV hs rows of k_proj, then v_proj; gate_proj's F rows, then
/// up_proj's. An untied lm_head sits in unit 0 next to the embedding, so the unit protocol
/// (and the memory plan's "unit 0 is held from the LM head through backward") is GPT-2's.
/// Init as HF's _init_weights: normal(0, 0.02) for every matrix, RMSNorm weights 1.
static ModelLayout make_llama_layout(const ModelConfig& cfg) {
    ModelLayout layout;
    layout.model = cfg;
    LayoutBuilder b(layout);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t Vp = static_cast<size_t>(cfg.padded_vocab());
    const size_t hs = static_cast<size_t>(cfg.head_size());
    const size_t q = static_cast<size_t>(cfg.n_head) * hs;
    const size_t kv = static_cast<size_t>(cfg.kv_heads()) * hs;
    const size_t F = static_cast<size_t>(cfg.ffn_dim);
    const float std_base = 0.02f;
    const size_t live_vocab = static_cast<size_t>(cfg.vocab_size) * C;

    b.begin_unit();
    b.add("model.embed_tokens.weight", {Vp, C}, true, std_base, 0.f, live_vocab);
    if (!cfg.tie_embeddings) b.add("lm_head.weight", {Vp, C}, true, std_base, 0.f, live_vocab);
    for (int l = 0; l < cfg.n_layer; ++l) {
        const std::string h = str("model.layers.", l, ".");
        b.begin_unit();
        b.add(h + "input_layernorm.weight", {C}, false, 0.f, 1.f);
        b.add(h + "self_attn.q_proj.weight", {q, C}, true, std_base);
        b.add_packed(h + "self_attn.k_proj.weight", {kv, C}, true, std_base);
        b.add_packed(h + "self_attn.v_proj.weight", {kv, C}, true, std_base);
        b.add(h + "self_attn.o_proj.weight", {C, q}, true, std_base);
        b.add(h + "post_attention_layernorm.weight", {C}, false, 0.f, 1.f);
        b.add(h + "mlp.gate_proj.weight", {F, C}, true, std_base);
        b.add_packed(h + "mlp.up_proj.weight", {F, C}, true, std_base);
        b.add(h + "mlp.down_proj.weight", {C, F}, true, std_base);
    }
    b.begin_unit();
    b.add("model.norm.weight", {C}, false, 0.f, 1.f);
    for (size_t n : layout.unit_numel) layout.total_numel += n;
    return layout;
}

ModelLayout make_gpt_layout(const ModelConfig& cfg) {
    if (cfg.is_llama()) return make_llama_layout(cfg);
    ModelLayout layout;
    layout.model = cfg;
    LayoutBuilder b(layout);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t Vp = static_cast<size_t>(cfg.padded_vocab());
    const size_t T = static_cast<size_t>(cfg.seq_len);
    const float std_base = 0.02f;
    // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer): each block adds two.
    const float std_resid = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));

    b.begin_unit();
    b.add("wte.weight", {Vp, C}, true, std_base, 0.f, static_cast<size_t>(cfg.vocab_size) * C);
    b.add("wpe.weight", {T, C}, true, std_base);
    for (int l = 0; l < cfg.n_layer; ++l) {
        const std::string h = str("h.", l, ".");
        b.begin_unit();
        b.add(h + "ln_1.weight", {C}, false, 0.f, 1.f);
        b.add(h + "ln_1.bias", {C}, false, 0.f);
        b.add(h + "attn.c_attn.weight", {3 * C, C}, true, std_base);
        b.add(h + "attn.c_attn.bias", {3 * C}, false, 0.f);
        b.add(h + "attn.c_proj.weight", {C, C}, true, std_resid);
        b.add(h + "attn.c_proj.bias", {C}, false, 0.f);
        b.add(h + "ln_2.weight", {C}, false, 0.f, 1.f);
        b.add(h + "ln_2.bias", {C}, false, 0.f);
        b.add(h + "mlp.c_fc.weight", {4 * C, C}, true, std_base);
        b.add(h + "mlp.c_fc.bias", {4 * C}, false, 0.f);
        b.add(h + "mlp.c_proj.weight", {C, 4 * C}, true, std_resid);
        b.add(h + "mlp.c_proj.bias", {C}, false, 0.f);
    }
    b.begin_unit();
    b.add("ln_f.weight", {C}, false, 0.f, 1.f);
    b.add("ln_f.bias", {C}, false, 0.f);
    for (size_t n : layout.unit_numel) layout.total_numel += n;
    return layout;
}

void init_unit(const ModelLayout& layout, int unit, uint64_t seed, float* out) {
    ZT_REQUIRE(unit >= 0 && unit < layout.num_units(), "unit ", unit);
    init_unit_range(layout, unit, seed, 0, layout.unit_numel[static_cast<size_t>(unit)], out);
}

void init_unit_range(const ModelLayout& layout, int unit, uint64_t seed, size_t begin, size_t end, float* out) {
    ZT_REQUIRE(unit >= 0 && unit < layout.num_units(), "unit ", unit);
    const size_t n = layout.unit_numel[static_cast<size_t>(unit)];
    ZT_REQUIRE(begin <= end && end <= n, "init range [", begin, ", ", end, ") of unit ", unit, " (", n, " elements)");
    for (size_t i = 0; i < end - begin; ++i) out[i] = 0.f;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != unit) continue;
        // The part of this tensor inside [begin, end), in tensor-relative indices.
        const size_t lo = std::max(p.offset, begin) - p.offset;
        const size_t hi = std::min(p.offset + p.numel, end);
        if (hi <= p.offset + lo) continue;
        const size_t count = hi - (p.offset + lo);
        float* dst = out + (p.offset + lo - begin);
        if (p.init_std == 0.f) {
            for (size_t i = 0; i < count; ++i) dst[i] = p.init_value;
            continue;
        }
        // Padded vocabulary rows of the token embedding stay zero: they are never an input
        // and never predicted, so they must not disturb the tied LM head. Every element's
        // value depends only on its global index, so any range gives the same values.
        const size_t live = std::min(p.init_numel, lo + count);
        const long long first = static_cast<long long>(lo);
        const long long last = static_cast<long long>(std::max(live, lo));
        #pragma omp parallel for schedule(static)
        for (long long i = first; i < last; ++i) {
            dst[i - first] = static_cast<float>(
                p.init_std * random_normal(seed, static_cast<uint64_t>(RandomStream::kInit),
                                           p.global_index + static_cast<uint64_t>(i)));
        }
    }
}

}  // namespace zt
