// Hugging Face config.json into model keys (hf_family.hpp): model_type gpt2, llama or mistral.
#include "hf_family.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "weights_file.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

nlohmann::json hf_gpt2_config(long n_layer, long n_head, long n_embd, long n_positions, long vocab_size,
                              DType dtype) {
    ModelConfig m;
    m.arch = ModelArch::kGpt2;
    m.n_layer = static_cast<int>(n_layer);
    m.n_head = static_cast<int>(n_head);
    m.n_embd = static_cast<int>(n_embd);
    m.seq_len = static_cast<int>(n_positions);
    m.vocab_size = static_cast<int>(vocab_size);
    return model_family(m).hf_config(m, dtype);
}

namespace {

/// Reads config.json fields, each checked for its kind, into deck texts; every message names
/// the file and the field.
class HfConfigFields {
  public:
    HfConfigFields(const nlohmann::json& c, const std::string& file) : m_c(c), m_file(file) {}

    bool has(const char* f) const { return m_c.contains(f) && !m_c.at(f).is_null(); }
    const nlohmann::json& at(const char* f) const {
        ZT_INPUT_CHECK(has(f), m_file, ": field ", f, " is missing");
        return m_c.at(f);
    }
    long integer(const char* f, long min) const {
        const nlohmann::json& v = at(f);
        ZT_INPUT_CHECK(v.is_number_integer() && v.get<long long>() >= min && v.get<long long>() <= INT32_MAX, m_file,
                       ": ", f, " = ", v.dump(), ": expected an integer >= ", min);
        return static_cast<long>(v.get<long long>());
    }
    long integer_or(const char* f, long min, long fallback) const { return has(f) ? integer(f, min) : fallback; }
    double number(const char* f) const {
        const nlohmann::json& v = at(f);
        ZT_INPUT_CHECK(v.is_number(), m_file, ": ", f, " = ", v.dump(), ": expected a number");
        return v.get<double>();
    }
    double number_or(const char* f, double fallback) const { return has(f) ? number(f) : fallback; }
    bool boolean_or(const char* f, bool fallback) const {
        if (!has(f)) return fallback;
        ZT_INPUT_CHECK(m_c.at(f).is_boolean(), m_file, ": ", f, " = ", m_c.at(f).dump(), ": expected true or false");
        return m_c.at(f).get<bool>();
    }
    std::string text_or(const char* f, const std::string& fallback) const {
        if (!has(f)) return fallback;
        ZT_INPUT_CHECK(m_c.at(f).is_string(), m_file, ": ", f, " = ", m_c.at(f).dump(), ": expected a string");
        return m_c.at(f).get<std::string>();
    }
    /// A field ztrain has no equivalent for must hold the value ztrain's model implies.
    void refuse_unless(bool ok, const char* f, const std::string& why) const {
        ZT_INPUT_CHECK(ok, m_file, ": ", f, " = ", m_c.contains(f) ? m_c.at(f).dump() : "(missing)", ": ", why);
    }

  private:
    const nlohmann::json& m_c;
    const std::string& m_file;
};

/// Shortest text that reads back as the same double (the deck parser reads it).
std::string number_text(double v) {
    char buf[40];
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

std::vector<HfSetting> gpt2_settings(const HfConfigFields& f) {
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

std::vector<HfSetting> llama_settings(const HfConfigFields& f, const std::string& file) {
    const long C = f.integer("hidden_size", 1);
    const long NH = f.integer("num_attention_heads", 1);
    const long NKV = f.integer_or("num_key_value_heads", 1, NH);
    ZT_INPUT_CHECK(C % NH == 0, file, ": hidden_size = ", C, " is not divisible by num_attention_heads = ", NH);
    ZT_INPUT_CHECK(NH % NKV == 0, file, ": num_key_value_heads = ", NKV, " does not divide num_attention_heads = ",
                   NH, " (each key/value head serves num_attention_heads / num_key_value_heads query heads)");
    f.refuse_unless(!f.has("head_dim") || f.integer("head_dim", 1) == C / NH, "head_dim",
                    str("ztrain's head size is hidden_size / num_attention_heads = ", C / NH));
    f.refuse_unless(!f.boolean_or("attention_bias", false), "attention_bias", "ztrain's Llama has no q/k/v/o biases");
    f.refuse_unless(!f.boolean_or("mlp_bias", false), "mlp_bias", "ztrain's Llama has no MLP biases");
    f.refuse_unless(f.text_or("hidden_act", "silu") == "silu", "hidden_act", "ztrain's Llama MLP is SwiGLU (silu)");
    f.refuse_unless(!f.has("sliding_window"), "sliding_window", "ztrain attends over the whole context (null)");
    std::vector<HfSetting> out = {
        {"model.arch", "llama", "model_type"},
        {"model.n_layer", std::to_string(f.integer("num_hidden_layers", 1)), "num_hidden_layers"},
        {"model.n_head", std::to_string(NH), "num_attention_heads"},
        {"model.n_kv_head", std::to_string(NKV), "num_key_value_heads"},
        {"model.n_embd", std::to_string(C), "hidden_size"},
        {"model.ffn_dim", std::to_string(f.integer("intermediate_size", 1)), "intermediate_size"},
        {"model.vocab_size", std::to_string(f.integer("vocab_size", 2)), "vocab_size"},
        // Rotary positions have no table: a shorter training context is the user's choice.
        {"model.seq_len", std::to_string(f.integer("max_position_embeddings", 1)), "max_position_embeddings", false},
        // LlamaConfig's defaults where the file is silent (1e-6, not ztrain's 1e-5; untied).
        {"model.norm_eps", number_text(f.number_or("rms_norm_eps", 1e-6)), "rms_norm_eps"},
        {"model.rope_theta", number_text(f.number_or("rope_theta", 10000.0)), "rope_theta"},
        {"model.tie_embeddings", f.boolean_or("tie_word_embeddings", false) ? "true" : "false", "tie_word_embeddings"},
    };
    if (!f.has("rope_scaling")) {
        out.push_back({"model.rope_scaling", "none", "rope_scaling"});
        return out;
    }
    const nlohmann::json& rs = f.at("rope_scaling");
    ZT_INPUT_CHECK(rs.is_object(), file, ": rope_scaling = ", rs.dump(), ": expected null or an object");
    const HfConfigFields r(rs, file);
    // transformers reads "rope_type", and "type" in older files.
    const std::string type = r.text_or("rope_type", r.text_or("type", "default"));
    ZT_INPUT_CHECK(type == "llama3" || type == "default", file, ": rope_scaling.rope_type = '", type,
                   "': ztrain implements llama3 (and default, no scaling) only");
    if (type == "default") {
        out.push_back({"model.rope_scaling", "none", "rope_scaling.rope_type"});
        return out;
    }
    out.push_back({"model.rope_scaling", "llama3", "rope_scaling.rope_type"});
    out.push_back({"model.rope_factor", number_text(r.number("factor")), "rope_scaling.factor"});
    out.push_back({"model.rope_low_freq_factor", number_text(r.number("low_freq_factor")), "rope_scaling.low_freq_factor"});
    out.push_back(
        {"model.rope_high_freq_factor", number_text(r.number("high_freq_factor")), "rope_scaling.high_freq_factor"});
    out.push_back({"model.rope_original_context", std::to_string(r.integer("original_max_position_embeddings", 1)),
                   "rope_scaling.original_max_position_embeddings"});
    return out;
}

}  // namespace

std::vector<HfSetting> hf_model_settings(const nlohmann::json& config, const std::string& file) {
    ZT_INPUT_CHECK(config.is_object(), file, ": expected a JSON object (a Hugging Face config.json)");
    const HfConfigFields f(config, file);
    const std::string type = f.text_or("model_type", "");
    if (type == "gpt2") return gpt2_settings(f);
    if (type == "llama" || type == "mistral") return llama_settings(f, file);
    throw InputError(str(file, ": model_type = '", type, "': expected llama, mistral (LlamaForCausalLM layout) or gpt2",
                         type == "qwen2" ? " (qwen2 has q/k/v biases, which ztrain's Llama has not)" : ""));
}

void transpose(const float* src, size_t rows, size_t cols, float* dst) {
    constexpr size_t kTile = 32;
    const long long row_tiles = static_cast<long long>((rows + kTile - 1) / kTile);
    #pragma omp parallel for schedule(static)
    for (long long rt = 0; rt < row_tiles; ++rt) {
        const size_t r0 = static_cast<size_t>(rt) * kTile;
        const size_t r1 = std::min(rows, r0 + kTile);
        for (size_t c0 = 0; c0 < cols; c0 += kTile) {
            const size_t c1 = std::min(cols, c0 + kTile);
            for (size_t r = r0; r < r1; ++r) {
                for (size_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
}

}  // namespace zt
