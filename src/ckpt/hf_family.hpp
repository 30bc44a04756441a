// Reading a Hugging Face config.json into model keys, and the transpose export and import
// apply. Each family's names, orientation and config.json are its own (ztrain/model/
// family.hpp: Family::hf_naming, hf_config, hf_metadata). Private to ckpt/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/family.hpp"

namespace zt {

/// The model keys a Hugging Face config.json determines (config.hpp's HfSetting), for
/// model_type gpt2, llama or mistral. Refuses, naming `file` and the field, what ztrain
/// cannot honour (biases, another activation or RoPE variant, a head_dim of its own, ...).
std::vector<HfSetting> hf_model_settings(const nlohmann::json& config, const std::string& file);

/// dst (cols, rows) = transpose of src (rows, cols), both row-major; tiled for the cache.
void transpose(const float* src, size_t rows, size_t cols, float* dst);

}  // namespace zt
