// The model record of a checkpoint (model_record.hpp).
#include "model_record.hpp"

#include "ztrain/core/error.hpp"

namespace zt {

namespace {
/// The integer fields of ModelConfig by their key in the record (and in the deck's [model]).
struct IntField {
    const char* key;
    int ModelConfig::*member;
};
constexpr IntField kIntFields[] = {
    {"n_layer", &ModelConfig::n_layer},       {"n_head", &ModelConfig::n_head},
    {"n_embd", &ModelConfig::n_embd},         {"seq_len", &ModelConfig::seq_len},
    {"vocab_size", &ModelConfig::vocab_size}, {"vocab_pad_to", &ModelConfig::vocab_pad_to},
};

/// The Llama fields (added after version 2 appeared) and Mistral's window: absent in older
/// records, where the model is GPT-2 (or Llama) and they keep their defaults.
void llama_fields_to(nlohmann::json& j, const ModelConfig& m) {
    j["arch"] = setting_text(m.arch);
    j["n_kv_head"] = m.n_kv_head;
    j["ffn_dim"] = m.ffn_dim;
    j["rope_theta"] = m.rope_theta;
    j["rope_scaling"] = setting_text(m.rope_scaling);
    j["rope_factor"] = m.rope_factor;
    j["rope_low_freq_factor"] = m.rope_low_freq_factor;
    j["rope_high_freq_factor"] = m.rope_high_freq_factor;
    j["rope_original_context"] = m.rope_original_context;
    j["norm_eps"] = m.norm_eps;
    j["tie_embeddings"] = m.tie_embeddings;
    // The Mistral and Qwen fields only where set, so the records of other families stay as
    // they were.
    if (m.sliding_window != 0) j["sliding_window"] = m.sliding_window;
    if (m.head_dim != 0) j["head_dim"] = m.head_dim;
    if (m.qkv_bias) j["qkv_bias"] = true;
    if (m.qk_norm) j["qk_norm"] = true;
}

void llama_fields_from(const nlohmann::json& j, ModelConfig& m, const std::string& meta_file) {
    // The text fields go through the deck parser's own reading of those keys.
    Config c;
    c.model = m;
    try {
        if (j.contains("arch")) set_config_value(c, "model.arch", j.at("arch").get<std::string>());
        if (j.contains("rope_scaling")) set_config_value(c, "model.rope_scaling", j.at("rope_scaling").get<std::string>());
    } catch (const InputError& e) {
        throw InputError(str(meta_file, ": malformed model record: ", e.what()));
    }
    m = c.model;
    m.n_kv_head = j.value("n_kv_head", m.n_kv_head);
    m.ffn_dim = j.value("ffn_dim", m.ffn_dim);
    m.rope_theta = j.value("rope_theta", m.rope_theta);
    m.rope_factor = j.value("rope_factor", m.rope_factor);
    m.rope_low_freq_factor = j.value("rope_low_freq_factor", m.rope_low_freq_factor);
    m.rope_high_freq_factor = j.value("rope_high_freq_factor", m.rope_high_freq_factor);
    m.rope_original_context = j.value("rope_original_context", m.rope_original_context);
    m.norm_eps = j.value("norm_eps", m.norm_eps);
    m.tie_embeddings = j.value("tie_embeddings", m.tie_embeddings);
    m.sliding_window = j.value("sliding_window", m.sliding_window);  // absent before Mistral: 0
    m.head_dim = j.value("head_dim", m.head_dim);
    m.qkv_bias = j.value("qkv_bias", m.qkv_bias);
    m.qk_norm = j.value("qk_norm", m.qk_norm);
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

/// Version 1: the deck's model (when the checkpoint kept a deck), then the record's fields.
ModelConfig recorded_model_v1(const nlohmann::json& meta, const std::string& meta_file) {
    ModelConfig m;
    const std::string ini = meta.value("config_ini", std::string());
    if (blank(ini)) {
        for (const IntField& f : kIntFields) m.*f.member = -1;
    } else {
        m = parse_deck_text(ini, meta_file + ": config_ini").model;
    }
    const nlohmann::json record = meta.value("model", nlohmann::json::object());
    for (const IntField& f : kIntFields) {
        if (record.contains(f.key)) m.*f.member = record.at(f.key).get<int>();
    }
    return m;
}
}  // namespace

nlohmann::json model_record(const ModelConfig& model) {
    nlohmann::json j = {{"init_from", model.init_from}, {"padded_vocab", model.padded_vocab()}};
    for (const IntField& f : kIntFields) j[f.key] = model.*f.member;
    llama_fields_to(j, model);
    // LoRA's adapters are tensors of the layout: a reader rebuilds it with them.
    // (alpha as the deck writes it: meta_json holds integers and text only.)
    if (model.lora.on()) {
        Config c;
        c.model.lora = model.lora;
        j["lora"] = {{"rank", model.lora.rank},
                     {"alpha", config_value_text(c, "lora.alpha")},
                     {"targets", model.lora.targets}};
    }
    return j;
}

ModelConfig recorded_model(const nlohmann::json& meta, const std::string& meta_file) {
    try {
        if (meta.at("version").get<int>() == 1) return recorded_model_v1(meta, meta_file);
        const nlohmann::json& record = meta.at("model");
        ModelConfig m;
        for (const IntField& f : kIntFields) m.*f.member = record.at(f.key).get<int>();
        m.init_from = record.at("init_from").get<std::string>();
        llama_fields_from(record, m, meta_file);
        if (record.contains("lora")) {
            const nlohmann::json& lora = record.at("lora");
            Config c;
            set_config_value(c, "lora.alpha", lora.at("alpha").get<std::string>());
            m.lora.rank = lora.at("rank").get<int>();
            m.lora.alpha = c.model.lora.alpha;
            m.lora.targets = lora.at("targets").get<std::string>();
        }
        return m;
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(meta_file, ": malformed model record: ", e.what()));
    }
}

}  // namespace zt
