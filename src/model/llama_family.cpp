// The Llama family (family.hpp): its keys (grouped-query heads, SwiGLU width, RoPE and its
// llama3 scaling, RMSNorm epsilon, tied head), parameter count, pipeline cost, banner and
// Hugging Face names (LlamaForCausalLM, whose names and orientation ztrain's manifest already
// uses). Its tensors and blocks are llama_block.cpp's llama_traits().
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "llama_family.hpp"

#include "hf_config_fields.hpp"
#include "model_family.hpp"

namespace zt {

double LlamaFamily::parameter_count(const ModelConfig& m) const {
    // Embedding (and an untied head), per block two RMSNorms, q|k|v, o, gate|up and down
    // (and Qwen's q|k|v biases, q and k head norms); the final RMSNorm.
    const double C = m.n_embd;
    const double heads = m.tie_embeddings ? 1 : 2;
    const double q = static_cast<double>(m.n_head) * m.head_size();
    const double options = (m.qkv_bias ? m.qkv_dim() : 0) + (m.qk_norm ? 2.0 * m.head_size() : 0);
    const double block = 2 * C + C * m.qkv_dim() + C * q + 3.0 * m.ffn_dim * C + options;
    return heads * m.padded_vocab() * C + static_cast<double>(m.n_layer) * block + C;
}

std::string LlamaFamily::banner(const ModelConfig& m, double params) const {
    const std::string heads = m.head_dim > 0 ? str(" of ", m.head_dim) : std::string();
    return printf_text(
        "ztrain: %s, %d layers, %d heads%s (%d key/value), %d wide, ffn %d, seq %d, vocab %d (padded %d), "
        "%s head: %.2fM parameters",
        name(), m.n_layer, m.n_head, heads.c_str(), m.kv_heads(), m.n_embd, m.ffn_dim, m.seq_len, m.vocab_size,
        m.padded_vocab(), m.tie_embeddings ? "tied" : "untied", params / 1e6);
}

HfNaming LlamaFamily::llama_naming(const char* architecture) {
    return HfNaming{
        architecture,
        "",
        {},  // HF's nn.Linear is (out, in), as ztrain's matrices
        // A tied model's file may still carry lm_head.weight (HF re-ties it on load; an
        // untied model expects it, so it is never ignored there).
        {"lm_head.weight"},
        {".self_attn.rotary_emb.inv_freq"},  // a buffer older transformers saved
    };
}

const HfNaming& LlamaFamily::hf_naming() const {
    static const HfNaming naming = llama_naming("LlamaForCausalLM");
    return naming;
}

const FamilyTraits& LlamaFamily::traits() const { return llama_traits(); }

/// LlamaConfig as transformers writes it, for the fields LlamaForCausalLM reads.
nlohmann::json LlamaFamily::hf_config(const ModelConfig& m, DType dtype) const {
    nlohmann::json rope_scaling = nullptr;
    if (m.rope_scaling == RopeScaling::kLlama3) {
        rope_scaling = {{"rope_type", "llama3"},
                        {"factor", m.rope_factor},
                        {"low_freq_factor", m.rope_low_freq_factor},
                        {"high_freq_factor", m.rope_high_freq_factor},
                        {"original_max_position_embeddings", m.rope_original_context}};
    }
    return {
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"vocab_size", m.vocab_size},  // unpadded: the padded rows are not exported
        {"hidden_size", m.n_embd},
        {"intermediate_size", m.ffn_dim},
        {"num_hidden_layers", m.n_layer},
        {"num_attention_heads", m.n_head},
        {"num_key_value_heads", m.kv_heads()},
        {"head_dim", m.head_size()},
        {"hidden_act", "silu"},
        {"max_position_embeddings", m.seq_len},
        {"rms_norm_eps", m.norm_eps},
        {"rope_theta", m.rope_theta},
        {"rope_scaling", rope_scaling},
        {"tie_word_embeddings", m.tie_embeddings},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"attention_dropout", 0.0},
        {"initializer_range", 0.02},
        {"pretraining_tp", 1},
        {"use_cache", true},
        // ztrain does not know the tokenizer's special tokens (LlamaConfig's 1 and 2 would be guesses).
        {"bos_token_id", nullptr},
        {"eos_token_id", nullptr},
        {"torch_dtype", hf_torch_dtype(dtype)},
    };
}

namespace {
/// Shortest text that reads back as the same double (the deck parser reads it).
std::string number_text(double v) {
    char buf[40];
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}
}  // namespace

void LlamaFamily::check_hf_heads(const HfConfigFields& f, const std::string& file) {
    const long C = f.integer("hidden_size", 1);
    const long NH = f.integer("num_attention_heads", 1);
    const long NKV = f.integer_or("num_key_value_heads", 1, NH);
    ZT_INPUT_CHECK(C % NH == 0, file, ": hidden_size = ", C, " is not divisible by num_attention_heads = ", NH);
    ZT_INPUT_CHECK(NH % NKV == 0, file, ": num_key_value_heads = ", NKV, " does not divide num_attention_heads = ",
                   NH, " (each key/value head serves num_attention_heads / num_key_value_heads query heads)");
}

std::vector<HfSetting> LlamaFamily::llama_settings(const HfConfigFields& f, const std::string& file) const {
    check_hf_heads(f, file);
    const long C = f.integer("hidden_size", 1);
    const long NH = f.integer("num_attention_heads", 1);
    f.refuse_unless(!f.has("head_dim") || f.integer("head_dim", 1) == C / NH, "head_dim",
                    str("ztrain's head size is hidden_size / num_attention_heads = ", C / NH));
    f.refuse_unless(!f.boolean_or("attention_bias", false), "attention_bias", "ztrain's Llama has no q/k/v/o biases");
    f.refuse_unless(!f.boolean_or("mlp_bias", false), "mlp_bias", "ztrain's Llama has no MLP biases");
    f.refuse_unless(f.text_or("hidden_act", "silu") == "silu", "hidden_act", "ztrain's Llama MLP is SwiGLU (silu)");
    std::vector<HfSetting> out = {{"model.arch", name(), "model_type"}};
    append_block_settings(f, file, out);
    return out;
}

std::vector<HfSetting> LlamaFamily::hf_settings(const HfConfigFields& f, const std::string& file) const {
    f.refuse_unless(!f.has("sliding_window"), "sliding_window",
                    "a Llama attends over the whole context (null; model_type mistral has sliding windows)");
    return llama_settings(f, file);
}

void LlamaFamily::append_block_settings(const HfConfigFields& f, const std::string& file,
                                        std::vector<HfSetting>& out) {
    const long C = f.integer("hidden_size", 1);
    const long NH = f.integer("num_attention_heads", 1);
    const long NKV = f.integer_or("num_key_value_heads", 1, NH);
    const std::vector<HfSetting> block = {
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
        rope_theta_setting(f, file),
        {"model.tie_embeddings", f.boolean_or("tie_word_embeddings", false) ? "true" : "false", "tie_word_embeddings"},
    };
    out.insert(out.end(), block.begin(), block.end());
    const char* group = rope_group(f);
    if (!f.has(group)) {
        out.push_back({"model.rope_scaling", "none", group});
        return;
    }
    const nlohmann::json& rs = f.at(group);
    const HfConfigFields r(rs, file);
    const std::string field = str(group, ".");
    // transformers reads "rope_type", and "type" in older files.
    const std::string type = r.text_or("rope_type", r.text_or("type", "default"));
    ZT_INPUT_CHECK(type == "llama3" || type == "default", file, ": ", field, "rope_type = '", type,
                   "': ztrain implements llama3 (and default, no scaling) only");
    if (type == "default") {
        out.push_back({"model.rope_scaling", "none", field + "rope_type"});
        return;
    }
    out.push_back({"model.rope_scaling", "llama3", field + "rope_type"});
    out.push_back({"model.rope_factor", number_text(r.number("factor")), field + "factor"});
    out.push_back({"model.rope_low_freq_factor", number_text(r.number("low_freq_factor")), field + "low_freq_factor"});
    out.push_back(
        {"model.rope_high_freq_factor", number_text(r.number("high_freq_factor")), field + "high_freq_factor"});
    out.push_back({"model.rope_original_context", std::to_string(r.integer("original_max_position_embeddings", 1)),
                   field + "original_max_position_embeddings"});
}

/// Where RoPE's type and scaling are, as transformers looks: the rope_scaling object of older
/// files, else rope_parameters (what transformers 5 writes). An empty rope_scaling counts as
/// none, as in transformers ("rope_scaling or rope_parameters").
const char* LlamaFamily::rope_group(const HfConfigFields& f) {
    const bool legacy = f.has("rope_scaling") && !(f.at("rope_scaling").is_object() && f.at("rope_scaling").empty());
    return legacy || !f.has("rope_parameters") ? "rope_scaling" : "rope_parameters";
}

/// model.rope_theta: the RoPE object's rope_theta (transformers 5 keeps it there), else the
/// top-level field, else LlamaConfig's default.
HfSetting LlamaFamily::rope_theta_setting(const HfConfigFields& f, const std::string& file) {
    const char* group = rope_group(f);
    if (f.has(group)) {
        const nlohmann::json& rs = f.at(group);
        ZT_INPUT_CHECK(rs.is_object(), file, ": ", group, " = ", rs.dump(), ": expected null or an object");
        const HfConfigFields r(rs, file);
        if (r.has("rope_theta")) {
            return {"model.rope_theta", number_text(r.number("rope_theta")), str(group, ".rope_theta")};
        }
    }
    return {"model.rope_theta", number_text(f.number_or("rope_theta", 10000.0)), "rope_theta"};
}

void LlamaFamily::check_own_keys(const ModelConfig& m, const SettingCheck& v) const {
    v.check_read("model.rope_scaling");
    v.check(m.n_kv_head >= 0, "model.n_kv_head", "an integer >= 1 dividing model.n_head (0: model.n_head)");
    if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0) {
        throw InputError(str(v.origin({"model.n_kv_head", "model.n_head"}), "model.n_kv_head = ", m.n_kv_head,
                             " does not divide model.n_head = ", m.n_head,
                             ": expected a divisor (each key/value head serves n_head / n_kv_head query heads)"));
    }
    if (m.head_size() % 2 != 0) {
        throw InputError(str(v.origin({"model.n_embd", "model.n_head"}), "model.n_embd / model.n_head = ", m.n_embd,
                             " / ", m.n_head, " = ", m.head_size(),
                             " is odd: expected an even head size (rotary embeddings rotate pairs of channels)"));
    }
    if (m.ffn_dim < 1) {  // named with model.arch: setting the arch is what made it required
        throw InputError(str(v.origin({"model.ffn_dim", "model.arch"}), "model.ffn_dim = ", m.ffn_dim,
                             ": expected an integer >= 1 (the SwiGLU hidden width; required for model.arch = llama)"));
    }
    v.check(m.rope_theta > 1, "model.rope_theta", "a number > 1");
    v.check(m.norm_eps > 0, "model.norm_eps", "a number > 0");
    check_rope_scaling(m, v);
}

/// The llama3 scaling keys: their defaults without it, their values and relations with it.
void LlamaFamily::check_rope_scaling(const ModelConfig& m, const SettingCheck& v) {
    if (m.rope_scaling == RopeScaling::kNone) {
        if (const char* key = v.first_not_default({"model.rope_factor", "model.rope_low_freq_factor",
                                                   "model.rope_high_freq_factor", "model.rope_original_context"})) {
            throw InputError(str(v.origin({key, "model.rope_scaling"}), key, " = ", v.value(key),
                                 " applies only to model.rope_scaling = llama3 (it is none): remove it, or set "
                                 "model.rope_scaling = llama3"));
        }
        return;
    }
    v.check(m.rope_factor > 0, "model.rope_factor", "a number > 0");
    v.check(m.rope_low_freq_factor > 0, "model.rope_low_freq_factor", "a number > 0");
    if (m.rope_high_freq_factor <= m.rope_low_freq_factor) {
        throw InputError(str(v.origin({"model.rope_high_freq_factor", "model.rope_low_freq_factor"}),
                             "model.rope_high_freq_factor = ", v.value("model.rope_high_freq_factor"),
                             " is not above model.rope_low_freq_factor = ", v.value("model.rope_low_freq_factor"),
                             ": expected high_freq_factor > low_freq_factor > 0"));
    }
    v.check_int_min("model.rope_original_context", m.rope_original_context, 1);
}

const Family& llama_family() {
    static const LlamaFamily family;
    return family;
}

}  // namespace zt
