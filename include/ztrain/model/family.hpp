// A model family (model.arch) as one type that answers every question the rest of ztrain
// asks about it: its keys' rules, its parameter count and FLOPs, its pipeline cost per block,
// the banner line, its Hugging Face names and config.json, and (inside model/) its tensors,
// activations and blocks. Families are found through a registry keyed by model.arch
// (family_registry.cpp), so no code outside model/ tests which family it has.
//
// Not here: reading or writing Hugging Face files (ckpt/ does, with these names), the block
// math (src/model/*_block.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {

struct FamilyTraits;     // src/model/model_family.hpp: private to model/
class HfConfigFields;    // src/model/hf_config_fields.hpp: private to model/

/// How a family's tensors are named and laid out in a Hugging Face file.
struct HfNaming {
    std::string architecture;  ///< config.json "architectures": "GPT2LMHeadModel"
    std::string prefix;        ///< prepended to ztrain's names: "transformer." ("" for Llama)
    /// ztrain name suffixes of the matrices Hugging Face stores [in, out] (GPT-2's Conv1D),
    /// the transpose of ztrain's (out, in).
    std::vector<std::string> transposed_suffixes;
    /// Tensors a Hugging Face file may hold that ztrain does not use: exact names (without
    /// the prefix) and name suffixes (buffers such as attention masks).
    std::vector<std::string> ignored_names;
    std::vector<std::string> ignored_suffixes;

    std::string hf_name(const std::string& ztrain_name) const { return prefix + ztrain_name; }
    /// The ztrain name of a file's tensor: the prefix is optional in files.
    std::string ztrain_name(const std::string& file_name) const;
    bool transposed(const std::string& ztrain_name) const;
    bool ignored(const std::string& ztrain_name) const;
    /// The shape a file stores for a tensor of ztrain shape `shape`.
    std::vector<size_t> file_shape(const std::string& ztrain_name, const std::vector<size_t>& shape) const;
};

/// The element-wise ops around a family's block products, as the planner counts another
/// system's kernels for them (eager_block_bytes). Llama's block unless a family says otherwise.
struct BlockOps {
    enum class Norm { kLayerNorm, kRmsNorm };
    enum class Mlp { kGeluTanh, kSwiGlu };  ///< GPT-2's gelu_new; SiLU(gate) times up
    Norm norm = Norm::kRmsNorm;
    Mlp mlp = Mlp::kSwiGlu;
    bool rotary = true;  ///< rotary position embedding on q and k
};

/// One model family. Each is implemented once, in src/model/<name>_family.cpp, and listed in
/// family_registry.cpp.
class Family : public FamilyKeyRules {
  public:
    /// model.arch's value for this family: its name ("gpt2", "llama").
    virtual const char* name() const = 0;
    ModelArch arch() const { return ModelArch(name()); }

    /// The keys only this family reads ("model.ffn_dim", ...), in the order they are checked.
    virtual std::vector<const char*> own_keys() const = 0;
    /// A key of another family keeps its default here ("... applies only to model.arch =
    /// llama"), then this family's own checks (check_own_keys).
    void check_keys(const ModelConfig& m, const SettingCheck& check) const final;

    /// The parameter count from the model's shape (no padding between tensors), in double.
    virtual double parameter_count(const ModelConfig& m) const = 0;
    /// Training FLOPs per token: 6 per parameter (forward + backward) plus attention's
    /// 12 * n_layer * seq_len * n_embd (its two T x T products, forward and backward).
    virtual double flops_per_token(const ModelConfig& m) const;
    /// The weights' part of it: 6 per parameter; under LoRA 4 per frozen base parameter
    /// (its backward has no weight gradient) and 6 per adapter parameter.
    double weight_flops_per_token(const ModelConfig& m) const;
    /// Multiply-adds per token of one block's weight products: the pipeline's block cost.
    virtual double block_product_weights(const ModelConfig& m) const = 0;
    /// The line ztrain prints about the model ("ztrain: ... parameters"), without a newline.
    virtual std::string banner(const ModelConfig& m, double params) const = 0;

    /// Its tensors' names and orientation in Hugging Face files.
    virtual const HfNaming& hf_naming() const = 0;
    /// config.json for a model in `dtype`.
    virtual nlohmann::json hf_config(const ModelConfig& m, DType dtype) const = 0;
    /// The model's dimensions in the safetensors __metadata__ (string values).
    virtual std::vector<std::pair<std::string, std::string>> hf_metadata(const ModelConfig& m) const = 0;
    /// The config.json model_type values this family reads ("llama", "mistral").
    virtual std::vector<std::string> hf_model_types() const = 0;
    /// The model keys a config.json of one of those types determines; refuses, naming `file`
    /// and the field, what this family cannot honour.
    virtual std::vector<HfSetting> hf_settings(const HfConfigFields& fields, const std::string& file) const = 0;
    /// A key hf_config needs besides n_layer, n_head, n_embd, seq_len and vocab_size that `m`
    /// does not record (0 or less), or nullptr.
    virtual const char* missing_hf_key(const ModelConfig& m) const = 0;

    /// PEFT's default target_modules for the family (lora.targets = default): "q_proj,v_proj"
    /// unless the family says otherwise.
    virtual const char* lora_default_targets() const { return "q_proj,v_proj"; }
    /// Its block's element-wise ops (BlockOps).
    virtual BlockOps block_ops() const { return {}; }

    /// Tensors, activations and blocks (model/ only).
    virtual const FamilyTraits& traits() const = 0;

  protected:
    /// This family's own keys' values and relations (check_keys has checked the others').
    virtual void check_own_keys(const ModelConfig& m, const SettingCheck& check) const = 0;
    /// printf's text for `format` (the banner).
    static std::string printf_text(const char* format, ...) __attribute__((format(printf, 1, 2)));
    /// config.json's "torch_dtype" for `dtype`.
    static const char* hf_torch_dtype(DType dtype);
};

/// Every registered family, in registration order.
const std::vector<const Family*>& model_families();
/// The family of model.arch = `arch`; Error naming the value when none is registered (a
/// validated deck's always is).
const Family& model_family(const ModelArch& arch);
inline const Family& model_family(const ModelConfig& m) { return model_family(m.arch); }
/// model_family as config/'s checks take it (FamilyRulesOf): a name no family has is refused
/// through `check` ("model.arch = 'x': expected one of gpt2 | llama").
const FamilyKeyRules& family_key_rules(const ModelArch& arch, const SettingCheck& check);

/// The model keys a Hugging Face config.json determines (config.hpp's HfSetting), by the
/// family that reads its model_type. Refuses, naming `file` and the field, what ztrain cannot
/// honour (another model_type, biases, another activation or RoPE variant, ...).
std::vector<HfSetting> hf_model_settings(const nlohmann::json& config, const std::string& file);

/// Checks every value and the relations between them (config.hpp's validate_deck with the
/// registered families); throws InputError naming the key, the value and what was expected.
void validate(const Config& cfg);
/// The model keys alone, with the same checks and messages: for a model a tool opens without
/// a deck (a Hugging Face directory's config.json).
void validate_model(const Config& cfg);

}  // namespace zt
