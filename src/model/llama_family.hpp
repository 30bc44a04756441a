// The Llama family's type (llama_family.cpp), private to model/ so that the families built
// on Llama's block (qwen_family.cpp: Qwen2, Qwen3; mistral_family.cpp: a sliding window)
// take its keys, checks, counts and config.json reading and override only what differs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"

namespace zt {

class LlamaFamily : public Family {
  public:
    const char* name() const override { return "llama"; }
    std::vector<const char*> own_keys() const override {
        return {"model.n_kv_head", "model.ffn_dim", "model.rope_theta", "model.rope_scaling",
                "model.rope_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
                "model.rope_original_context", "model.norm_eps", "model.tie_embeddings"};
    }
    void check_tensor_split(const ModelConfig& m, int tensor, const SettingCheck& check) const override {
        check.check(m.ffn_dim % tensor == 0, "model.ffn_dim", str("a multiple of parallel.tensor = ", tensor));
    }

    double parameter_count(const ModelConfig& m) const override;
    double block_product_weights(const ModelConfig& m) const override {
        const double C = m.n_embd;
        const double q = static_cast<double>(m.n_head) * m.head_size();
        const double kv = static_cast<double>(m.kv_heads()) * m.head_size();
        return C * (q + 2 * kv) + q * C + 3 * C * m.ffn_dim;
    }
    std::string banner(const ModelConfig& m, double params) const override;

    const HfNaming& hf_naming() const override;
    nlohmann::json hf_config(const ModelConfig& m, DType dtype) const override;
    std::vector<std::pair<std::string, std::string>> hf_metadata(const ModelConfig& m) const override {
        return {{"n_layer", std::to_string(m.n_layer)},
                {"n_head", std::to_string(m.n_head)},
                {"n_kv_head", std::to_string(m.kv_heads())},
                {"n_embd", std::to_string(m.n_embd)},
                {"ffn_dim", std::to_string(m.ffn_dim)},
                {"vocab_size", std::to_string(m.vocab_size)},
                {"tied", m.tie_embeddings ? "lm_head.weight = model.embed_tokens.weight" : "no"}};
    }
    std::vector<std::string> hf_model_types() const override { return {"llama"}; }
    std::vector<HfSetting> hf_settings(const HfConfigFields& f, const std::string& file) const override;
    /// The settings of a LlamaForCausalLM-layout config.json under model.arch = name(),
    /// without the check that it has no sliding window (mistral_family.cpp reads one).
    std::vector<HfSetting> llama_settings(const HfConfigFields& f, const std::string& file) const;
    const char* missing_hf_key(const ModelConfig& m) const override {
        return m.ffn_dim > 0 ? nullptr : "model.ffn_dim";
    }

    const FamilyTraits& traits() const override;

  protected:
    void check_own_keys(const ModelConfig& m, const SettingCheck& v) const override;
    /// The naming of a family whose tensors are Llama's, under another architecture name.
    static HfNaming llama_naming(const char* architecture);
    /// config.json's heads: hidden_size divisible by num_attention_heads, which
    /// num_key_value_heads divides.
    static void check_hf_heads(const HfConfigFields& f, const std::string& file);
    /// The settings every Llama-block family reads alike (layers, heads, widths, vocabulary,
    /// context, norm epsilon, RoPE, tied head), appended to `out` after model.arch.
    static void append_block_settings(const HfConfigFields& f, const std::string& file, std::vector<HfSetting>& out);

  private:
    static void check_rope_scaling(const ModelConfig& m, const SettingCheck& v);
    static const char* rope_group(const HfConfigFields& f);
    static HfSetting rope_theta_setting(const HfConfigFields& f, const std::string& file);
};

}  // namespace zt
