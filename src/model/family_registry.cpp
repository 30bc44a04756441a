// The family registry (family.hpp): every model family, keyed by model.arch, and what all
// families share: the Hugging Face name rules, the keys of other families keeping their
// defaults, the FLOPs formula and the whole-deck validate().
//
// Adding a family: its file (src/model/<name>_family.cpp) and one line in kFamilies below.
#include "ztrain/model/family.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "hf_config_fields.hpp"
#include "lora_adapters.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

const Family& gpt2_family();
const Family& llama_family();
const Family& mistral_family();
const Family& qwen2_family();
const Family& qwen3_family();

namespace {

/// The registry: one line per family.
constexpr const Family& (*kFamilies[])() = {
    gpt2_family,
    llama_family,
    mistral_family,
    qwen2_family,
    qwen3_family,
};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool owns(const Family& f, const char* key) {
    const std::vector<const char*> own = f.own_keys();
    return std::any_of(own.begin(), own.end(), [&](const char* k) { return std::string(k) == key; });
}

}  // namespace

std::string HfNaming::ztrain_name(const std::string& file_name) const {
    return file_name.rfind(prefix, 0) == 0 ? file_name.substr(prefix.size()) : file_name;
}

bool HfNaming::transposed(const std::string& ztrain_name) const {
    return std::any_of(transposed_suffixes.begin(), transposed_suffixes.end(),
                       [&](const std::string& s) { return ends_with(ztrain_name, s); });
}

bool HfNaming::ignored(const std::string& ztrain_name) const {
    return std::find(ignored_names.begin(), ignored_names.end(), ztrain_name) != ignored_names.end() ||
           std::any_of(ignored_suffixes.begin(), ignored_suffixes.end(),
                       [&](const std::string& s) { return ends_with(ztrain_name, s); });
}

std::vector<size_t> HfNaming::file_shape(const std::string& ztrain_name, const std::vector<size_t>& shape) const {
    if (transposed(ztrain_name) && shape.size() == 2) return {shape[1], shape[0]};
    return shape;
}

void Family::check_keys(const ModelConfig& m, const SettingCheck& check) const {
    // Another family's key with a value here would be silently ignored: refused, naming the
    // family that reads it. A text its type refused is reported as such first.
    std::vector<std::pair<const char*, const Family*>> foreign;
    for (const Family* f : model_families()) {
        if (f == this) continue;
        for (const char* key : f->own_keys()) {
            if (!owns(*this, key)) foreign.push_back({key, f});
        }
    }
    for (const auto& [key, owner] : foreign) check.check_read(key);
    for (const auto& [key, owner] : foreign) {
        if (check.first_not_default({key}) == nullptr) continue;
        throw InputError(str(check.origin({key, "model.arch"}), key, " = ", check.value(key),
                             " applies only to model.arch = ", owner->name(), " (model.arch is ", name(),
                             "): remove it, or set model.arch = ", owner->name()));
    }
    check_own_keys(m, check);
    if (m.lora.on()) {
        // The family's tensors without adapters: the products the names must match.
        ModelConfig base = m;
        base.lora.rank = 0;
        ModelLayout layout = make_model_layout(base);
        layout.model.lora = m.lora;
        check.check(lora_targets_problem(layout).empty(), "lora.targets", lora_targets_problem(layout));
    }
}

std::string Family::printf_text(const char* format, ...) {
    va_list args;
    va_start(args, format);
    va_list again;
    va_copy(again, args);
    const int n = std::vsnprintf(nullptr, 0, format, args);
    va_end(args);
    std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
    std::vsnprintf(out.data(), out.size(), format, again);
    va_end(again);
    out.resize(out.size() - 1);
    return out;
}

const char* Family::hf_torch_dtype(DType dtype) {
    return dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
}

double Family::weight_flops_per_token(const ModelConfig& m) const {
    if (!m.lora.on()) return 6 * parameter_count(m);
    double adapters = 0;
    for (const ParamSpec& p : make_model_layout(m).params) adapters += p.adapter ? static_cast<double>(p.numel) : 0;
    return 4 * parameter_count(m) + 6 * adapters;
}

double Family::flops_per_token(const ModelConfig& m) const {
    // The query heads' width: n_embd, or n_head head_dim (Qwen3), whatever the key/value heads.
    return weight_flops_per_token(m) + 12.0 * m.n_layer * m.seq_len * (m.n_head * m.head_size());
}

const std::vector<const Family*>& model_families() {
    static const std::vector<const Family*> families = [] {
        std::vector<const Family*> out;
        for (const auto family : kFamilies) out.push_back(&family());
        return out;
    }();
    return families;
}

namespace {

const Family* find_family(const ModelArch& arch) {
    for (const Family* f : model_families()) {
        if (arch.name() == f->name()) return f;
    }
    return nullptr;
}

/// The registered families' names: "gpt2 | llama" (with `separator` " | ").
std::string family_names(const char* separator) {
    std::string names;
    for (const Family* f : model_families()) names += str(names.empty() ? "" : separator, f->name());
    return names;
}

/// config.json's architectures, where given, name a causal language model (...ForCausalLM,
/// GPT-2's ...LMHeadModel) or a bare base model (...Model: a missing head the weight check
/// names); another head (...ForSequenceClassification, ...) is not what ztrain trains.
void check_architectures(const HfConfigFields& f, const std::string& file) {
    if (!f.has("architectures")) return;
    const nlohmann::json& names = f.at("architectures");
    for (const nlohmann::json& n : names.is_array() ? names : nlohmann::json::array({names})) {
        const std::string name = n.is_string() ? n.get<std::string>() : "";
        ZT_INPUT_CHECK(ends_with(name, "ForCausalLM") || ends_with(name, "Model"), file,
                       ": architectures = ", names.dump(),
                       ": ztrain trains causal language models (a class ending in ForCausalLM or LMHeadModel)");
    }
}

}  // namespace

const Family& model_family(const ModelArch& arch) {
    const Family* f = find_family(arch);
    if (f == nullptr) {
        throw Error(str("model.arch '", arch.name(), "' has no model family: none is registered for it (",
                        family_names(", "), " are; src/model/family_registry.cpp)"));
    }
    return *f;
}

const FamilyKeyRules& family_key_rules(const ModelArch& arch, const SettingCheck& check) {
    check.check(find_family(arch) != nullptr, "model.arch", str("one of ", family_names(" | ")));
    return model_family(arch);
}

std::vector<HfSetting> hf_model_settings(const nlohmann::json& config, const std::string& file) {
    ZT_INPUT_CHECK(config.is_object(), file, ": expected a JSON object (a Hugging Face config.json)");
    const HfConfigFields f(config, file);
    check_architectures(f, file);
    const std::string type = f.text_or("model_type", "");
    std::string known;
    for (const Family* family : model_families()) {
        const std::vector<std::string> types = family->hf_model_types();
        if (std::find(types.begin(), types.end(), type) != types.end()) return family->hf_settings(f, file);
        for (const std::string& t : types) known += str(known.empty() ? "" : ", ", t, " (", family->name(), ")");
    }
    throw InputError(str(file, ": model_type = '", type, "': expected one of ", known));
}

void validate(const Config& cfg) { validate_deck(cfg, family_key_rules); }
void validate_model(const Config& cfg) { validate_model_keys(cfg, family_key_rules); }

}  // namespace zt
