// Hugging Face naming and layout per model family: what a tensor is called in a Hugging Face
// file, which matrices it stores transposed, what else such a file may hold, and its
// config.json. Export and import look the family up here instead of branching on it, so a
// new family (Llama) is one more HfFamily. Private to ckpt/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {

struct HfFamily {
    std::string architecture;   ///< config.json "architectures": "GPT2LMHeadModel"
    std::string prefix;         ///< prepended to ztrain's names: "transformer." ("" for Llama)
    /// ztrain name suffixes of the matrices Hugging Face stores [in, out] (GPT-2's Conv1D),
    /// the transpose of ztrain's (out, in).
    std::vector<std::string> transposed_suffixes;
    /// Tensors a Hugging Face file may hold that ztrain does not use: exact names (without
    /// the prefix) and name suffixes (buffers such as attention masks).
    std::vector<std::string> ignored_names;
    std::vector<std::string> ignored_suffixes;
    /// config.json for a model in `dtype`.
    nlohmann::json (*config_json)(const ModelConfig& model, DType dtype);
    /// The model's dimensions in the safetensors __metadata__ (string values).
    std::vector<std::pair<std::string, std::string>> (*metadata)(const ModelConfig& model);

    std::string hf_name(const std::string& ztrain_name) const { return prefix + ztrain_name; }
    /// The ztrain name of a file's tensor: the prefix is optional in files.
    std::string ztrain_name(const std::string& file_name) const;
    bool transposed(const std::string& ztrain_name) const;
    bool ignored(const std::string& ztrain_name) const;
    /// The shape a file stores for a tensor of ztrain shape `shape`.
    std::vector<size_t> file_shape(const std::string& ztrain_name, const std::vector<size_t>& shape) const;
};

/// GPT-2 (GPT2LMHeadModel).
const HfFamily& gpt2_family();
/// Llama (LlamaForCausalLM): ztrain's manifest already uses its names and orientation.
const HfFamily& llama_family();
/// The family of model.arch.
const HfFamily& hf_family(const ModelConfig& model);

/// The model keys a Hugging Face config.json determines (config.hpp's HfSetting), for
/// model_type gpt2, llama or mistral. Refuses, naming `file` and the field, what ztrain
/// cannot honour (biases, another activation or RoPE variant, a head_dim of its own, ...).
std::vector<HfSetting> hf_model_settings(const nlohmann::json& config, const std::string& file);

/// dst (cols, rows) = transpose of src (rows, cols), both row-major; tiled for the cache.
void transpose(const float* src, size_t rows, size_t cols, float* dst);

}  // namespace zt
