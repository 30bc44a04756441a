// The Mistral family (family.hpp): Hugging Face's MistralForCausalLM is Llama's block with
// sliding-window attention, so it is the Llama family (llama_family.hpp: keys, counts,
// tensors, blocks) plus model.sliding_window, read from and written to config.json's
// sliding_window (null = 0, the whole causal context). The blocks apply the window
// (ModelFamily::set_sliding_window, the decoder's gqa_attention_cached).
#include <nlohmann/json.hpp>

#include "hf_config_fields.hpp"
#include "llama_family.hpp"

namespace zt {

namespace {

class MistralFamily final : public LlamaFamily {
  public:
    const char* name() const override { return "mistral"; }
    std::vector<const char*> own_keys() const override {
        std::vector<const char*> keys = LlamaFamily::own_keys();
        keys.push_back("model.sliding_window");
        return keys;
    }
    /// Attention's term counts the keys a query reads: the window's, when shorter than seq_len.
    double flops_per_token(const ModelConfig& m) const override {
        const double keys = m.sliding_window > 0 && m.sliding_window < m.seq_len ? m.sliding_window : m.seq_len;
        return weight_flops_per_token(m) + 12.0 * m.n_layer * keys * m.n_embd;
    }
    std::string banner(const ModelConfig& m, double params) const override {
        return LlamaFamily::banner(m, params) +
               (m.sliding_window > 0 ? str(", sliding window ", m.sliding_window) : std::string(", full attention"));
    }
    const HfNaming& hf_naming() const override {
        static const HfNaming naming = [this] {
            HfNaming n = LlamaFamily::hf_naming();
            n.architecture = "MistralForCausalLM";
            return n;
        }();
        return naming;
    }
    /// MistralConfig's fields: LlamaConfig's without the biases and pretraining_tp, with
    /// sliding_window.
    nlohmann::json hf_config(const ModelConfig& m, DType dtype) const override {
        nlohmann::json c = LlamaFamily::hf_config(m, dtype);
        for (const char* llama_only : {"attention_bias", "mlp_bias", "pretraining_tp"}) c.erase(llama_only);
        c["architectures"] = {"MistralForCausalLM"};
        c["model_type"] = "mistral";
        c["sliding_window"] = m.sliding_window > 0 ? nlohmann::json(m.sliding_window) : nlohmann::json(nullptr);
        return c;
    }
    std::vector<std::pair<std::string, std::string>> hf_metadata(const ModelConfig& m) const override {
        std::vector<std::pair<std::string, std::string>> meta = LlamaFamily::hf_metadata(m);
        meta.emplace_back("sliding_window", std::to_string(m.sliding_window));
        return meta;
    }
    std::vector<std::string> hf_model_types() const override { return {"mistral"}; }
    std::vector<HfSetting> hf_settings(const HfConfigFields& f, const std::string& file) const override {
        std::vector<HfSetting> out = llama_settings(f, file);
        out.push_back({"model.sliding_window", std::to_string(f.integer_or("sliding_window", 1, 0)),
                       "sliding_window"});
        return out;
    }

  protected:
    void check_own_keys(const ModelConfig& m, const SettingCheck& v) const override {
        LlamaFamily::check_own_keys(m, v);
        v.check_int_min("model.sliding_window", m.sliding_window, 0);
    }
};

}  // namespace

const Family& mistral_family() {
    static const MistralFamily family;
    return family;
}

}  // namespace zt
