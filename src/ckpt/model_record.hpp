// The model record of a checkpoint's meta_json: written by save_checkpoint, read by
// consolidation and `zt-consolidate --info`. Private to ckpt/.
//
// Version 2 stores every ModelConfig field as JSON data. Version 1 stored a partial record
// (no vocab_pad_to or init_from; none at all before zt-consolidate existed) next to the
// resolved deck (config_ini), so a version 1 model is that deck read by the config parser,
// with the record's fields on top. The deck is never parsed for a version 2 checkpoint.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ztrain/config/config.hpp"

namespace zt {

/// meta_json's `model` for version 2: every ModelConfig field, plus padded_vocab (derived;
/// for people and tools).
nlohmann::json model_record(const ModelConfig& model);

/// The model a checkpoint was written for. In a version 1 checkpoint that records neither a
/// field nor a deck, the integer field is -1 (unknown). Throws InputError naming meta_file
/// for a malformed record or deck.
ModelConfig recorded_model(const nlohmann::json& meta, const std::string& meta_file);

}  // namespace zt
