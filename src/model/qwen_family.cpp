// The Qwen2 (Qwen2.5) and Qwen3 families (family.hpp): Llama's block (llama_block.cpp) with
// its options, and Llama's keys, counts and config.json reading (llama_family.hpp), under
// their own names.
//   qwen2 (Qwen2ForCausalLM): biases on the q, k and v projections (model.qkv_bias = true).
//   qwen3 (Qwen3ForCausalLM): an RMSNorm over each head's q and k before rotary
//     (model.qk_norm = true), a head_dim that need not be n_embd / n_head, no biases.
// Not here: sliding-window attention (Qwen's use_sliding_window is refused).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "hf_config_fields.hpp"
#include "llama_family.hpp"
#include "model_family.hpp"

namespace zt {

namespace {

/// What distinguishes the two: names, and the one block option each requires.
struct QwenKind {
    const char* name;          ///< model.arch and config.json's model_type
    const char* architecture;  ///< config.json's architectures
    const char* option_key;    ///< "model.qkv_bias" or "model.qk_norm"
    bool ModelConfig::*option;
    const char* option_text;  ///< what the option is, for the message refusing it off
};

constexpr QwenKind kQwen2{"qwen2", "Qwen2ForCausalLM", "model.qkv_bias", &ModelConfig::qkv_bias,
                          "q, k and v projections with biases"};
constexpr QwenKind kQwen3{"qwen3", "Qwen3ForCausalLM", "model.qk_norm", &ModelConfig::qk_norm,
                          "an RMSNorm over each head's q and k before rotary (q_norm, k_norm)"};

class QwenFamily final : public LlamaFamily {
  public:
    explicit QwenFamily(const QwenKind& kind) : m_kind(kind), m_naming(llama_naming(kind.architecture)) {}

    const char* name() const override { return m_kind.name; }
    std::vector<const char*> own_keys() const override {
        std::vector<const char*> keys = LlamaFamily::own_keys();
        keys.push_back("model.head_dim");
        keys.push_back(m_kind.option_key);
        return keys;
    }
    const HfNaming& hf_naming() const override { return m_naming; }
    nlohmann::json hf_config(const ModelConfig& m, DType dtype) const override;
    std::vector<std::string> hf_model_types() const override { return {m_kind.name}; }
    std::vector<HfSetting> hf_settings(const HfConfigFields& f, const std::string& file) const override;

  protected:
    void check_own_keys(const ModelConfig& m, const SettingCheck& v) const override {
        v.check(m.head_dim >= 0 && m.head_dim % 2 == 0, "model.head_dim",
                "an even integer >= 2 (rotary embeddings rotate pairs of channels), or 0: n_embd / n_head");
        v.check(m.*m_kind.option, m_kind.option_key,
                str("true: model.arch = ", m_kind.name, " has ", m_kind.option_text));
        LlamaFamily::check_own_keys(m, v);
    }

  private:
    const QwenKind& m_kind;
    const HfNaming m_naming;
};

/// Qwen2Config / Qwen3Config as transformers writes them: LlamaConfig's fields less the
/// Llama-only ones, with full attention everywhere.
nlohmann::json QwenFamily::hf_config(const ModelConfig& m, DType dtype) const {
    nlohmann::json c = LlamaFamily::hf_config(m, dtype);
    c["architectures"] = {m_kind.architecture};
    c["model_type"] = m_kind.name;
    for (const char* llama_only : {"mlp_bias", "pretraining_tp", "attention_bias"}) c.erase(llama_only);
    if (m.qk_norm) c["attention_bias"] = false;  // Qwen3's: biases on q, k, v and o
    // Qwen2 derives its head size from hidden / heads; Qwen3's default (128) is no guide.
    if (!m.qk_norm && m.head_dim == 0) c.erase("head_dim");
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = m.n_layer;
    return c;
}

std::vector<HfSetting> QwenFamily::hf_settings(const HfConfigFields& f, const std::string& file) const {
    check_hf_heads(f, file);
    f.refuse_unless(f.text_or("hidden_act", "silu") == "silu", "hidden_act", "ztrain's Qwen MLP is SwiGLU (silu)");
    // Qwen2.5's files carry sliding_window with use_sliding_window false: full attention.
    f.refuse_unless(!f.boolean_or("use_sliding_window", false), "use_sliding_window",
                    "ztrain attends over the whole context (false)");
    if (f.has("layer_types")) {
        const nlohmann::json& types = f.at("layer_types");
        const bool full = types.is_array() && std::all_of(types.begin(), types.end(), [](const nlohmann::json& t) {
                              return t == "full_attention";
                          });
        f.refuse_unless(full, "layer_types", "ztrain attends over the whole context (\"full_attention\" layers)");
    }
    const bool qwen3 = m_kind.option == &ModelConfig::qk_norm;
    if (qwen3) {
        f.refuse_unless(!f.boolean_or("attention_bias", false), "attention_bias",
                        "ztrain's Qwen3 has no q/k/v/o biases");
    }
    std::vector<HfSetting> out = {{"model.arch", m_kind.name, "model_type"}};
    append_block_settings(f, file, out);
    // Qwen3Config's head_dim is 128 where the file is silent; Qwen2's, hidden / heads. Set
    // only where it is not hidden / heads (model.head_dim's 0), so a deck reads back as is.
    const long hidden_per_head = f.integer("hidden_size", 1) / f.integer("num_attention_heads", 1);
    const long head_dim = f.integer_or("head_dim", 2, qwen3 ? 128 : hidden_per_head);
    if (head_dim != hidden_per_head) out.push_back({"model.head_dim", std::to_string(head_dim), "head_dim"});
    out.push_back({m_kind.option_key, "true", "model_type"});
    return out;
}

}  // namespace

const Family& qwen2_family() {
    static const QwenFamily family(kQwen2);
    return family;
}

const Family& qwen3_family() {
    static const QwenFamily family(kQwen3);
    return family;
}

}  // namespace zt
