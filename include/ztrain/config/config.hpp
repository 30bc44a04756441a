// The run configuration: every key of an INI deck / --section.key=value override.
//
// Keys, defaults and one-line meanings live in one table (config.cpp) that drives the
// Boost.Program_options parser, `ztrain --help`, the resolved-config dump and validation,
// so a key cannot exist in one place and be missing in another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct ModelConfig {
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 128;
    int seq_len = 128;         ///< maximum sequence length = number of learned positions
    int vocab_size = 257;      ///< real vocabulary (tokens the data may contain)
    int vocab_pad_to = 64;     ///< embedding rows are padded to a multiple of this
    std::string init_from;     ///< optional weights to start from (.h5 or .safetensors); ignored on resume
    /// vocab_size rounded up to vocab_pad_to; padded rows are never predicted.
    int padded_vocab() const { return (vocab_size + vocab_pad_to - 1) / vocab_pad_to * vocab_pad_to; }
};

struct DataConfig {
    std::string train;         ///< shard file or glob
    std::string val;           ///< shard file or glob (may be empty: no evaluation)
    std::string tokenizer;     ///< tokenizer description; default: tokenizer.json next to train shards
};

struct TrainConfig {
    int micro_batch = 4;
    int grad_accum = 1;
    int max_steps = 100;
    double lr = 3e-4;
    double lr_min = 3e-5;
    int warmup_steps = 10;
    std::string schedule = "cosine";   ///< cosine | linear | constant
    double weight_decay = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double grad_clip = 1.0;            ///< global-norm clip; 0 disables
    uint64_t seed = 1337;
    int eval_every = 50;               ///< 0: evaluate only at the end
    int eval_batches = 4;
    int sample_tokens = 64;            ///< tokens generated at each evaluation; 0 disables
    int log_every = 1;
    int threads = 0;                   ///< CPU threads per rank; 0 = cores / local ranks
    bool recompute = false;            ///< recompute activations in backward (saves memory)
    int max_bad_steps = 5;             ///< consecutive non-finite steps before the run stops
};

struct ParallelConfig {
    int zero_stage = 0;                ///< 0 DDP, 1, 2, 3
    double bucket_mb = 25;             ///< DDP all-reduce bucket size (MiB; fractions allowed)
    double timeout_s = 600;            ///< a collective taking longer aborts the job; 0 = never
};

struct PrecisionConfig {
    std::string dtype = "fp32";        ///< fp32 | bf16 | fp16: working params, activations, grads
    std::string reduce_dtype;          ///< gradient reduction dtype; empty = the working dtype
    std::string loss_scale = "dynamic";  ///< fp16: dynamic, or a fixed positive number
    double init_scale = 65536.0;       ///< fp16 dynamic: starting scale
    int growth_interval = 2000;        ///< fp16 dynamic: clean steps before the scale doubles
    int hysteresis = 2;                ///< fp16 dynamic: overflows tolerated before a backoff
    double min_scale = 1.0;            ///< fp16 dynamic: the scale never goes below this
};

struct CheckpointConfig {
    std::string dir;                   ///< default: run.dir/checkpoints
    int every = 0;                     ///< 0: only at the end
    int keep = 2;
    std::string resume = "auto";       ///< auto | never | PATH
    std::string on_error = "stop";     ///< a failed save: stop (exit 1) | continue (warn, train on)
};

struct RunConfig {
    std::string dir = "run";
};

struct Config {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    ParallelConfig parallel;
    PrecisionConfig precision;
    CheckpointConfig checkpoint;
    RunConfig run;
    std::string backend = "cpu";       ///< cpu | cuda | auto
    std::string config_file;           ///< the deck it came from (empty: defaults + overrides)
    /// Keys set on the command line (not written by to_ini): lets messages say whether to
    /// edit the deck or the command line.
    std::vector<std::string> cli_keys;
};

/// What the command line asked for besides a configuration.
enum class CliAction { kTrain, kHelp, kVersion, kEnv };

struct CliResult {
    CliAction action = CliAction::kTrain;
    Config config;
    std::string help_text;  ///< filled for kHelp
};

/// Parses `ztrain` arguments: --config FILE, --section.key=value overrides, --help,
/// --version, --env. Throws InputError (naming the file, key and value) on an unknown key,
/// a value of the wrong type, or a value validate() rejects.
CliResult parse_command_line(int argc, const char* const* argv);

/// Parses a deck given as text (e.g. the resolved deck a checkpoint stores) the way --config
/// reads a file: defaults, then the deck's keys. `origin` names the text in messages. Not
/// validated. Throws InputError on an unknown key or a value of the wrong type.
Config parse_deck_text(const std::string& text, const std::string& origin);

/// Checks every value and the relations between them; throws InputError naming the key,
/// the value and what was expected. Does not touch the file system.
void validate(const Config& cfg);

/// The resolved configuration as an INI deck (every key, its value; loadable with --config).
std::string to_ini(const Config& cfg);

}  // namespace zt
