// The GPT-2 family (family.hpp): its keys (none of its own), parameter count, pipeline cost,
// banner and Hugging Face names (GPT2LMHeadModel). Its tensors and blocks are
// gpt2_block.cpp's gpt2_traits().
#include <nlohmann/json.hpp>

#include "hf_config_fields.hpp"
#include "model_family.hpp"
#include "ztrain/model/family.hpp"

namespace zt {

namespace {

class Gpt2Family final : public Family {
  public:
    const char* name() const override { return "gpt2"; }
    const char* lora_default_targets() const override { return "c_attn"; }
    BlockOps block_ops() const override { return {BlockOps::Norm::kLayerNorm, BlockOps::Mlp::kGeluTanh, false}; }
    std::vector<const char*> own_keys() const override { return {}; }
    void check_tensor_split(const ModelConfig&, int, const SettingCheck&) const override {}

    double parameter_count(const ModelConfig& m) const override {
        const double C = m.n_embd;
        return static_cast<double>(m.padded_vocab()) * C + static_cast<double>(m.seq_len) * C +
               static_cast<double>(m.n_layer) * (12 * C * C + 13 * C) + 2 * C;
    }
    double block_product_weights(const ModelConfig& m) const override {
        const double C = m.n_embd;
        return 12 * C * C;  // q|k|v, its projection, the 4C MLP's two products
    }
    std::string banner(const ModelConfig& m, double params) const override {
        return printf_text("ztrain: %d layers, %d heads, %d wide, seq %d, vocab %d (padded %d): %.2fM parameters",
                           m.n_layer, m.n_head, m.n_embd, m.seq_len, m.vocab_size, m.padded_vocab(), params / 1e6);
    }

    const HfNaming& hf_naming() const override {
        static const HfNaming naming{
            "GPT2LMHeadModel",
            "transformer.",
            {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"},
            // lm_head is tied to wte (Hugging Face re-ties it on load); the attention bias
            // buffers are causal masks some GPT-2 exports include.
            {"lm_head.weight"},
            {".attn.bias", ".attn.masked_bias"},
        };
        return naming;
    }
    nlohmann::json hf_config(const ModelConfig& m, DType dtype) const override {
        const bool gpt2_vocab = m.vocab_size == 50257;
        nlohmann::json c = {
            {"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", static_cast<long>(m.vocab_size)},
            {"n_positions", static_cast<long>(m.seq_len)},
            {"n_ctx", static_cast<long>(m.seq_len)},
            {"n_embd", static_cast<long>(m.n_embd)},
            {"n_layer", static_cast<long>(m.n_layer)},
            {"n_head", static_cast<long>(m.n_head)},
            {"n_inner", nullptr},                  // 4 * n_embd, as ztrain's MLP
            {"activation_function", "gelu_new"},   // GELU with the tanh approximation
            {"layer_norm_epsilon", 1e-5},          // ztrain's LayerNorm epsilon
            {"initializer_range", 0.02},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},                   // ztrain trains without dropout
            {"scale_attn_weights", true},          // scores / sqrt(head size)
            {"tie_word_embeddings", true},         // lm_head is wte
            {"torch_dtype", hf_torch_dtype(dtype)},
        };
        c["bos_token_id"] = gpt2_vocab ? nlohmann::json(50256) : nlohmann::json(nullptr);
        c["eos_token_id"] = gpt2_vocab ? nlohmann::json(50256) : nlohmann::json(nullptr);
        return c;
    }
    std::vector<std::pair<std::string, std::string>> hf_metadata(const ModelConfig& m) const override {
        return {{"n_layer", std::to_string(m.n_layer)},
                {"n_head", std::to_string(m.n_head)},
                {"n_embd", std::to_string(m.n_embd)},
                {"n_positions", std::to_string(m.seq_len)},
                {"vocab_size", std::to_string(m.vocab_size)},
                {"tied", "lm_head.weight = transformer.wte.weight"}};
    }
    std::vector<std::string> hf_model_types() const override { return {"gpt2"}; }
    std::vector<HfSetting> hf_settings(const HfConfigFields& f, const std::string&) const override {
        const long n_embd = f.integer("n_embd", 1);
        f.refuse_unless(f.text_or("activation_function", "gelu_new") == "gelu_new", "activation_function",
                        "ztrain's GPT-2 uses gelu_new (GELU, tanh approximation)");
        f.refuse_unless(!f.has("n_inner") || f.integer("n_inner", 1) == 4 * n_embd, "n_inner",
                        "ztrain's GPT-2 MLP is 4 * n_embd wide (null)");
        return {{"model.arch", "gpt2", "model_type"},
                {"model.n_layer", std::to_string(f.integer("n_layer", 1)), "n_layer"},
                {"model.n_head", std::to_string(f.integer("n_head", 1)), "n_head"},
                {"model.n_embd", std::to_string(n_embd), "n_embd"},
                // GPT-2's learned positions are a weight: the context is fixed by the file.
                {"model.seq_len", std::to_string(f.integer("n_positions", 1)), "n_positions"},
                {"model.vocab_size", std::to_string(f.integer("vocab_size", 2)), "vocab_size"}};
    }
    const char* missing_hf_key(const ModelConfig&) const override { return nullptr; }

    const FamilyTraits& traits() const override { return gpt2_traits(); }

  protected:
    void check_own_keys(const ModelConfig&, const SettingCheck&) const override {}
};

}  // namespace

const Family& gpt2_family() {
    static const Gpt2Family family;
    return family;
}

}  // namespace zt
