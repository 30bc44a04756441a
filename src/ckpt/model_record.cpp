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
    return j;
}

ModelConfig recorded_model(const nlohmann::json& meta, const std::string& meta_file) {
    try {
        if (meta.at("version").get<int>() == 1) return recorded_model_v1(meta, meta_file);
        const nlohmann::json& record = meta.at("model");
        ModelConfig m;
        for (const IntField& f : kIntFields) m.*f.member = record.at(f.key).get<int>();
        m.init_from = record.at("init_from").get<std::string>();
        return m;
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(meta_file, ": malformed model record: ", e.what()));
    }
}

}  // namespace zt
