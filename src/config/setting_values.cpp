// A key's value as text and back: the strict parsing of numbers, booleans and the typed
// settings (dtypes, enums, resume, loss scale, shard group) from a deck's text, and the text
// a value is written as (to_ini, --help, messages).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <system_error>
#include <type_traits>
#include <utility>

#include "key_table.hpp"
#include "ztrain/core/comma_list.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace config_detail {
namespace {

// ---------------------------------------------------------------------------
// Typed settings
// ---------------------------------------------------------------------------

// Typed settings: each parse_setting says what it expected when it rejects the text, in
// the words validate() used when these were strings, so every message stays as it was.
template <class Enum, size_t N>
bool parse_choice(const std::string& s, Enum& out, const std::pair<const char*, Enum> (&names)[N],
                  std::string& expected) {
    for (const auto& [name, value] : names) {
        if (s == name) {
            out = value;
            return true;
        }
    }
    expected = "one of ";
    for (size_t i = 0; i < N; ++i) {
        expected += i == 0 ? names[i].first : std::string(" | ") + names[i].first;
    }
    return false;
}

const std::pair<const char*, RopeScaling> kRopeScalingNames[] = {{"none", RopeScaling::kNone},
                                                                 {"llama3", RopeScaling::kLlama3}};
const std::pair<const char*, DType> kDTypeNames[] = {
    {"fp32", DType::kF32}, {"bf16", DType::kBF16}, {"fp16", DType::kF16}};
const std::pair<const char*, BackendChoice> kBackendNames[] = {
    {"cpu", BackendChoice::kCpu}, {"cuda", BackendChoice::kCuda}, {"auto", BackendChoice::kAuto}};
const std::pair<const char*, LrSchedule> kScheduleNames[] = {
    {"cosine", LrSchedule::kCosine}, {"linear", LrSchedule::kLinear}, {"constant", LrSchedule::kConstant},
    {"wsd", LrSchedule::kWsd}};
const std::pair<const char*, DecayShape> kDecayShapeNames[] = {
    {"linear", DecayShape::kLinear}, {"cosine", DecayShape::kCosine}, {"1-sqrt", DecayShape::kOneMinusSqrt}};
const std::pair<const char*, OptimizerKind> kOptimizerNames[] = {{"adamw", OptimizerKind::kAdamW},
                                                                 {"muon", OptimizerKind::kMuon}};
const std::pair<const char*, MuonLrAdjust> kMuonAdjustNames[] = {{"match_rms_adamw", MuonLrAdjust::kMatchRmsAdamW},
                                                                 {"original", MuonLrAdjust::kOriginal}};
const std::pair<const char*, OnCheckpointError> kOnErrorNames[] = {
    {"stop", OnCheckpointError::kStop}, {"continue", OnCheckpointError::kContinue}};
const std::pair<const char*, MemoryCheck> kMemoryCheckNames[] = {
    {"strict", MemoryCheck::kStrict}, {"warn", MemoryCheck::kWarn}, {"off", MemoryCheck::kOff}};
const std::pair<const char*, OnInputChange> kOnChangeNames[] = {
    {"note", OnInputChange::kNote}, {"error", OnInputChange::kError}};
const std::pair<const char*, DataPacking> kPackingNames[] = {{"pack", DataPacking::kPack}, {"pad", DataPacking::kPad}};
const std::pair<const char*, PipelineSchedule> kPipelineScheduleNames[] = {
    {"1f1b", PipelineSchedule::k1F1B},
    {"interleaved", PipelineSchedule::kInterleaved},
    {"zb", PipelineSchedule::kZeroBubble}};
const std::pair<const char*, SpikePolicy> kSpikeNames[] = {{"off", SpikePolicy::kOff},
                                                           {"rollback", SpikePolicy::kRollback}};
/// train.recompute as written back; read as these or any boolean (parse_setting below).
const std::pair<const char*, ActivationRecompute> kRecomputeNames[] = {{"false", ActivationRecompute::kNone},
                                                                       {"attention", ActivationRecompute::kAttention},
                                                                       {"true", ActivationRecompute::kBlocks}};
const std::pair<const char*, DataOverlong> kOverlongNames[] = {
    {"error", DataOverlong::kError}, {"truncate", DataOverlong::kTruncate}, {"drop", DataOverlong::kDrop}};

template <class Enum, size_t N>
const char* choice_text(Enum v, const std::pair<const char*, Enum> (&names)[N]) {
    for (const auto& [name, value] : names) {
        if (v == value) {
            return name;
        }
    }
    return "?";
}

// The names of each enum-like setting (DType, the enums).
const auto& choice_names(DType) { return kDTypeNames; }
const auto& choice_names(RopeScaling) { return kRopeScalingNames; }
const auto& choice_names(BackendChoice) { return kBackendNames; }
const auto& choice_names(LrSchedule) { return kScheduleNames; }
const auto& choice_names(DecayShape) { return kDecayShapeNames; }
const auto& choice_names(OptimizerKind) { return kOptimizerNames; }
const auto& choice_names(MuonLrAdjust) { return kMuonAdjustNames; }
const auto& choice_names(OnCheckpointError) { return kOnErrorNames; }
const auto& choice_names(MemoryCheck) { return kMemoryCheckNames; }
const auto& choice_names(OnInputChange) { return kOnChangeNames; }
const auto& choice_names(DataPacking) { return kPackingNames; }
const auto& choice_names(PipelineSchedule) { return kPipelineScheduleNames; }
const auto& choice_names(DataOverlong) { return kOverlongNames; }
const auto& choice_names(SpikePolicy) { return kSpikeNames; }

/// An enum-like setting: one of its names.
template <class Enum>
auto parse_setting(const std::string& s, Enum& out, std::string& expected)
    -> decltype(choice_names(out), bool()) {
    return parse_choice(s, out, choice_names(out), expected);
}
bool parse_setting(const std::string& s, std::optional<DType>& out, std::string& expected) {
    if (s.empty()) {  // unset: the working dtype
        out.reset();
        return true;
    }
    DType t = DType::kF32;
    if (!parse_choice(s, t, kDTypeNames, expected)) {
        return false;
    }
    out = t;
    return true;
}
bool parse_bool(const std::string& s, bool& out);
/// train.recompute: a boolean (true: every block, as before the attention-only mode) or
/// "attention".
bool parse_setting(const std::string& s, ActivationRecompute& out, std::string& expected) {
    expected = "false | attention | true (every block)";
    if (s == "attention") {
        out = ActivationRecompute::kAttention;
        return true;
    }
    bool blocks = false;
    if (!parse_bool(s, blocks)) return false;
    out = blocks ? ActivationRecompute::kBlocks : ActivationRecompute::kNone;
    return true;
}
bool parse_setting(const std::string& s, ResumeSetting& out, std::string& expected) {
    expected = "auto | never | PATH of a checkpoint";
    if (s.empty()) {
        return false;
    }
    out.mode = s == "auto" ? ResumeSetting::Mode::kAuto
               : s == "never" ? ResumeSetting::Mode::kNever
                              : ResumeSetting::Mode::kPath;
    out.path = out.mode == ResumeSetting::Mode::kPath ? s : std::string();
    return true;
}
bool parse_setting(const std::string& s, LossScaleSetting& out, std::string& expected) {
    expected = "dynamic, or a number > 0";
    if (s == "dynamic") {
        out = LossScaleSetting{};
        return true;
    }
    char* end = nullptr;
    const double fixed = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !fixed_loss_scale_ok(fixed)) {
        return false;
    }
    out.dynamic = false;
    out.fixed = fixed;
    out.text = s;
    return true;
}

/// model.arch: a family's name (lower-case letters, digits, '_' or '-'); whether a family has
/// it is validation's question (FamilyRulesOf), since model/ holds the families.
bool parse_setting(const std::string& s, ModelArch& out, std::string& expected) {
    expected = "a model family's name (lower-case letters, digits, '_' or '-')";
    const bool name = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (name) out = ModelArch(s);
    return name;
}

bool parse_setting(const std::string& s, ShardGroupSetting& out, std::string& expected) {
    expected = "node, 0 (all ranks) or a number of ranks > 0";
    if (s == "node") {
        out.ranks = -1;
        return true;
    }
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || end == s.c_str() || *end != '\0' || errno != 0 || v < 0 || v > 1 << 24) return false;
    out.ranks = static_cast<int>(v);
    return true;
}

std::string setting_text_of(DType v) { return dtype_name(v); }
std::string setting_text_of(const std::optional<DType>& v) { return v ? dtype_name(*v) : ""; }
template <class T>
std::string setting_text_of(const T& v) { return setting_text(v); }

}  // namespace

bool fixed_loss_scale_ok(double v) { return std::isfinite(v) && v > 0; }

// Shortest %g text that reads back to the same double, so to_ini round-trips exactly
// without printing 0.00029999999999999997 (and prints 0.0003 rather than to_chars' 3e-04).
std::string format_double(double v) {
    char buf[64];
    // Whole numbers as integers ("600", not "6e+02"): a setting's value is read by people.
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.0f", v);
        return buf;
    }
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, v);
        if (std::strtod(buf, nullptr) == v) {
            break;
        }
    }
    return buf;
}

namespace {

struct FormatVisitor {
    std::string operator()(const int* p) const { return std::to_string(*p); }
    std::string operator()(const double* p) const { return format_double(*p); }
    std::string operator()(const std::string* p) const { return *p; }
    std::string operator()(const bool* p) const { return *p ? "true" : "false"; }
    std::string operator()(const uint64_t* p) const { return std::to_string(*p); }
    template <class Setting>
    std::string operator()(const Setting* p) const { return setting_text_of(*p); }
};

}  // namespace

std::string format_value(const KeyDef& k, const Config& cfg) {
    // The accessor wants a mutable Config; it only takes an address, nothing is written.
    return std::visit(FormatVisitor{}, k.field(const_cast<Config&>(cfg)));
}

namespace {

struct TypeNameVisitor {
    const char* operator()(int*) const { return "INT"; }
    const char* operator()(double*) const { return "NUM"; }
    const char* operator()(std::string*) const { return "STR"; }
    const char* operator()(bool*) const { return "BOOL"; }
    const char* operator()(uint64_t*) const { return "UINT"; }
    template <class Setting>
    const char* operator()(Setting*) const { return "STR"; }  // written as text in a deck
};

/// Whether a key's value is text in a deck (quoted in messages, checked for '#').
struct IsTextVisitor {
    bool operator()(int*) const { return false; }
    bool operator()(double*) const { return false; }
    bool operator()(bool*) const { return false; }
    bool operator()(uint64_t*) const { return false; }
    template <class Text>
    bool operator()(Text*) const { return true; }
};

/// Sets a typed setting from its text; false (and what was expected) when it is rejected.
struct ParseSettingVisitor {
    const std::string& text;
    std::string& expected;
    template <class Setting>
    bool operator()(Setting* p) const {
        if constexpr (std::is_same_v<Setting, int> || std::is_same_v<Setting, double> ||
                      std::is_same_v<Setting, bool> || std::is_same_v<Setting, uint64_t> ||
                      std::is_same_v<Setting, std::string>) {
            (void)p;
            return false;  // not a typed setting: assign() handles it
        } else {
            return parse_setting(text, *p, expected);
        }
    }
};

// Strict conversions: the whole text must be consumed, so "4x" or "1e-3junk" is an error
// rather than a silently truncated number.
template <class Integer>
bool parse_integer(const std::string& s, Integer& out) {
    const char* first = s.data();
    const char* last = s.data() + s.size();
    if (first != last && *first == '+') {
        ++first;
    }
    const auto res = std::from_chars(first, last, out);
    return res.ec == std::errc() && res.ptr == last && first != last;
}

bool parse_double(const std::string& s, double& out) {
    if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) {
        return false;
    }
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    // Overflow (ERANGE with a huge result) is rejected; underflow to a tiny value is fine.
    if (end != s.c_str() + s.size() || (errno == ERANGE && std::fabs(v) > 1.0)) {
        return false;
    }
    out = v;
    return true;
}

bool parse_bool(const std::string& s, bool& out) {
    std::string l = s;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == "true" || l == "1" || l == "yes" || l == "on") {
        out = true;
        return true;
    }
    if (l == "false" || l == "0" || l == "no" || l == "off") {
        out = false;
        return true;
    }
    return false;
}

/// Digits after an optional '+' (or '-' when `signed_ok`): an integer, whatever its size.
bool is_whole_number(const std::string& text, bool signed_ok) {
    size_t i = !text.empty() && (text[0] == '+' || (signed_ok && text[0] == '-')) ? 1 : 0;
    if (i == text.size()) return false;
    for (; i < text.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
    }
    return true;
}

}  // namespace

const char* type_name(const FieldRef& ref) { return std::visit(TypeNameVisitor{}, ref); }

bool is_text(const FieldRef& ref) { return std::visit(IsTextVisitor{}, ref); }

void assign(Config& cfg, const KeyDef& k, const std::string& text, const std::string& origin,
            RejectedSettings* rejected) {
    const std::string prefix = origin.empty() ? std::string() : origin + ": ";
    const std::string where = str(prefix, k.key, " = '", text, "' ");
    FieldRef ref = k.field(cfg);
    if (auto* p = std::get_if<int*>(&ref)) {
        int v = 0;
        ZT_INPUT_CHECK(parse_integer(text, v) || !is_whole_number(text, true), where, "is out of range (",
                       std::numeric_limits<int>::min(), " to ", std::numeric_limits<int>::max(), ")");
        ZT_INPUT_CHECK(parse_integer(text, v), where, "is not an integer",
                       (text.find_first_of(".eE") != std::string::npos ? " (no decimal point or exponent)"
                                                                        : ""));
        **p = v;
    } else if (auto* p = std::get_if<double*>(&ref)) {
        double v = 0;
        ZT_INPUT_CHECK(parse_double(text, v), where, "is not a number");
        **p = v;
    } else if (auto* p = std::get_if<bool*>(&ref)) {
        bool v = false;
        ZT_INPUT_CHECK(parse_bool(text, v), where, "is not a boolean (true/false, 1/0, yes/no, on/off)");
        **p = v;
    } else if (auto* p = std::get_if<uint64_t*>(&ref)) {
        uint64_t v = 0;
        ZT_INPUT_CHECK(parse_integer(text, v) || !is_whole_number(text, false), where, "is out of range (0 to ",
                       std::numeric_limits<uint64_t>::max(), ")");
        ZT_INPUT_CHECK(parse_integer(text, v), where, "is not a non-negative integer");
        **p = v;
    } else if (auto* p = std::get_if<std::string*>(&ref)) {
        **p = text;
    } else {
        // Worded as validate() words a rejected value: "<origin>key = 'text': expected ...".
        std::string expected;
        if (std::visit(ParseSettingVisitor{text, expected}, ref)) {
            return;
        }
        if (rejected != nullptr) {
            (*rejected)[k.key] = RejectedText{text, expected};
            return;
        }
        throw InputError(str(prefix, k.key, " = '", text, "': expected ", expected));
    }
}

}  // namespace config_detail

using namespace config_detail;

const char* setting_text(const ModelArch& v) { return v.name().c_str(); }
const char* setting_text(RopeScaling v) { return choice_text(v, choice_names(v)); }
const char* setting_text(BackendChoice v) { return choice_text(v, choice_names(v)); }
const char* setting_text(LrSchedule v) { return choice_text(v, choice_names(v)); }
const char* setting_text(DecayShape v) { return choice_text(v, choice_names(v)); }
const char* setting_text(OptimizerKind v) { return choice_text(v, choice_names(v)); }
const char* setting_text(MuonLrAdjust v) { return choice_text(v, choice_names(v)); }
const char* setting_text(OnCheckpointError v) { return choice_text(v, choice_names(v)); }
const char* setting_text(MemoryCheck v) { return choice_text(v, choice_names(v)); }
const char* setting_text(OnInputChange v) { return choice_text(v, choice_names(v)); }
const char* setting_text(DataPacking v) { return choice_text(v, choice_names(v)); }
const char* setting_text(DataOverlong v) { return choice_text(v, choice_names(v)); }
const char* setting_text(PipelineSchedule v) { return choice_text(v, choice_names(v)); }
const char* setting_text(SpikePolicy v) { return choice_text(v, choice_names(v)); }
const char* setting_text(ActivationRecompute v) { return choice_text(v, kRecomputeNames); }

bool parse_pipeline_layers(const std::string& text, std::vector<int>& out) {
    out.clear();
    for (const std::string& item : split_comma_list(text)) {
        int n = 0;
        if (!parse_integer(item, n) || n < 1) return false;
        out.push_back(n);
    }
    return !out.empty();
}
std::string setting_text(const ResumeSetting& v) {
    switch (v.mode) {
        case ResumeSetting::Mode::kAuto: return "auto";
        case ResumeSetting::Mode::kNever: return "never";
        case ResumeSetting::Mode::kPath: return v.path;
    }
    return "?";
}
std::string setting_text(const LossScaleSetting& v) { return v.text; }
std::string setting_text(const ShardGroupSetting& v) { return v.ranks < 0 ? "node" : std::to_string(v.ranks); }

}  // namespace zt
