// The run configuration: the key table, the INI deck + command-line parser, validation,
// `ztrain --help` and the resolved-config dump (to_ini).
//
// One table (kKeys) names every key, where it lives in Config, and what it means. Defaults
// are not repeated here: they are read from a default-constructed Config, so the struct in
// config.hpp stays the single source of defaults.
//
// Boost.Program_options does the tokenising (INI sections, --key=value / --key value) and
// the "first stored value wins" precedence. Every key is registered as a string and
// converted here, strictly, because Boost's own conversion errors name neither the value nor
// its source well enough for an exit-2 message. Deliberately not done here: anything that
// touches the file system beyond reading the deck (shard globs, run directories, resume
// paths are checked by the components that use them), and anything needing MPI.
#include "ztrain/config/config.hpp"

#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <system_error>
#include <type_traits>
#include <variant>

namespace po = boost::program_options;

namespace zt {
namespace {

// ---------------------------------------------------------------------------
// The key table
// ---------------------------------------------------------------------------

// Typed settings (DType, the enums, resume, loss scale) are read from and written as text
// by parse_setting / setting_text below; to --help they are strings ("STR").
using FieldRef = std::variant<int*, double*, std::string*, bool*, uint64_t*, DType*, std::optional<DType>*,
                              BackendChoice*, LrSchedule*, ResumeSetting*, OnCheckpointError*, LossScaleSetting*,
                              MemoryCheck*, ModelArch*, RopeScaling*, ShardGroupSetting*>;

struct KeyDef {
    const char* key;               ///< "section.key", or a bare top-level key
    FieldRef (*field)(Config&);    ///< where the value lives in a Config
    const char* doc;               ///< one line for --help and the dumped deck
};

// A capture-less lambda converts to the plain function pointer KeyDef wants.
#define ZT_KEY(name, member, doc) \
    KeyDef { name, [](Config& c) -> FieldRef { return &c.member; }, doc }

const KeyDef kKeys[] = {
    ZT_KEY("backend", backend, "compute backend: cpu | cuda | auto"),

    ZT_KEY("model.arch", model.arch, "transformer family: gpt2 | llama"),
    ZT_KEY("model.n_layer", model.n_layer, "number of transformer blocks"),
    ZT_KEY("model.n_head", model.n_head, "attention heads per block (must divide n_embd)"),
    ZT_KEY("model.n_embd", model.n_embd, "embedding / residual width"),
    ZT_KEY("model.seq_len", model.seq_len, "maximum sequence length (learned positions)"),
    ZT_KEY("model.vocab_size", model.vocab_size, "vocabulary size (tokens the data may contain)"),
    ZT_KEY("model.vocab_pad_to", model.vocab_pad_to, "embedding rows are padded to a multiple of this"),
    ZT_KEY("model.init_from", model.init_from,
           "optional weights to start from: .h5, .safetensors or a Hugging Face model directory"),
    ZT_KEY("model.from_hf", model.from_hf,
           "Hugging Face model directory: its config.json sets the model keys and init_from (explicit keys "
           "must agree; model.seq_len may be shorter)"),
    ZT_KEY("model.n_kv_head", model.n_kv_head,
           "llama: key/value heads of grouped-query attention, dividing n_head (0: n_head)"),
    ZT_KEY("model.ffn_dim", model.ffn_dim, "llama: SwiGLU hidden width (HF intermediate_size; required)"),
    ZT_KEY("model.rope_theta", model.rope_theta, "llama: rotary embedding base (HF rope_theta)"),
    ZT_KEY("model.rope_scaling", model.rope_scaling, "llama: rotary frequency scaling: none | llama3"),
    ZT_KEY("model.rope_factor", model.rope_factor, "llama, rope_scaling = llama3: factor"),
    ZT_KEY("model.rope_low_freq_factor", model.rope_low_freq_factor, "llama, rope_scaling = llama3: low_freq_factor"),
    ZT_KEY("model.rope_high_freq_factor", model.rope_high_freq_factor,
           "llama, rope_scaling = llama3: high_freq_factor"),
    ZT_KEY("model.rope_original_context", model.rope_original_context,
           "llama, rope_scaling = llama3: original_max_position_embeddings"),
    ZT_KEY("model.norm_eps", model.norm_eps, "llama: RMSNorm epsilon (HF rms_norm_eps)"),
    ZT_KEY("model.tie_embeddings", model.tie_embeddings,
           "llama: LM head shares the token embedding (false: a separate lm_head.weight)"),

    ZT_KEY("data.train", data.train, "training token shards: file or glob (required; see zt-prepare)"),
    ZT_KEY("data.val", data.val, "validation token shards: file or glob (empty: no evaluation)"),
    ZT_KEY("data.tokenizer", data.tokenizer, "tokenizer file (empty: tokenizer.json next to the train shards)"),

    ZT_KEY("train.micro_batch", train.micro_batch, "sequences per rank per micro-step"),
    ZT_KEY("train.grad_accum", train.grad_accum, "micro-steps accumulated per optimizer step"),
    ZT_KEY("train.max_steps", train.max_steps, "optimizer steps to run"),
    ZT_KEY("train.lr", train.lr, "peak learning rate"),
    ZT_KEY("train.lr_min", train.lr_min, "final learning rate of the decay schedule"),
    ZT_KEY("train.warmup_steps", train.warmup_steps, "linear warmup steps"),
    ZT_KEY("train.schedule", train.schedule, "learning-rate decay: cosine | linear | constant"),
    ZT_KEY("train.schedule_steps", train.schedule_steps,
           "steps the decay spans, then lr_min holds (0: train.max_steps)"),
    ZT_KEY("train.weight_decay", train.weight_decay, "AdamW decoupled weight decay"),
    ZT_KEY("train.beta1", train.beta1, "AdamW first-moment decay, in [0, 1)"),
    ZT_KEY("train.beta2", train.beta2, "AdamW second-moment decay, in [0, 1)"),
    ZT_KEY("train.eps", train.eps, "AdamW epsilon"),
    ZT_KEY("train.grad_clip", train.grad_clip, "global gradient-norm clip (0 disables)"),
    ZT_KEY("train.seed", train.seed, "random seed (initialisation, data order, sampling)"),
    ZT_KEY("train.eval_every", train.eval_every, "steps between evaluations (0: only at the end)"),
    ZT_KEY("train.eval_batches", train.eval_batches, "micro-batches per evaluation"),
    ZT_KEY("train.sample_tokens", train.sample_tokens, "tokens sampled at each evaluation (0 disables)"),
    ZT_KEY("train.log_every", train.log_every, "steps between log lines"),
    ZT_KEY("train.threads", train.threads, "CPU threads per rank (0: cores / local ranks)"),
    ZT_KEY("train.recompute", train.recompute, "recompute activations in backward to save memory"),
    ZT_KEY("train.max_bad_steps", train.max_bad_steps,
           "consecutive steps with non-finite gradients (skipped) before a bf16, fp32 or static-scale fp16 "
           "run stops"),

    ZT_KEY("parallel.zero_stage", parallel.zero_stage, "0 = DDP, 1/2/3 = ZeRO stage"),
    ZT_KEY("parallel.bucket_mb", parallel.bucket_mb, "DDP gradient all-reduce bucket size (MiB; fractions allowed)"),
    ZT_KEY("parallel.shard_group", parallel.shard_group,
           "ranks that shard the model state together (ZeRO 1-3; groups replicate each other): node | 0 (all "
           "ranks) | N dividing the world"),
    ZT_KEY("parallel.timeout_s", parallel.timeout_s,
           "seconds one collective may wait before the job is aborted with a message (0: never)"),

    ZT_KEY("precision.dtype", precision.dtype,
           "working dtype of parameters, activations and gradients: fp32 | bf16 | fp16 (master weights "
           "and AdamW state stay fp32)"),
    ZT_KEY("precision.reduce_dtype", precision.reduce_dtype,
           "dtype gradients are reduced in across ranks: fp32 | bf16 | fp16 (empty: the working dtype)"),
    ZT_KEY("precision.loss_scale", precision.loss_scale,
           "fp16 loss scaling: dynamic, or a fixed number > 0 (1 = no scaling)"),
    ZT_KEY("precision.init_scale", precision.init_scale, "fp16 dynamic loss scale: initial value"),
    ZT_KEY("precision.growth_interval", precision.growth_interval,
           "fp16 dynamic loss scale: clean steps before it doubles"),
    ZT_KEY("precision.hysteresis", precision.hysteresis,
           "fp16 dynamic loss scale: it halves at the hysteresis-th overflow since its last change (2: the first "
           "overflow is absorbed, the second halves it; 1: every overflow halves it)"),
    ZT_KEY("precision.min_scale", precision.min_scale,
           "fp16 dynamic loss scale: floor; there the overflow that would halve it stops the run (with "
           "hysteresis 2: the first is absorbed, the second stops)"),

    ZT_KEY("checkpoint.dir", checkpoint.dir, "checkpoint directory (empty: <run.dir>/checkpoints)"),
    ZT_KEY("checkpoint.every", checkpoint.every, "steps between checkpoints (0: only at the end)"),
    ZT_KEY("checkpoint.keep", checkpoint.keep, "checkpoints kept on disk"),
    ZT_KEY("checkpoint.resume", checkpoint.resume, "auto | never | PATH of a checkpoint"),
    ZT_KEY("checkpoint.on_error", checkpoint.on_error,
           "when a save fails (disk full, ...): stop (exit 1) | continue (warn and train on); the previous "
           "checkpoint stays intact either way"),
    ZT_KEY("checkpoint.async", checkpoint.async,
           "true: training blocks only while the state is copied to a host snapshot, and a background thread "
           "writes the checkpoint beside the next steps | false: training waits for the whole write"),
    ZT_KEY("checkpoint.async_spread", checkpoint.async_spread,
           "async saves: spread the background write over this fraction of the expected time until the next "
           "save (checkpoint.every x the recent median step time, or the steps left), so it slows the steps less; "
           "a stop signal, the next save or the end of training makes it hurry. In [0, 1); 0: at full speed"),

    ZT_KEY("run.dir", run.dir, "run directory (logs, resolved config, checkpoints)"),
    ZT_KEY("run.memory_check", run.memory_check,
           "a run whose predicted memory does not fit: strict (refused, exit 2) | warn | off"),
};

#undef ZT_KEY

const KeyDef* find_key(const std::string& key) {
    for (const KeyDef& k : kKeys) {
        if (key == k.key) {
            return &k;
        }
    }
    return nullptr;
}

std::string section_of(const std::string& key) {
    const auto dot = key.find('.');
    return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

std::string leaf_of(const std::string& key) {
    const auto dot = key.find('.');
    return dot == std::string::npos ? key : key.substr(dot + 1);
}

// ---------------------------------------------------------------------------
// Values <-> text
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

const std::pair<const char*, ModelArch> kArchNames[] = {{"gpt2", ModelArch::kGpt2}, {"llama", ModelArch::kLlama}};
const std::pair<const char*, RopeScaling> kRopeScalingNames[] = {{"none", RopeScaling::kNone},
                                                                 {"llama3", RopeScaling::kLlama3}};
const std::pair<const char*, DType> kDTypeNames[] = {
    {"fp32", DType::kF32}, {"bf16", DType::kBF16}, {"fp16", DType::kF16}};
const std::pair<const char*, BackendChoice> kBackendNames[] = {
    {"cpu", BackendChoice::kCpu}, {"cuda", BackendChoice::kCuda}, {"auto", BackendChoice::kAuto}};
const std::pair<const char*, LrSchedule> kScheduleNames[] = {
    {"cosine", LrSchedule::kCosine}, {"linear", LrSchedule::kLinear}, {"constant", LrSchedule::kConstant}};
const std::pair<const char*, OnCheckpointError> kOnErrorNames[] = {
    {"stop", OnCheckpointError::kStop}, {"continue", OnCheckpointError::kContinue}};
const std::pair<const char*, MemoryCheck> kMemoryCheckNames[] = {
    {"strict", MemoryCheck::kStrict}, {"warn", MemoryCheck::kWarn}, {"off", MemoryCheck::kOff}};

template <class Enum, size_t N>
const char* choice_text(Enum v, const std::pair<const char*, Enum> (&names)[N]) {
    for (const auto& [name, value] : names) {
        if (v == value) {
            return name;
        }
    }
    return "?";
}

bool parse_setting(const std::string& s, DType& out, std::string& expected) {
    return parse_choice(s, out, kDTypeNames, expected);
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
bool parse_setting(const std::string& s, ModelArch& out, std::string& expected) {
    return parse_choice(s, out, kArchNames, expected);
}
bool parse_setting(const std::string& s, RopeScaling& out, std::string& expected) {
    return parse_choice(s, out, kRopeScalingNames, expected);
}
bool parse_setting(const std::string& s, BackendChoice& out, std::string& expected) {
    return parse_choice(s, out, kBackendNames, expected);
}
bool parse_setting(const std::string& s, LrSchedule& out, std::string& expected) {
    return parse_choice(s, out, kScheduleNames, expected);
}
bool parse_setting(const std::string& s, OnCheckpointError& out, std::string& expected) {
    return parse_choice(s, out, kOnErrorNames, expected);
}
bool parse_setting(const std::string& s, MemoryCheck& out, std::string& expected) {
    return parse_choice(s, out, kMemoryCheckNames, expected);
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
bool fixed_loss_scale_ok(double v) { return std::isfinite(v) && v > 0; }
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

struct FormatVisitor {
    std::string operator()(const int* p) const { return std::to_string(*p); }
    std::string operator()(const double* p) const { return format_double(*p); }
    std::string operator()(const std::string* p) const { return *p; }
    std::string operator()(const bool* p) const { return *p ? "true" : "false"; }
    std::string operator()(const uint64_t* p) const { return std::to_string(*p); }
    template <class Setting>
    std::string operator()(const Setting* p) const { return setting_text_of(*p); }
};

std::string format_value(const KeyDef& k, const Config& cfg) {
    // The accessor wants a mutable Config; it only takes an address, nothing is written.
    return std::visit(FormatVisitor{}, k.field(const_cast<Config&>(cfg)));
}

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
bool parse_int(const std::string& s, int& out) {
    const char* first = s.data();
    const char* last = s.data() + s.size();
    if (first != last && *first == '+') {
        ++first;
    }
    const auto res = std::from_chars(first, last, out);
    return res.ec == std::errc() && res.ptr == last && first != last;
}

bool parse_uint64(const std::string& s, uint64_t& out) {
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

/// A typed setting's text that its parser refused, and what it expected instead.
struct RejectedText {
    std::string text;
    std::string expected;
};
/// Keyed by the key. parse_command_line reports these where validate() reported them when
/// they were strings, so a deck with several bad values names the same one first as before.
using RejectedSettings = std::map<std::string, RejectedText>;

/// Sets one key from its text; `origin` is the deck file name or "command line". A typed
/// setting that refuses its text is recorded in `*rejected` when given, else thrown.
void assign(Config& cfg, const KeyDef& k, const std::string& text, const std::string& origin,
            RejectedSettings* rejected = nullptr) {
    const std::string prefix = origin.empty() ? std::string() : origin + ": ";
    const std::string where = str(prefix, k.key, " = '", text, "' ");
    FieldRef ref = k.field(cfg);
    if (auto* p = std::get_if<int*>(&ref)) {
        int v = 0;
        ZT_INPUT_CHECK(parse_int(text, v), where, "is not an integer",
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
        ZT_INPUT_CHECK(parse_uint64(text, v), where, "is not a non-negative integer");
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

// ---------------------------------------------------------------------------
// Suggestions for unknown keys
// ---------------------------------------------------------------------------

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1);
    std::vector<size_t> cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) {
        prev[j] = j;
    }
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

/// The registered key the user most likely meant, or "" when nothing is close.
std::string nearest_key(const std::string& unknown) {
    // A right key in the wrong section ("train.n_layer", or a bare "n_layer") is the
    // commonest slip; edit distance would rank it poorly, so check it first.
    const std::string leaf = leaf_of(unknown);
    for (const KeyDef& k : kKeys) {
        if (leaf == leaf_of(k.key)) {
            return k.key;
        }
    }
    std::string best;
    size_t best_d = std::max<size_t>(2, unknown.size() / 4) + 1;
    for (const KeyDef& k : kKeys) {
        const size_t d = edit_distance(unknown, k.key);
        if (d < best_d) {
            best_d = d;
            best = k.key;
        }
    }
    return best;
}

std::string suggestion(const std::string& unknown, const char* prefix) {
    const std::string near = nearest_key(unknown);
    return near.empty() ? std::string() : str(" (did you mean '", prefix, near, "'?)");
}

std::string strip_option_token(std::string token) {
    const auto eq = token.find('=');
    if (eq != std::string::npos) {
        token.resize(eq);
    }
    const auto first = token.find_first_not_of('-');
    return first == std::string::npos ? token : token.substr(first);
}

// ---------------------------------------------------------------------------
// Reading the deck and the command line
// ---------------------------------------------------------------------------

po::options_description settings_description() {
    po::options_description desc("settings");
    for (const KeyDef& k : kKeys) {
        desc.add_options()(k.key, po::value<std::string>(), k.doc);
    }
    return desc;
}

/// Line numbers of each key in an INI file, scanned the way Boost reads it (comments from
/// '#', [section] prefixes). Only used to make duplicate-key messages point at lines.
std::map<std::string, std::vector<int>> scan_key_lines(const std::string& text) {
    std::map<std::string, std::vector<int>> lines;
    std::istringstream in(text);
    std::string line;
    std::string prefix;
    int number = 0;
    const auto trim = [](const std::string& s) {
        const auto b = s.find_first_not_of(" \t\r");
        const auto e = s.find_last_not_of(" \t\r");
        return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    while (std::getline(in, line)) {
        ++number;
        const auto hash = line.find('#');
        line = trim(hash == std::string::npos ? line : line.substr(0, hash));
        if (line.empty()) {
            continue;
        }
        if (line.front() == '[' && line.back() == ']') {
            prefix = trim(line.substr(1, line.size() - 2));
            prefix = prefix.empty() ? std::string() : prefix + ".";
            continue;
        }
        const auto eq = line.find('=');
        if (eq != std::string::npos) {
            lines[prefix + trim(line.substr(0, eq))].push_back(number);
        }
    }
    return lines;
}

std::string read_deck(const std::string& path) {
    struct stat st {};
    const bool is_dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    std::ifstream in(path, std::ios::binary);
    ZT_INPUT_CHECK(in && !is_dir, "--config: cannot read '", path, "'",
                   (is_dir ? " (it is a directory)" : " (no such file, or no permission)"));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// "path:N" for the first line of `text` whose content (comment and blanks trimmed) is
/// `content`, or just "path" when none is (Boost's syntax errors name the line's text only).
std::string at_line(const std::string& path, const std::string& text, const std::string& content) {
    std::istringstream in(text);
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        const auto hash = line.find('#');
        line = hash == std::string::npos ? line : line.substr(0, hash);
        const auto b = line.find_first_not_of(" \t\r");
        const auto e = line.find_last_not_of(" \t\r");
        if (b != std::string::npos && line.substr(b, e - b + 1) == content) return str(path, ":", number);
    }
    return path;
}

po::parsed_options parse_deck(const std::string& path, const std::string& text,
                              const po::options_description& desc) {
    std::istringstream in(text);
    try {
        return po::parse_config_file(in, desc, /*allow_unregistered=*/false);
    } catch (const po::unknown_option& e) {
        const std::string key = e.get_option_name();
        const auto lines = scan_key_lines(text);
        const auto it = lines.find(key);
        const std::string where = it != lines.end() ? str(path, ":", it->second.front()) : path;
        throw InputError(str(where, ": unknown key '", key, "'", suggestion(key, "")));
    } catch (const po::invalid_config_file_syntax& e) {
        throw InputError(str(at_line(path, text, e.tokens()), ": cannot parse line '", e.tokens(),
                             "' (expected 'key = value', '[section]' or a '#' comment)"));
    } catch (const po::error& e) {
        throw InputError(str(path, ": ", e.what()));
    }
}

/// Rejects a key given twice in one source: Boost would keep one silently (or throw a
/// message without the file), and a deck that says two things is almost always a mistake.
void check_duplicates(const po::parsed_options& parsed, const std::string& origin,
                      const std::map<std::string, std::vector<int>>& lines) {
    std::set<std::string> seen;
    for (const po::option& opt : parsed.options) {
        if (opt.string_key.empty() || seen.insert(opt.string_key).second) {
            continue;
        }
        std::string where;
        const auto it = lines.find(opt.string_key);
        if (it != lines.end() && it->second.size() >= 2) {
            where = str(" (lines ", it->second[0], " and ", it->second[1], ")");
        }
        throw InputError(str(origin, ": key '", opt.string_key, "' is given more than once", where));
    }
}

/// Adds a deck's values to `vm` (values already there, e.g. the command line's, win).
void store_deck(const std::string& origin, const std::string& text, const po::options_description& settings,
                po::variables_map& vm) {
    const po::parsed_options parsed_deck = parse_deck(origin, text, settings);
    check_duplicates(parsed_deck, origin, scan_key_lines(text));
    try {
        po::store(parsed_deck, vm);
    } catch (const po::error& e) {
        throw InputError(str(origin, ": ", e.what()));
    }
}

std::string help_text() {
    const Config defaults;
    std::ostringstream os;
    os << "Usage: mpirun -np N ztrain [--config FILE] [--section.key=VALUE ...]\n"
       << "       ztrain --help | --version | --env\n"
       << "       [mpirun -np N] ztrain --plan [--plan-world-size=N] [--config FILE] [--section.key=VALUE ...]\n\n"
       << "Trains a GPT-2 or Llama style model with data parallelism over MPI ranks.\n\n"
       << "Options:\n"
       << "  --config FILE   INI deck: '[section]' headers, then 'key = value' lines ('#' comments)\n"
       << "  --help, -h      print this help and exit\n"
       << "  --version       print the ztrain version and exit\n"
       << "  --env           print the build and machine environment and exit\n"
       << "  --plan          print each rank's predicted peak memory, tokens and FLOPs per step for\n"
       << "                  the deck, and exit without allocating or writing anything\n"
       << "  --plan-world-size=N  plan for N ranks (all on this node) instead of the job's own\n\n"
       << "Every key below can be set in the deck or overridden on the command line as\n"
       << "--section.key=VALUE (or --section.key VALUE); the command line wins over the deck.\n"
       << "'backend' is a top-level key: put it before any [section] or pass --backend=VALUE.\n";
    std::string section = "\x01";  // never a real section, so the first key prints a header
    for (const KeyDef& k : kKeys) {
        const std::string sec = section_of(k.key);
        if (sec != section) {
            section = sec;
            os << "\n" << (sec.empty() ? std::string("(top level)") : "[" + sec + "]") << "\n";
        }
        const std::string value = format_value(k, defaults);
        std::string left = str("  --", k.key, "=", std::visit(TypeNameVisitor{}, k.field(const_cast<Config&>(defaults))));
        if (left.size() < 34) {
            left.resize(34, ' ');
        } else {
            left += ' ';
        }
        os << left << k.doc << " (default: " << (value.empty() ? "\"\"" : value) << ")\n";
    }
    return os.str();
}

// ---------------------------------------------------------------------------
// validate() helpers
// ---------------------------------------------------------------------------

class Validator {
  public:
    Validator(const Config& cfg, const RejectedSettings& rejected) : m_cfg(cfg), m_rejected(rejected) {}

    /// Prefix naming where the values of `keys` came from, so the user knows what to edit:
    /// "command line: " when any of them was overridden there, else the deck, else nothing.
    std::string origin(std::initializer_list<const char*> keys) const {
        for (const char* key : keys) {
            if (std::find(m_cfg.cli_keys.begin(), m_cfg.cli_keys.end(), key) != m_cfg.cli_keys.end()) {
                return "command line: ";
            }
        }
        return m_cfg.config_file.empty() ? std::string() : m_cfg.config_file + ": ";
    }
    std::string origin(const std::string& key) const { return origin({key.c_str()}); }

    /// The value as text; for a typed setting that refused its text, that text.
    std::string value(const std::string& key) const {
        const auto it = m_rejected.find(key);
        return it != m_rejected.end() ? it->second.text : format_value(*find_key(key), m_cfg);
    }

    /// Throws "<origin>key = 'text': expected ..." when `key`'s text was refused as it was read.
    void check_read(const std::string& key) const {
        const auto it = m_rejected.find(key);
        if (it != m_rejected.end()) {
            check(false, key, it->second.expected);
        }
    }

    /// Throws "<origin>key = value: expected <what>" unless `ok`.
    void check(bool ok, const std::string& key, const std::string& expected) const {
        if (!ok) {
            throw InputError(str(origin(key), key, " = ", quoted(key), ": expected ", expected));
        }
    }

    void check_int_min(const std::string& key, int v, int min) const {
        check(v >= min, key, str("an integer >= ", min));
    }

    void check_finite(const std::string& key, double v) const {
        check(std::isfinite(v), key, "a finite number");
    }

  private:
    std::string quoted(const std::string& key) const {
        const std::string v = value(key);
        // Numbers read better bare; strings are quoted so an empty value is visible.
        const FieldRef ref = find_key(key)->field(const_cast<Config&>(m_cfg));
        return std::visit(IsTextVisitor{}, ref) ? "'" + v + "'" : v;
    }

    const Config& m_cfg;
    const RejectedSettings& m_rejected;
};

void validate_read(const Config& cfg, const RejectedSettings& rejected);

/// model.from_hf: config.json's model keys under the explicit ones (parse_command_line).
void apply_from_hf(Config& cfg, const po::variables_map& vm, const HfConfigReader& read_hf) {
    const bool from_cli =
        std::find(cfg.cli_keys.begin(), cfg.cli_keys.end(), "model.from_hf") != cfg.cli_keys.end();
    const std::string origin = from_cli ? std::string("command line: ") : cfg.config_file + ": ";
    ZT_INPUT_CHECK(read_hf != nullptr, origin, "model.from_hf is not supported by this program");
    std::vector<HfSetting> settings = read_hf(cfg.model.from_hf);
    settings.push_back({"model.init_from", cfg.model.from_hf, "", true});
    const std::string file = cfg.model.from_hf + "/config.json";
    for (const HfSetting& s : settings) {
        const KeyDef* k = find_key(s.key);
        ZT_REQUIRE(k != nullptr, "from_hf: unknown key ", s.key);
        Config probe = cfg;
        assign(probe, *k, s.text, file);
        if (!vm.count(s.key)) {
            cfg = probe;
            continue;
        }
        // Given explicitly too: the same value, or (not binding) the explicit one wins.
        if (!s.binding || format_value(*k, probe) == format_value(*k, cfg)) continue;
        const bool key_cli = std::find(cfg.cli_keys.begin(), cfg.cli_keys.end(), s.key) != cfg.cli_keys.end();
        throw InputError(str(key_cli ? std::string("command line") : cfg.config_file, ": ", s.key, " = ",
                             format_value(*k, cfg), ", but model.from_hf = ", cfg.model.from_hf, " says ",
                             format_value(*k, probe), s.hf_field.empty() ? "" : str(" (", file, ": ", s.hf_field, ")"),
                             ": remove the key to take the model's value, or drop model.from_hf"));
    }
}

}  // namespace

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

CliResult parse_command_line(int argc, const char* const* argv, const HfConfigReader& read_hf) {
    CliResult result;
    const po::options_description settings = settings_description();

    po::options_description actions("actions");
    actions.add_options()("config", po::value<std::string>(), "INI deck")("help,h", "help")(
        "version", "version")("env", "environment")("plan", "memory plan")(
        "plan-world-size", po::value<int>(), "ranks to plan for");
    // Positional words are collected (not rejected by Boost) so the message can quote them.
    po::options_description hidden;
    hidden.add_options()("zt-positional", po::value<std::vector<std::string>>());
    po::positional_options_description positional;
    positional.add("zt-positional", -1);

    po::options_description cli;
    cli.add(actions).add(settings).add(hidden);

    // Guessing is off: "--model.n_lay=3" silently meaning model.n_layer is a trap.
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::parsed_options parsed_cli(&cli);
    try {
        parsed_cli = po::command_line_parser(argc, const_cast<char**>(argv))
                         .options(cli)
                         .positional(positional)
                         .style(style)
                         .run();
    } catch (const po::unknown_option& e) {
        std::string token = e.get_option_name();
        token = token.substr(0, token.find('='));
        throw InputError(str("command line: unknown option '", token, "'", suggestion(strip_option_token(token), "--"),
                             "; see ztrain --help"));
    } catch (const po::invalid_command_line_syntax& e) {
        if (e.kind() == po::invalid_syntax::missing_parameter) {
            throw InputError(str("command line: ", e.get_option_name(), " needs a value (",
                                 e.get_option_name(), "=VALUE)"));
        }
        if (e.kind() == po::invalid_syntax::empty_adjacent_parameter) {
            throw InputError(str("command line: ", e.get_option_name(), "= has no value (to set an empty value, write ",
                                 e.get_option_name(), " \"\")"));
        }
        throw InputError(str("command line: ", e.what()));
    } catch (const po::error& e) {
        throw InputError(str("command line: ", e.what()));
    }
    check_duplicates(parsed_cli, "command line", {});

    po::variables_map vm;
    try {
        po::store(parsed_cli, vm);
    } catch (const po::error& e) {
        throw InputError(str("command line: ", e.what()));
    }

    if (vm.count("zt-positional")) {
        const auto& words = vm["zt-positional"].as<std::vector<std::string>>();
        throw InputError(str("command line: unexpected argument '", words.front(),
                             "' (settings are --section.key=VALUE, a deck is --config FILE; see ztrain --help)"));
    }
    if (vm.count("help")) {
        result.action = CliAction::kHelp;
        result.help_text = help_text();
        return result;
    }
    if (vm.count("version")) {
        result.action = CliAction::kVersion;
        return result;
    }

    Config& cfg = result.config;
    RejectedSettings rejected;
    for (const po::option& opt : parsed_cli.options) {
        if (find_key(opt.string_key) != nullptr) {
            cfg.cli_keys.push_back(opt.string_key);
        }
    }

    // The command line was stored first, so Boost keeps its values over the deck's.
    if (vm.count("config")) {
        cfg.config_file = vm["config"].as<std::string>();
        ZT_INPUT_CHECK(!cfg.config_file.empty(), "--config: needs a file name");
        store_deck(cfg.config_file, read_deck(cfg.config_file), settings, vm);
    }
    po::notify(vm);
    if (vm.count("plan") || vm.count("plan-world-size")) {
        result.action = CliAction::kPlan;
        if (vm.count("plan-world-size")) {
            result.plan_world_size = vm["plan-world-size"].as<int>();
            ZT_INPUT_CHECK(result.plan_world_size >= 1, "--plan-world-size = ", result.plan_world_size,
                           ": expected an integer >= 1");
        }
    }

    for (const KeyDef& k : kKeys) {
        if (!vm.count(k.key)) {
            continue;
        }
        const bool from_cli =
            std::find(cfg.cli_keys.begin(), cfg.cli_keys.end(), k.key) != cfg.cli_keys.end();
        // --env skips validate_read (below), so a value its type refuses is an error at once.
        assign(cfg, k, vm[k.key].as<std::string>(), from_cli ? std::string("command line") : cfg.config_file,
               vm.count("env") ? nullptr : &rejected);
    }
    if (!cfg.model.from_hf.empty()) apply_from_hf(cfg, vm, read_hf);

    // --env reports the groups this deck and these settings would form, so it reads them,
    // but it runs nothing: no data.train needed.
    if (vm.count("env")) {
        result.action = CliAction::kEnv;
        return result;
    }
    validate_read(cfg, rejected);
    return result;
}

Config parse_deck_text(const std::string& text, const std::string& origin) {
    po::variables_map vm;
    store_deck(origin, text, settings_description(), vm);
    Config cfg;
    for (const KeyDef& k : kKeys) {
        if (vm.count(k.key)) {
            assign(cfg, k, vm[k.key].as<std::string>(), origin);
        }
    }
    return cfg;
}

const char* setting_text(ModelArch v) { return choice_text(v, kArchNames); }
const char* setting_text(RopeScaling v) { return choice_text(v, kRopeScalingNames); }
const char* setting_text(BackendChoice v) { return choice_text(v, kBackendNames); }
const char* setting_text(LrSchedule v) { return choice_text(v, kScheduleNames); }
const char* setting_text(OnCheckpointError v) { return choice_text(v, kOnErrorNames); }
const char* setting_text(MemoryCheck v) { return choice_text(v, kMemoryCheckNames); }
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

void set_config_value(Config& cfg, const std::string& key, const std::string& text) {
    const KeyDef* k = find_key(key);
    ZT_INPUT_CHECK(k != nullptr, "unknown key '", key, "'", suggestion(key, ""));
    assign(cfg, *k, text, "");
}

void validate(const Config& cfg) { validate_read(cfg, RejectedSettings{}); }

std::string config_value_text(const Config& cfg, const std::string& key) {
    const KeyDef* k = find_key(key);
    ZT_INPUT_CHECK(k != nullptr, "unknown key '", key, "'", suggestion(key, ""));
    return format_value(*k, cfg);
}

namespace {

/// The first of `keys` whose value (as text) is not its default, or nullptr.
const char* first_not_default(const Validator& v, std::initializer_list<const char*> keys) {
    const Config defaults;
    for (const char* key : keys) {
        if (v.value(key) != format_value(*find_key(key), defaults)) return key;
    }
    return nullptr;
}

/// The Llama keys: with arch = gpt2 each must keep its default (a value there would be
/// silently ignored otherwise); with arch = llama, their values and relations.
void check_llama_keys(const Validator& v, const ModelConfig& m) {
    v.check_read("model.rope_scaling");
    if (!m.is_llama()) {
        if (const char* key = first_not_default(
                v, {"model.n_kv_head", "model.ffn_dim", "model.rope_theta", "model.rope_scaling", "model.rope_factor",
                    "model.rope_low_freq_factor", "model.rope_high_freq_factor", "model.rope_original_context",
                    "model.norm_eps", "model.tie_embeddings"})) {
            throw InputError(str(v.origin({key, "model.arch"}), key, " = ", v.value(key),
                                 " applies only to model.arch = llama (model.arch is ", setting_text(m.arch),
                                 "): remove it, or set model.arch = llama"));
        }
        return;
    }
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
    if (m.rope_scaling == RopeScaling::kNone) {
        if (const char* key = first_not_default(v, {"model.rope_factor", "model.rope_low_freq_factor",
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

/// validate(), plus the typed settings refused as the deck and command line were read,
/// each reported where its check stood when these settings were strings.
void validate_read(const Config& cfg, const RejectedSettings& rejected) {
    const Validator v(cfg, rejected);

    // Every double must be finite before any range check: NaN compares false with
    // everything and would slip through "x < 0" style tests.
    for (const KeyDef& k : kKeys) {
        const FieldRef ref = k.field(const_cast<Config&>(cfg));
        if (const auto* p = std::get_if<double*>(&ref)) {
            v.check_finite(k.key, **p);
        }
        if (std::visit(IsTextVisitor{}, ref)) {
            // '#' starts a comment and a newline ends the line in an INI deck: such a value
            // could not be written back by to_ini() faithfully.
            v.check(v.value(k.key).find_first_of("#\n\r") == std::string::npos, k.key,
                    "a value without '#' or line breaks");
        }
    }

    v.check_read("backend");

    const ModelConfig& m = cfg.model;
    v.check_int_min("model.n_layer", m.n_layer, 1);
    v.check_int_min("model.n_head", m.n_head, 1);
    v.check_int_min("model.n_embd", m.n_embd, 1);
    if (m.n_embd % m.n_head != 0) {
        throw InputError(str(v.origin({"model.n_embd", "model.n_head"}), "model.n_embd = ", m.n_embd,
                             " is not divisible by model.n_head = ", m.n_head,
                             " (each head gets n_embd / n_head channels)"));
    }
    v.check_read("model.arch");
    check_llama_keys(v, m);
    v.check_int_min("model.seq_len", m.seq_len, 1);
    v.check_int_min("model.vocab_size", m.vocab_size, 2);
    v.check_int_min("model.vocab_pad_to", m.vocab_pad_to, 1);
    // padded_vocab() adds the two; keep that sum (and the round-up) inside int.
    v.check(m.vocab_pad_to <= INT_MAX - m.vocab_size, "model.vocab_pad_to",
            "vocab_size + vocab_pad_to to fit in a 32-bit integer");

    if (cfg.data.train.empty()) {
        throw InputError(str(v.origin("data.train"),
                             "data.train is required: a token shard file or glob (make one with zt-prepare)"));
    }
    const TrainConfig& t = cfg.train;
    v.check_int_min("train.micro_batch", t.micro_batch, 1);
    v.check_int_min("train.grad_accum", t.grad_accum, 1);
    v.check_int_min("train.max_steps", t.max_steps, 1);
    v.check(t.lr > 0, "train.lr", "a number > 0");
    v.check(t.lr_min >= 0, "train.lr_min", "a number >= 0");
    if (t.lr_min > t.lr) {
        throw InputError(str(v.origin({"train.lr_min", "train.lr"}), "train.lr_min = ", format_double(t.lr_min),
                             " is greater than train.lr = ", format_double(t.lr),
                             ": expected 0 <= train.lr_min <= train.lr"));
    }
    v.check_int_min("train.warmup_steps", t.warmup_steps, 0);
    v.check_int_min("train.schedule_steps", t.schedule_steps, 0);
    v.check_read("train.schedule");
    v.check(t.weight_decay >= 0, "train.weight_decay", "a number >= 0");
    v.check(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "a number in [0, 1)");
    v.check(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "a number in [0, 1)");
    v.check(t.eps > 0, "train.eps", "a number > 0");
    v.check(t.grad_clip >= 0, "train.grad_clip", "a number >= 0 (0 disables clipping)");
    v.check_int_min("train.eval_every", t.eval_every, 0);
    v.check_int_min("train.eval_batches", t.eval_batches, 1);
    v.check_int_min("train.sample_tokens", t.sample_tokens, 0);
    v.check_int_min("train.log_every", t.log_every, 1);
    v.check_int_min("train.threads", t.threads, 0);

    v.check(cfg.parallel.zero_stage >= 0 && cfg.parallel.zero_stage <= 3, "parallel.zero_stage",
            "0 (DDP), 1, 2 or 3");
    v.check_read("parallel.shard_group");  // divides the world: checked where the world is known
    v.check(cfg.parallel.bucket_mb > 0 && cfg.parallel.bucket_mb <= 1048576, "parallel.bucket_mb",
            "a size in MiB > 0 and <= 1048576 (fractions allowed)");
    v.check(cfg.parallel.timeout_s >= 0, "parallel.timeout_s", "a number of seconds >= 0 (0 disables the watchdog)");

    const PrecisionConfig& pr = cfg.precision;
    v.check_read("precision.dtype");
    v.check_read("precision.reduce_dtype");
    v.check_read("precision.loss_scale");
    // The typed settings were checked as they were read; a hand-built Config can still
    // hold a fixed scale that is not a positive number, or a resume PATH that is empty.
    v.check(pr.loss_scale.dynamic || fixed_loss_scale_ok(pr.loss_scale.fixed), "precision.loss_scale",
            "dynamic, or a number > 0");
    v.check(pr.init_scale > 0, "precision.init_scale", "a number > 0");
    v.check_int_min("precision.growth_interval", pr.growth_interval, 1);
    v.check_int_min("precision.hysteresis", pr.hysteresis, 1);
    v.check(pr.min_scale > 0, "precision.min_scale", "a number > 0");
    if (pr.min_scale > pr.init_scale) {
        throw InputError(str(v.origin({"precision.min_scale", "precision.init_scale"}),
                             "precision.min_scale = ", format_double(pr.min_scale), " is above precision.init_scale = ",
                             format_double(pr.init_scale), ": expected min_scale <= init_scale"));
    }
    v.check_int_min("train.max_bad_steps", cfg.train.max_bad_steps, 1);

    v.check_int_min("checkpoint.every", cfg.checkpoint.every, 0);
    v.check_int_min("checkpoint.keep", cfg.checkpoint.keep, 1);
    v.check_read("checkpoint.resume");
    v.check(cfg.checkpoint.resume.mode != ResumeSetting::Mode::kPath || !cfg.checkpoint.resume.path.empty(),
            "checkpoint.resume", "auto | never | PATH of a checkpoint");
    v.check_read("checkpoint.on_error");
    v.check(cfg.checkpoint.async_spread >= 0 && cfg.checkpoint.async_spread < 1, "checkpoint.async_spread",
            "a fraction in [0, 1) of the time between saves (0: write at full speed)");
    v.check(!cfg.run.dir.empty(), "run.dir", "a directory name");
    v.check_read("run.memory_check");
}

}  // namespace

std::string to_ini(const Config& cfg) {
    std::ostringstream os;
    os << "# ztrain " << ZT_VERSION << " resolved configuration";
    if (!cfg.config_file.empty()) {
        os << " from deck " << cfg.config_file;
    }
    if (!cfg.cli_keys.empty()) {
        os << "\n# command-line overrides:";
        for (const std::string& k : cfg.cli_keys) {
            os << " " << k;
        }
    }
    os << "\n# Reload with: ztrain --config THIS_FILE\n";
    std::string section = "\x01";
    for (const KeyDef& k : kKeys) {
        const std::string sec = section_of(k.key);
        if (sec != section) {
            section = sec;
            if (!sec.empty()) {
                os << "\n[" << sec << "]\n";
            }
        }
        os << leaf_of(k.key) << " = " << format_value(k, cfg) << "\n";
    }
    return os.str();
}

}  // namespace zt
