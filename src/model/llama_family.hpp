// The Llama family's Family (llama_family.cpp), declared for the families built on Llama's
// block that differ in their keys and Hugging Face names only (mistral_family.cpp: a sliding
// window). Private to model/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ztrain/model/family.hpp"
#include "model_family.hpp"

namespace zt {

/// LlamaForCausalLM: grouped-query heads, SwiGLU, RoPE (and llama3 scaling), RMSNorm, a
/// tied or untied head.
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

    double parameter_count(const ModelConfig& m) const override {
        // Embedding (and an untied head), per block two RMSNorms, q|k|v, o, gate|up and
        // down; the final RMSNorm.
        const double C = m.n_embd;
        const double heads = m.tie_embeddings ? 1 : 2;
        const double block = 2 * C + C * m.qkv_dim() + C * C + 3.0 * m.ffn_dim * C;
        return heads * m.padded_vocab() * C + static_cast<double>(m.n_layer) * block + C;
    }
    double block_product_weights(const ModelConfig& m) const override {
        const double C = m.n_embd;
        const double q = static_cast<double>(m.n_head) * m.head_size();
        const double kv = static_cast<double>(m.kv_heads()) * m.head_size();
        return C * (q + 2 * kv) + q * C + 3 * C * m.ffn_dim;
    }
    std::string banner(const ModelConfig& m, double params) const override {
        return printf_text(
            "ztrain: %s, %d layers, %d heads (%d key/value), %d wide, ffn %d, seq %d, vocab %d (padded %d), "
            "%s head: %.2fM parameters",
            name(), m.n_layer, m.n_head, m.kv_heads(), m.n_embd, m.ffn_dim, m.seq_len, m.vocab_size,
            m.padded_vocab(), m.tie_embeddings ? "tied" : "untied", params / 1e6);
    }

    const HfNaming& hf_naming() const override {
        static const HfNaming naming{
            "LlamaForCausalLM",
            "",
            {},  // HF's nn.Linear is (out, in), as ztrain's matrices
            // A tied model's file may still carry lm_head.weight (HF re-ties it on load; an
            // untied model expects it, so it is never ignored there).
            {"lm_head.weight"},
            {".self_attn.rotary_emb.inv_freq"},  // a buffer older transformers saved
        };
        return naming;
    }
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
    /// The settings of a LlamaForCausalLM-layout config.json (model.arch is name()), without
    /// the check that it has no sliding window.
    std::vector<HfSetting> llama_settings(const HfConfigFields& f, const std::string& file) const;
    const char* missing_hf_key(const ModelConfig& m) const override {
        return m.ffn_dim > 0 ? nullptr : "model.ffn_dim";
    }

    const FamilyTraits& traits() const override { return llama_traits(); }

  protected:
    void check_own_keys(const ModelConfig& m, const SettingCheck& v) const override;

  private:
    static void check_rope_scaling(const ModelConfig& m, const SettingCheck& v);
    static const char* rope_group(const HfConfigFields& f);
    static HfSetting rope_theta_setting(const HfConfigFields& f, const std::string& file);
};

}  // namespace zt
