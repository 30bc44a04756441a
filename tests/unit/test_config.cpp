// Unit tests for the configuration: defaults, INI decks, command-line overrides, error
// messages (unknown key, wrong type, duplicate, missing deck), every validate() rule,
// the to_ini() round trip and --help. Also smoke-tests environment_report() without MPI.
// No MPI, no GPU, no data files beyond small decks in a scratch directory.
#include "ztrain/config/config.hpp"
#include "ztrain/env/env.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace {

using zt::CliAction;
using zt::CliResult;
using zt::BackendChoice;
using zt::ModelArch;
using zt::ModelConfig;
using zt::RopeScaling;
using zt::Config;
using zt::DType;
using zt::LrSchedule;
using zt::OnCheckpointError;
using zt::ResumeSetting;
using zt::InputError;
using zt::test::ScratchDir;
using zt::test::write_file;

/// Runs parse_command_line on {"ztrain", args...}.
CliResult parse(std::vector<std::string> args) {
    args.insert(args.begin(), "ztrain");
    std::vector<const char*> argv;
    for (const std::string& a : args) {
        argv.push_back(a.c_str());
    }
    argv.push_back(nullptr);
    return zt::parse_command_line(static_cast<int>(args.size()), argv.data(), zt::family_key_rules);
}

/// The InputError message parse() throws, or "" when it does not throw.
std::string parse_error(const std::vector<std::string>& args) {
    try {
        parse(args);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

/// A config that passes validate() (defaults need data.train).
Config valid_config() {
    Config c;
    c.data.train = "shards/train_*.bin";
    return c;
}

std::string validate_error(const Config& c) {
    try {
        zt::validate(c);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

// --- defaults --------------------------------------------------------------

TEST(Config, DefaultsMatchStruct) {
    const CliResult r = parse({"--data.train=t.bin"});
    EXPECT_EQ(r.action, CliAction::kTrain);
    const Config& c = r.config;
    EXPECT_EQ(c.model.n_layer, 4);
    EXPECT_EQ(c.model.n_head, 4);
    EXPECT_EQ(c.model.n_embd, 128);
    EXPECT_EQ(c.model.vocab_size, 257);
    EXPECT_EQ(c.model.padded_vocab(), 320);
    EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
    EXPECT_EQ(c.train.schedule, LrSchedule::kCosine);
    EXPECT_EQ(c.train.seed, 1337u);
    EXPECT_EQ(c.train.recompute, zt::ActivationRecompute::kNone);
    EXPECT_EQ(c.backend, BackendChoice::kCpu);
    EXPECT_EQ(c.precision.dtype, DType::kF32);
    EXPECT_FALSE(c.precision.reduce_dtype.has_value());
    EXPECT_TRUE(c.precision.loss_scale.dynamic);
    EXPECT_EQ(c.checkpoint.on_error, OnCheckpointError::kStop);
    EXPECT_EQ(c.checkpoint.resume.mode, ResumeSetting::Mode::kAuto);
    EXPECT_TRUE(c.checkpoint.async);
    EXPECT_EQ(c.checkpoint.async_spread, 0.5);
    EXPECT_EQ(c.parallel.shard_group.ranks, -1);  // node
    EXPECT_EQ(c.run.dir, "run");
    EXPECT_TRUE(c.config_file.empty());
    EXPECT_EQ(c.data.train, "t.bin");
}

TEST(Config, DefaultsAreValidExceptDataTrain) {
    EXPECT_EQ(validate_error(valid_config()), "");
    EXPECT_NE(validate_error(Config{}).find("data.train is required"), std::string::npos);
}

// --- deck parsing ----------------------------------------------------------

TEST(Config, DeckWithSections) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck,
               "# a comment\n"
               "backend = auto\n"
               "\n"
               "[model]\n"
               "n_layer = 6   # trailing comment\n"
               "n_head=8\n"
               "n_embd = 256\n"
               "[data]\n"
               "train = shards/train_*.bin\n"
               "[train]\n"
               "lr = 1e-3\n"
               "lr_min = 0\n"
               "seed = 18446744073709551615\n"
               "recompute = yes\n"
               "schedule = linear\n"
               "[parallel]\n"
               "zero_stage = 2\n");
    const Config c = parse({"--config", deck}).config;
    EXPECT_EQ(c.config_file, deck);
    EXPECT_EQ(c.backend, BackendChoice::kAuto);
    EXPECT_EQ(c.model.n_layer, 6);
    EXPECT_EQ(c.model.n_head, 8);
    EXPECT_EQ(c.model.n_embd, 256);
    EXPECT_EQ(c.data.train, "shards/train_*.bin");
    EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
    EXPECT_DOUBLE_EQ(c.train.lr_min, 0.0);
    EXPECT_EQ(c.train.seed, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(c.train.recompute, zt::ActivationRecompute::kBlocks);
    EXPECT_EQ(c.train.schedule, LrSchedule::kLinear);
    EXPECT_EQ(c.parallel.zero_stage, 2);
    EXPECT_EQ(c.model.seq_len, 128);  // untouched keys keep defaults
    EXPECT_TRUE(c.cli_keys.empty());
}

TEST(Config, CommandLineOverridesDeck) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[model]\nn_layer = 6\n[train]\nlr = 1e-3\n[data]\ntrain = a.bin\n");
    const Config c = parse({"--model.n_layer=2", "--config", deck, "--train.lr", "5e-4", "--backend=auto"}).config;
    EXPECT_EQ(c.model.n_layer, 2);
    EXPECT_DOUBLE_EQ(c.train.lr, 5e-4);
    EXPECT_EQ(c.backend, BackendChoice::kAuto);
    EXPECT_EQ(c.data.train, "a.bin");  // from the deck
    EXPECT_EQ(c.cli_keys.size(), 3u);
}

TEST(Config, OverrideHidesBadDeckValue) {
    // The deck's value is never used, so its type is never checked.
    ScratchDir dir("cfg");
    write_file(dir.file("x.ini"), "[model]\nn_head = four\n[data]\ntrain = a.bin\n");
    EXPECT_EQ(parse({"--config", dir.file("x.ini"), "--model.n_head=2"}).config.model.n_head, 2);
}

TEST(Config, EmptyStringValueInDeck) {
    ScratchDir dir("cfg");
    write_file(dir.file("x.ini"), "[data]\ntrain = a.bin\nval =\n");
    EXPECT_EQ(parse({"--config", dir.file("x.ini")}).config.data.val, "");
}

// --- errors while reading --------------------------------------------------

TEST(ConfigErrors, UnknownKeyInDeckNamesFileKeyAndSuggestion) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[model]\nn_layers = 6\n");
    const std::string msg = parse_error({"--config", deck});
    EXPECT_NE(msg.find(deck + ":2: unknown key 'model.n_layers'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean 'model.n_layer'?"), std::string::npos) << msg;
}

TEST(ConfigErrors, KeyInWrongSectionSuggestsRightOne) {
    ScratchDir dir("cfg");
    write_file(dir.file("x.ini"), "[train]\nn_head = 6\n");
    const std::string msg = parse_error({"--config", dir.file("x.ini")});
    EXPECT_NE(msg.find("unknown key 'train.n_head' (did you mean 'model.n_head'?)"), std::string::npos) << msg;
}

TEST(ConfigErrors, UnknownCommandLineOption) {
    const std::string msg = parse_error({"--train.learning_rate=1"});
    EXPECT_NE(msg.find("command line: unknown option '--train.learning_rate'"), std::string::npos) << msg;
    const std::string msg2 = parse_error({"--model.n_emb=64"});
    EXPECT_NE(msg2.find("'--model.n_emb'"), std::string::npos) << msg2;
    EXPECT_NE(msg2.find("did you mean '--model.n_embd'?"), std::string::npos) << msg2;
}

TEST(ConfigErrors, NoAbbreviationGuessing) {
    EXPECT_NE(parse_error({"--model.n_lay=3"}).find("unknown option"), std::string::npos);
}

TEST(ConfigErrors, PositionalArgument) {
    const std::string msg = parse_error({"deck.ini"});
    EXPECT_NE(msg.find("unexpected argument 'deck.ini'"), std::string::npos) << msg;
}

TEST(ConfigErrors, MissingValue) {
    const std::string msg = parse_error({"--data.train=a", "--train.lr"});
    EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs a value"), std::string::npos) << msg;
}

TEST(ConfigErrors, EmptyValueOnCommandLine) {
    const std::string msg = parse_error({"--data.train=a", "--data.val="});
    EXPECT_NE(msg.find("--data.val= has no value"), std::string::npos) << msg;
    // The spelled-out empty value is accepted (clears a deck's value).
    EXPECT_EQ(parse({"--data.train=a", "--data.val", ""}).config.data.val, "");
}

TEST(ConfigErrors, RelationNamesCommandLineWhenEitherKeyIsOverridden) {
    const std::string msg = parse_error({"--data.train=a", "--model.n_head=3"});
    EXPECT_EQ(msg.rfind("command line: model.n_embd = 128 is not divisible by model.n_head = 3", 0), 0u) << msg;
}

TEST(ConfigErrors, WrongTypeInDeck) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[model]\nn_head = four\n[data]\ntrain = a.bin\n");
    EXPECT_EQ(parse_error({"--config", deck}), deck + ":2: model.n_head = 'four' is not an integer");
}

TEST(ConfigErrors, DeckValueWrappedInQuotesNamesItsLine) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[data]\ntrain = a.bin\n[run]\n# where\ndir = \"runs/a\"\n");
    EXPECT_EQ(parse_error({"--config", deck}),
              deck + ":5: run.dir = \"runs/a\": a deck value is taken as written, quotes included (INI has no "
                     "quoting); write it without them: run.dir = runs/a");
    write_file(deck, "[data]\ntrain = 'a.bin'\n");
    EXPECT_EQ(parse_error({"--config", deck}).rfind(deck + ":2: data.train = 'a.bin': a deck value", 0), 0u);
    // A quote inside a value, or on one side only, is the value's own.
    write_file(deck, "[data]\ntrain = a.bin\n[run]\ndir = runs/\"a\"\n");
    EXPECT_NO_THROW(parse({"--config", deck}));
}

TEST(ConfigDeck, AByteOrderMarkIsNotPartOfTheFirstLine) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "\xEF\xBB\xBF[model]\nn_layer = 3\n[data]\ntrain = a.bin\n");
    EXPECT_EQ(parse({"--config", deck}).config.model.n_layer, 3);
}

TEST(ConfigErrors, DeckRangeErrorNamesTheLineOfAKeyItGives) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[data]\ntrain = a.bin\n\n[model]\nn_head = 5\n");
    EXPECT_EQ(parse_error({"--config", deck}).rfind(deck + ":5: model.n_embd = ", 0), 0u) << parse_error({"--config", deck});
}

TEST(ConfigErrors, WrongTypeOnCommandLine) {
    struct Case {
        std::string arg;
        std::string expected;
    };
    const std::vector<Case> cases = {
        {"--train.lr=fast", "command line: train.lr = 'fast' is not a number"},
        {"--model.n_layer=2.5", "command line: model.n_layer = '2.5' is not an integer"},
        {"--model.n_layer=4x", "command line: model.n_layer = '4x' is not an integer"},
        {"--model.n_layer=99999999999",
         "command line: model.n_layer = '99999999999' is out of range (-2147483648 to 2147483647)"},
        {"--train.seed=99999999999999999999", "command line: train.seed = '99999999999999999999' is out of range"},
        {"--train.seed=-1", "command line: train.seed = '-1' is not a non-negative integer"},
        {"--train.recompute=maybe", "command line: train.recompute = 'maybe': expected false | attention | true"},
        {"--train.lr=1e999", "command line: train.lr = '1e999' is not a number"},
    };
    for (const Case& c : cases) {
        const std::string msg = parse_error({"--data.train=a", c.arg});
        EXPECT_EQ(msg.rfind(c.expected, 0), 0u) << c.arg << " -> " << msg;
    }
}

TEST(ConfigErrors, DuplicateKeyInDeck) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[train]\nlr = 1e-3\nseed = 1\nlr = 2e-3\n");
    const std::string msg = parse_error({"--config", deck});
    EXPECT_NE(msg.find(deck + ": key 'train.lr' is given more than once (lines 2 and 4)"), std::string::npos)
        << msg;
}

TEST(ConfigErrors, DuplicateOnCommandLine) {
    const std::string msg = parse_error({"--model.n_layer=2", "--model.n_layer=3"});
    EXPECT_NE(msg.find("command line: key 'model.n_layer' is given more than once"), std::string::npos) << msg;
}

TEST(ConfigErrors, MissingDeck) {
    ScratchDir dir("cfg");
    const std::string path = dir.file("nope.ini");
    EXPECT_NE(parse_error({"--config", path}).find("--config: cannot read '" + path + "'"), std::string::npos);
    EXPECT_NE(parse_error({"--config", dir.path()}).find("is a directory"), std::string::npos);
}

TEST(ConfigErrors, BadDeckSyntax) {
    ScratchDir dir("cfg");
    write_file(dir.file("x.ini"), "[model]\nthis line has no equals\n");
    const std::string msg = parse_error({"--config", dir.file("x.ini")});
    EXPECT_NE(msg.find("cannot parse line 'this line has no equals'"), std::string::npos) << msg;
}

TEST(ConfigErrors, ConfigKeyIsNotADeckKey) {
    ScratchDir dir("cfg");
    write_file(dir.file("x.ini"), "config = other.ini\n");
    EXPECT_NE(parse_error({"--config", dir.file("x.ini")}).find("unknown key 'config'"), std::string::npos);
}

TEST(ConfigErrors, ValidationNamesDeckOrCommandLine) {
    ScratchDir dir("cfg");
    const std::string deck = dir.file("x.ini");
    write_file(deck, "[model]\nn_embd = 130\n[data]\ntrain = a.bin\n");
    EXPECT_EQ(parse_error({"--config", deck}),
              deck + ":2: model.n_embd = 130 is not divisible by model.n_head = 4 (each head gets n_embd / n_head "
                     "channels)");
    write_file(deck, "[data]\ntrain = a.bin\n");
    const std::string msg = parse_error({"--config", deck, "--train.lr=-1"});
    EXPECT_EQ(msg.rfind("command line: train.lr = -1", 0), 0u) << msg;
}

// --- actions ---------------------------------------------------------------

TEST(ConfigActions, HelpListsEveryKey) {
    const CliResult r = parse({"--help"});
    ASSERT_EQ(r.action, CliAction::kHelp);
    const std::string& h = r.help_text;
    for (const char* opt : {"--config", "--help", "--version", "--env", "--section.key=VALUE"}) {
        EXPECT_NE(h.find(opt), std::string::npos) << opt;
    }
    // Every key of the resolved deck appears in the help as --section.key.
    const std::string ini = zt::to_ini(valid_config());
    std::istringstream in(ini);
    std::string line;
    std::string section;
    int keys = 0;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') {
            continue;
        }
        if (line[0] == '[') {
            section = line.substr(1, line.size() - 2) + ".";
            EXPECT_NE(h.find("[" + line.substr(1, line.size() - 2) + "]"), std::string::npos) << line;
            continue;
        }
        const std::string key = section + line.substr(0, line.find(' '));
        EXPECT_NE(h.find("--" + key + "="), std::string::npos) << key;
        ++keys;
    }
    EXPECT_EQ(keys, 108);  // 107 section keys + backend ([cluster] only where not the default)
    EXPECT_NE(h.find("(default: 4)"), std::string::npos);
    // train.eval_every = 0 still evaluates once, at the end of the run (the trainer does).
    const size_t ev = h.find("--train.eval_every=");
    ASSERT_NE(ev, std::string::npos);
    const std::string entry = h.substr(ev, h.find("--train.eval_batches=") - ev);
    EXPECT_NE(entry.find("(0: only at the end)"), std::string::npos) << entry;
    EXPECT_EQ(entry.find("disables"), std::string::npos) << entry;
}

TEST(ConfigActions, VersionEnvAndShortHelp) {
    EXPECT_EQ(parse({"--version"}).action, CliAction::kVersion);
    EXPECT_EQ(parse({"--env"}).action, CliAction::kEnv);
    // --env reports the layout of the settings given with it, not the defaults'.
    const CliResult env = parse({"--env", "--parallel.shard_group=2"});
    EXPECT_EQ(env.action, CliAction::kEnv);
    EXPECT_EQ(env.config.parallel.shard_group.ranks, 2);
    EXPECT_THROW(parse({"--env", "--parallel.shard_group=x"}), InputError);
    EXPECT_EQ(parse({"-h"}).action, CliAction::kHelp);
    // Actions do not need a valid configuration.
    EXPECT_EQ(parse({"--help", "--model.n_head=3"}).action, CliAction::kHelp);
}

// --- to_ini round trip -----------------------------------------------------

TEST(Config, ToIniRoundTrip) {
    Config c = valid_config();
    c.backend = BackendChoice::kAuto;
    c.model.n_layer = 12;
    c.model.n_head = 12;
    c.model.n_embd = 768;
    c.model.init_from = "weights.h5";
    c.data.val = "shards/val_*.bin";
    c.train.lr = 0.7;
    c.train.lr_min = 0.1 + 0.2;  // not exactly representable: tests shortest round trip
    c.train.beta2 = 0.999;
    c.train.seed = 12345678901234567ull;
    c.train.recompute = zt::ActivationRecompute::kBlocks;
    c.train.schedule = LrSchedule::kConstant;
    c.parallel.zero_stage = 3;
    c.precision.dtype = DType::kBF16;
    c.checkpoint.resume.mode = ResumeSetting::Mode::kNever;
    c.run.dir = "runs/a b";

    ScratchDir dir("cfg");
    const std::string deck = dir.file("resolved.ini");
    write_file(deck, zt::to_ini(c));
    const Config back = parse({"--config", deck}).config;
    EXPECT_EQ(back.config_file, deck);
    Config same = back;
    same.config_file.clear();  // only changes the comment at the top
    EXPECT_EQ(zt::to_ini(same), zt::to_ini(c));
    EXPECT_EQ(back.model.init_from, "weights.h5");
    EXPECT_EQ(back.data.tokenizer, "");
    EXPECT_EQ(back.train.lr_min, 0.1 + 0.2);  // bit-exact
    EXPECT_EQ(back.train.seed, 12345678901234567ull);
    EXPECT_EQ(back.train.recompute, zt::ActivationRecompute::kBlocks);
    EXPECT_EQ(back.run.dir, "runs/a b");
    EXPECT_EQ(back.backend, BackendChoice::kAuto);
}

// train.recompute: a boolean as before (true: every block) or "attention"; each writes back
// as false, attention or true, and zero-bubble pipelines take attention (their weight passes
// need the blocks' other activations, which attention-only recompute keeps).
TEST(Config, RecomputeTakesBooleansAndAttention) {
    const std::pair<const char*, zt::ActivationRecompute> cases[] = {
        {"attention", zt::ActivationRecompute::kAttention}, {"on", zt::ActivationRecompute::kBlocks},
        {"1", zt::ActivationRecompute::kBlocks},            {"true", zt::ActivationRecompute::kBlocks},
        {"no", zt::ActivationRecompute::kNone},             {"false", zt::ActivationRecompute::kNone}};
    for (const auto& [text, want] : cases) {
        const Config c = zt::parse_deck_text(std::string("[train]\nrecompute = ") + text + "\n", "deck");
        EXPECT_EQ(c.train.recompute, want) << text;
        EXPECT_EQ(zt::parse_deck_text(zt::to_ini(c), "dump").train.recompute, want) << text;
        EXPECT_EQ(zt::config_value_text(c, "train.recompute"), zt::setting_text(want)) << text;
    }
    EXPECT_STREQ(zt::setting_text(zt::ActivationRecompute::kAttention), "attention");
    Config zb = valid_config();
    zb.parallel.pipeline = 2;
    zb.train.grad_accum = 2;
    zb.parallel.schedule = zt::PipelineSchedule::kZeroBubble;
    zb.train.recompute = zt::ActivationRecompute::kAttention;
    EXPECT_EQ(validate_error(zb), "");
    zb.train.recompute = zt::ActivationRecompute::kBlocks;
    EXPECT_NE(validate_error(zb).find("train.recompute = 'true': expected false or attention"), std::string::npos)
        << validate_error(zb);
}

// --- validate(): one case per rule -----------------------------------------

struct Rule {
    const char* name;
    std::function<void(Config&)> edit;
    const char* expected;  ///< substring of the message
};

/// A valid Llama model on top of valid_config()'s (ffn_dim is required).
ModelConfig& llama(Config& c) {
    c.model.arch = ModelArch("llama");
    c.model.ffn_dim = 256;
    return c.model;
}
ModelConfig& llama3(Config& c) {
    llama(c).rope_scaling = RopeScaling::kLlama3;
    return c.model;
}

TEST(ConfigValidate, LlamaKeysParseAndValidate) {
    Config c = valid_config();
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{{"model.arch", "llama"},
                                                          {"model.n_kv_head", "2"},
                                                          {"model.ffn_dim", "344"},
                                                          {"model.rope_theta", "500000"},
                                                          {"model.rope_scaling", "llama3"},
                                                          {"model.rope_factor", "32"},
                                                          {"model.rope_original_context", "8192"},
                                                          {"model.norm_eps", "1e-6"},
                                                          {"model.tie_embeddings", "false"}}) {
        zt::set_config_value(c, key, value);
    }
    EXPECT_NO_THROW(validate(c));
    EXPECT_EQ(c.model.arch, ModelArch("llama"));
    EXPECT_EQ(c.model.kv_heads(), 2);
    EXPECT_EQ(c.model.qkv_dim(), (4 + 2 * 2) * 32);
    // to_ini round-trips the new keys.
    const Config back = zt::parse_deck_text(zt::to_ini(c), "dump");
    EXPECT_EQ(back.model.arch, ModelArch("llama"));
    EXPECT_EQ(back.model.rope_scaling, RopeScaling::kLlama3);
    EXPECT_EQ(back.model.rope_factor, 32);
    EXPECT_EQ(back.model.norm_eps, 1e-6);
    EXPECT_FALSE(back.model.tie_embeddings);
    // n_kv_head 0 means n_head; gpt2 always uses n_head.
    Config d = valid_config();
    llama(d);
    EXPECT_EQ(d.model.kv_heads(), d.model.n_head);
    // A name no family has is refused by validation (model/ holds the families), a text that
    // is no name as it is read.
    const std::string msg = zt::test::input_error_of([] {
        Config e = valid_config();
        zt::set_config_value(e, "model.arch", "mamba");
        zt::validate(e);
    });
    EXPECT_NE(msg.find("model.arch = 'mamba': expected one of gpt2 | llama | mistral"), std::string::npos) << msg;
    const std::string not_a_name = zt::test::input_error_of([] {
        Config e;
        zt::set_config_value(e, "model.arch", "Llama 3");
    });
    EXPECT_NE(not_a_name.find("model.arch = 'Llama 3': expected a model family's name"), std::string::npos)
        << not_a_name;
}

TEST(ConfigValidate, EveryRule) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<Rule> rules = {
        {"n_layer", [](Config& c) { c.model.n_layer = 0; }, "model.n_layer = 0: expected an integer >= 1"},
        {"n_head", [](Config& c) { c.model.n_head = 0; }, "model.n_head = 0: expected an integer >= 1"},
        {"n_embd", [](Config& c) { c.model.n_embd = -4; }, "model.n_embd = -4: expected an integer >= 1"},
        {"divisible", [](Config& c) { c.model.n_embd = 130; },
         "model.n_embd = 130 is not divisible by model.n_head = 4"},
        {"seq_len", [](Config& c) { c.model.seq_len = 0; }, "model.seq_len = 0: expected an integer >= 1"},
        {"vocab_size", [](Config& c) { c.model.vocab_size = 1; }, "model.vocab_size = 1: expected an integer >= 2"},
        {"vocab_pad_to", [](Config& c) { c.model.vocab_pad_to = 0; }, "model.vocab_pad_to = 0: expected an integer >= 1"},
        {"vocab_overflow", [](Config& c) { c.model.vocab_size = std::numeric_limits<int>::max(); },
         "model.vocab_pad_to = 64: expected vocab_size + vocab_pad_to to fit"},
        {"data.train", [](Config& c) { c.data.train.clear(); },
         "data.train is required: a token shard file or glob (make one with zt-prepare)"},
        {"micro_batch", [](Config& c) { c.train.micro_batch = 0; }, "train.micro_batch = 0: expected an integer >= 1"},
        {"grad_accum", [](Config& c) { c.train.grad_accum = 0; }, "train.grad_accum = 0: expected an integer >= 1"},
        {"max_steps", [](Config& c) { c.train.max_steps = 0; }, "train.max_steps = 0: expected an integer >= 1"},
        {"lr", [](Config& c) { c.train.lr = 0; }, "train.lr = 0: expected a number > 0"},
        {"lr_nan", [nan](Config& c) { c.train.lr = nan; }, "train.lr = nan: expected a finite number"},
        {"lr_inf", [inf](Config& c) { c.train.lr = inf; }, "train.lr = inf: expected a finite number"},
        {"lr_min_neg", [](Config& c) { c.train.lr_min = -1e-5; }, "train.lr_min = -1e-05: expected a number >= 0"},
        {"lr_min_gt_lr", [](Config& c) { c.train.lr_min = 1e-3; },
         "train.lr_min = 0.001 is greater than train.lr = 0.0003"},
        {"warmup", [](Config& c) { c.train.warmup_steps = -1; }, "train.warmup_steps = -1: expected an integer >= 0"},
        {"weight_decay", [](Config& c) { c.train.weight_decay = -0.1; }, "train.weight_decay = -0.1: expected"},
        {"beta1", [](Config& c) { c.train.beta1 = 1.0; }, "train.beta1 = 1: expected a number in [0, 1)"},
        {"beta2", [](Config& c) { c.train.beta2 = -0.5; }, "train.beta2 = -0.5: expected a number in [0, 1)"},
        {"beta2_nan", [nan](Config& c) { c.train.beta2 = nan; }, "train.beta2 = nan: expected a finite number"},
        {"eps", [](Config& c) { c.train.eps = 0; }, "train.eps = 0: expected a number > 0"},
        {"grad_clip", [](Config& c) { c.train.grad_clip = -1; }, "train.grad_clip = -1: expected a number >= 0"},
        {"eval_every", [](Config& c) { c.train.eval_every = -1; }, "train.eval_every = -1: expected an integer >= 0"},
        {"eval_batches", [](Config& c) { c.train.eval_batches = 0; }, "train.eval_batches = 0: expected an integer >= 1"},
        {"sample_tokens", [](Config& c) { c.train.sample_tokens = -1; }, "train.sample_tokens = -1: expected"},
        {"log_every", [](Config& c) { c.train.log_every = 0; }, "train.log_every = 0: expected an integer >= 1"},
        {"threads", [](Config& c) { c.train.threads = -2; }, "train.threads = -2: expected an integer >= 0"},
        {"zero_stage", [](Config& c) { c.parallel.zero_stage = 4; }, "parallel.zero_stage = 4: expected 0 (DDP), 1, 2 or 3"},
        {"bucket_mb", [](Config& c) { c.parallel.bucket_mb = -1; }, "parallel.bucket_mb = -1: expected 0 (the memory plan's choice) or a size in MiB > 0"},
        {"ckpt_every", [](Config& c) { c.checkpoint.every = -1; }, "checkpoint.every = -1: expected an integer >= 0"},
        {"keep", [](Config& c) { c.checkpoint.keep = 0; }, "checkpoint.keep = 0: expected an integer >= 1"},
        {"async_spread_1", [](Config& c) { c.checkpoint.async_spread = 1; },
         "checkpoint.async_spread = 1: expected a fraction in [0, 1) of the time between saves (0: write at full "
         "speed)"},
        {"async_spread_neg", [](Config& c) { c.checkpoint.async_spread = -0.1; },
         "checkpoint.async_spread = -0.1: expected a fraction in [0, 1)"},
        {"async_spread_nan", [nan](Config& c) { c.checkpoint.async_spread = nan; },
         "checkpoint.async_spread = nan: expected a finite number"},
        {"resume", [](Config& c) { c.checkpoint.resume = ResumeSetting{ResumeSetting::Mode::kPath, ""}; },
         "checkpoint.resume = '': expected auto | never | PATH of a checkpoint"},
        {"loss_scale", [](Config& c) { c.precision.loss_scale = zt::LossScaleSetting{false, -2.0, "-2"}; },
         "precision.loss_scale = '-2': expected dynamic, or a number > 0"},
        {"resume_hash", [](Config& c) { c.checkpoint.resume = ResumeSetting{ResumeSetting::Mode::kPath, "a#b"}; },
         "checkpoint.resume = 'a#b': expected a value without '#'"},
        {"run_dir", [](Config& c) { c.run.dir.clear(); }, "run.dir = '': expected a directory name"},
        {"hash_in_string", [](Config& c) { c.data.val = "a#b"; }, "data.val = 'a#b': expected a value without '#'"},
        // Llama keys with arch = gpt2 would be ignored silently: refused.
        {"gpt2_n_kv_head", [](Config& c) { c.model.n_kv_head = 2; },
         "model.n_kv_head = 2 applies only to model.arch = llama (model.arch is gpt2)"},
        {"gpt2_ffn_dim", [](Config& c) { c.model.ffn_dim = 64; }, "model.ffn_dim = 64 applies only to model.arch = llama"},
        {"gpt2_rope_theta", [](Config& c) { c.model.rope_theta = 5e5; },
         "model.rope_theta = 500000 applies only to model.arch = llama"},
        {"gpt2_rope_scaling", [](Config& c) { c.model.rope_scaling = RopeScaling::kLlama3; },
         "model.rope_scaling = llama3 applies only to model.arch = llama"},
        {"gpt2_norm_eps", [](Config& c) { c.model.norm_eps = 1e-6; },
         "model.norm_eps = 1e-06 applies only to model.arch = llama"},
        {"gpt2_untied", [](Config& c) { c.model.tie_embeddings = false; },
         "model.tie_embeddings = false applies only to model.arch = llama"},
        {"llama_kv_divides", [](Config& c) { llama(c).n_kv_head = 3; },
         "model.n_kv_head = 3 does not divide model.n_head = 4: expected a divisor"},
        {"llama_kv_negative", [](Config& c) { llama(c).n_kv_head = -1; }, "model.n_kv_head = -1: expected an integer >= 1"},
        {"llama_odd_head", [](Config& c) { llama(c).n_embd = 12; },
         "model.n_embd / model.n_head = 12 / 4 = 3 is odd: expected an even head size"},
        {"llama_ffn_dim", [](Config& c) { llama(c).ffn_dim = 0; }, "model.ffn_dim = 0: expected an integer >= 1"},
        {"llama_theta", [](Config& c) { llama(c).rope_theta = 1; }, "model.rope_theta = 1: expected a number > 1"},
        {"llama_norm_eps", [](Config& c) { llama(c).norm_eps = 0; }, "model.norm_eps = 0: expected a number > 0"},
        {"llama_norm_eps_nan", [nan](Config& c) { llama(c).norm_eps = nan; }, "model.norm_eps = nan: expected a finite"},
        {"llama_factor_unscaled", [](Config& c) { llama(c).rope_factor = 32; },
         "model.rope_factor = 32 applies only to model.rope_scaling = llama3"},
        {"llama3_factor", [](Config& c) { llama3(c).rope_factor = 0; }, "model.rope_factor = 0: expected a number > 0"},
        {"llama3_low", [](Config& c) { llama3(c).rope_low_freq_factor = -1; },
         "model.rope_low_freq_factor = -1: expected a number > 0"},
        {"llama3_high", [](Config& c) { llama3(c).rope_high_freq_factor = 1; },
         "model.rope_high_freq_factor = 1 is not above model.rope_low_freq_factor = 1"},
        {"llama3_context", [](Config& c) { llama3(c).rope_original_context = 0; },
         "model.rope_original_context = 0: expected an integer >= 1"},
    };
    for (const Rule& r : rules) {
        Config c = valid_config();
        r.edit(c);
        const std::string msg = validate_error(c);
        EXPECT_NE(msg.find(r.expected), std::string::npos) << r.name << ": got '" << msg << "'";
        // Without a deck or overrides there is no origin prefix.
        EXPECT_EQ(msg.rfind(r.expected, 0), 0u) << r.name << ": got '" << msg << "'";
    }
}

// Typed settings are parsed as they are read; a rejected text gets the message validate()
// gave when they were strings (no origin prefix when set by hand, else the deck or command
// line).
TEST(ConfigTyped, RejectedTextKeepsItsMessage) {
    const std::vector<std::pair<std::pair<const char*, const char*>, const char*>> cases = {
        {{"backend", "tpu"}, "backend = 'tpu': expected one of cpu | cuda | auto"},
        {{"train.schedule", "step"}, "train.schedule = 'step': expected one of cosine | linear | constant | wsd"},
        {{"precision.dtype", "fp8"}, "precision.dtype = 'fp8': expected one of fp32 | bf16 | fp16"},
        {{"precision.reduce_dtype", "f32"}, "precision.reduce_dtype = 'f32': expected one of fp32 | bf16 | fp16"},
        {{"precision.loss_scale", "abc"}, "precision.loss_scale = 'abc': expected dynamic, or a number > 0"},
        {{"precision.loss_scale", "0"}, "precision.loss_scale = '0': expected dynamic, or a number > 0"},
        {{"precision.loss_scale", "inf"}, "precision.loss_scale = 'inf': expected dynamic, or a number > 0"},
        {{"checkpoint.resume", ""}, "checkpoint.resume = '': expected auto | never | PATH of a checkpoint"},
        {{"checkpoint.on_error", "retry"}, "checkpoint.on_error = 'retry': expected one of stop | continue"},
    };
    for (const auto& [kv, expected] : cases) {
        Config c = valid_config();
        try {
            zt::set_config_value(c, kv.first, kv.second);
            ADD_FAILURE() << kv.first << " = '" << kv.second << "' was accepted";
        } catch (const InputError& e) {
            EXPECT_EQ(std::string(e.what()), expected);
        }
    }
    EXPECT_EQ(parse_error({"--data.train=t.bin", "--precision.dtype=fp8"}),
              "command line: precision.dtype = 'fp8': expected one of fp32 | bf16 | fp16");
    ScratchDir dir("cfg");
    write_file(dir.file("x.ini"), "[data]\ntrain = a.bin\n[train]\nschedule = step\n");
    EXPECT_EQ(parse_error({"--config", dir.file("x.ini")}),
              dir.file("x.ini") + ":4: train.schedule = 'step': expected one of cosine | linear | constant | wsd");
}

TEST(ConfigTyped, ValuesAndTheirText) {
    Config c = valid_config();
    zt::set_config_value(c, "precision.dtype", "fp16");
    zt::set_config_value(c, "precision.reduce_dtype", "fp32");
    zt::set_config_value(c, "precision.loss_scale", "1e30");
    zt::set_config_value(c, "checkpoint.resume", "runs/x/checkpoints");
    zt::set_config_value(c, "checkpoint.on_error", "continue");
    zt::set_config_value(c, "backend", "cuda");
    EXPECT_EQ(c.precision.dtype, DType::kF16);
    EXPECT_EQ(c.precision.reduce(), DType::kF32);
    EXPECT_FALSE(c.precision.loss_scale.dynamic);
    EXPECT_EQ(c.precision.loss_scale.fixed, 1e30);
    EXPECT_EQ(zt::setting_text(c.precision.loss_scale), "1e30") << "written back as given, not as 1e+30";
    EXPECT_EQ(c.checkpoint.resume.mode, ResumeSetting::Mode::kPath);
    EXPECT_EQ(zt::setting_text(c.checkpoint.resume), "runs/x/checkpoints");
    EXPECT_EQ(c.checkpoint.on_error, OnCheckpointError::kContinue);
    EXPECT_EQ(c.backend, BackendChoice::kCuda);
    const std::string ini = zt::to_ini(c);
    for (const char* line : {"backend = cuda\n", "dtype = fp16\n", "reduce_dtype = fp32\n", "loss_scale = 1e30\n",
                             "resume = runs/x/checkpoints\n", "on_error = continue\n", "schedule = cosine\n"}) {
        EXPECT_NE(ini.find(line), std::string::npos) << line;
    }
    zt::set_config_value(c, "precision.reduce_dtype", "");
    EXPECT_EQ(c.precision.reduce(), DType::kF16) << "unset: the working dtype";
    EXPECT_NE(zt::to_ini(c).find("reduce_dtype = \n"), std::string::npos);
    EXPECT_THROW(zt::set_config_value(c, "precision.dtyp", "fp16"), InputError);
}

TEST(ConfigTyped, GradDtypeWidensOnlyAndLeadsTheReduction) {
    Config c = valid_config();
    zt::set_config_value(c, "precision.dtype", "bf16");
    EXPECT_EQ(zt::grads_dtype(c), DType::kBF16) << "unset: the working dtype";
    zt::set_config_value(c, "precision.grad_dtype", "fp32");
    EXPECT_EQ(zt::grads_dtype(c), DType::kF32);
    EXPECT_EQ(c.precision.reduce(), DType::kF32) << "an unset reduce_dtype follows grad_dtype";
    EXPECT_NE(zt::to_ini(c).find("grad_dtype = fp32\n"), std::string::npos);
    zt::set_config_value(c, "precision.reduce_dtype", "bf16");
    EXPECT_EQ(c.precision.reduce(), DType::kBF16) << "a set reduce_dtype wins";
    EXPECT_EQ(validate_error(c), "");
    zt::set_config_value(c, "precision.grad_dtype", "fp16");
    EXPECT_EQ(validate_error(c), "precision.grad_dtype = 'fp16': expected fp32, bf16 (precision.dtype) or empty");
    zt::set_config_value(c, "precision.dtype", "fp32");
    zt::set_config_value(c, "precision.grad_dtype", "bf16");
    EXPECT_EQ(validate_error(c),
              "precision.grad_dtype = 'bf16': expected fp32 or empty: the model trains in fp32, and "
              "gradients are never narrower than what they update");
}

std::string global_batch_error(const Config& c, int world) {
    try {
        zt::with_global_batch(c, world);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

TEST(GlobalBatch, DerivesGradAccumFromTheWorldSize) {
    Config c = valid_config();
    c.train.micro_batch = 2;
    EXPECT_EQ(zt::with_global_batch(c, 4).train.grad_accum, 1) << "0: grad_accum as given";
    c.train.global_batch = 32;
    EXPECT_EQ(zt::with_global_batch(c, 1).train.grad_accum, 16);
    EXPECT_EQ(zt::with_global_batch(c, 4).train.grad_accum, 4);
    EXPECT_EQ(zt::with_global_batch(c, 16).train.grad_accum, 1);
    c.parallel.tensor = 2;  // 8 ranks, 4 data ranks
    EXPECT_EQ(zt::with_global_batch(c, 8).train.grad_accum, 4);
    EXPECT_EQ(zt::with_global_batch(c, 7).train.grad_accum, 1) << "a world the mesh refuses: unchanged";
    EXPECT_EQ(global_batch_error(c, 24),
              "train.global_batch = 32: not a multiple of train.micro_batch x data ranks = 2 x 12 = 24 (24 rank(s) / "
              "(parallel.tensor 2 x parallel.pipeline 1)); give a global batch that 12 data rank(s) split evenly, or "
              "another micro_batch");
    // A deck written at another world size carries that world's grad_accum: replaced, with a note.
    c.train.grad_accum = 8;
    std::string note;
    EXPECT_EQ(zt::with_global_batch(c, 8, &note).train.grad_accum, 4);
    EXPECT_EQ(note, "train.grad_accum = 8 replaced by 4: train.global_batch = 32 over 4 data rank(s) x micro_batch 2");
    note.clear();
    c.train.grad_accum = 4;
    zt::with_global_batch(c, 8, &note);
    EXPECT_EQ(note, "") << "the derived value given: nothing to say";
}

TEST(GlobalBatch, PipelineRulesAtTheDerivedAccumulation) {
    Config c = valid_config();
    c.model.n_layer = 4;
    c.train.micro_batch = 1;
    c.train.global_batch = 4;
    c.parallel.pipeline = 4;
    EXPECT_EQ(validate_error(c), "") << "grad_accum 1 < pipeline 4 is not refused before the world is known";
    EXPECT_EQ(zt::with_global_batch(c, 4).train.grad_accum, 4);
    EXPECT_EQ(global_batch_error(c, 8),
              "train.global_batch = 4: 2 micro-batch(es) per step on 2 data rank(s), fewer than parallel.pipeline = "
              "4 (one in flight per stage); give a global batch of at least 8");
    c.parallel.schedule = zt::PipelineSchedule::kInterleaved;
    c.train.global_batch = 6;
    EXPECT_EQ(global_batch_error(c, 4),
              "train.global_batch = 6: 6 micro-batches per step on 1 data rank(s), not a multiple of "
              "parallel.pipeline = 4 as parallel.schedule = interleaved needs");
    c.train.global_batch = -1;
    EXPECT_EQ(validate_error(c),
              "train.global_batch = -1: expected an integer >= 0 (0: micro_batch x grad_accum x data ranks)");
}

TEST(ConfigValidate, DeckNameInMessage) {
    Config c = valid_config();
    c.config_file = "inputs/x.ini";
    c.train.eps = -1;
    EXPECT_EQ(validate_error(c), "inputs/x.ini: train.eps = -1: expected a number > 0");
}

TEST(ConfigValidate, BoundaryValuesAccepted) {
    Config c = valid_config();
    c.train.beta1 = 0;
    c.train.lr_min = c.train.lr;
    c.train.grad_clip = 0;
    c.train.eval_every = 0;
    c.train.warmup_steps = 0;
    c.parallel.zero_stage = 3;
    c.model.n_head = 1;
    c.model.n_embd = 1;
    c.model.vocab_size = 2;
    EXPECT_EQ(validate_error(c), "");
}

// --- environment report ----------------------------------------------------

TEST(Env, ReportWithoutMpiInit) {
    const std::string r = zt::environment_report();
    for (const char* part : {"ztrain ", "MPI:", "not initialised", "HDF5:", "parallel", "BLAS:", "Boost:",
                             "OpenMP:", "CPU:", "cores:", "memory:", "CUDA:"}) {
        EXPECT_NE(r.find(part), std::string::npos) << part << " missing in:\n" << r;
    }
}

TEST(Env, ReportSaysWhetherTheBlasKernelsWereForced) {
    const char* before = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = before != nullptr ? before : "";
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    std::string r = zt::environment_report();
    EXPECT_NE(r.find("kernels forced by OPENBLAS_CORETYPE = Haswell"), std::string::npos) << r;
    unsetenv("OPENBLAS_CORETYPE");
    r = zt::environment_report();
    EXPECT_NE(r.find("kernels chosen for this CPU"), std::string::npos) << r;
    if (before != nullptr) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
}

TEST(Env, ReportsTheOpenMpVersion) {
    // The _OPENMP values the specifications prescribe.
    EXPECT_EQ(zt::openmp_spec_version(200805), "3.0");
    EXPECT_EQ(zt::openmp_spec_version(201511), "4.5");
    EXPECT_EQ(zt::openmp_spec_version(201811), "5.0");
    EXPECT_EQ(zt::openmp_spec_version(202011), "5.1");
    EXPECT_EQ(zt::openmp_spec_version(201512), "unknown");
#ifndef _OPENMP
    GTEST_FAIL() << "the tests are built without OpenMP";
#else
    // --env names the version this build was compiled against, and its macro value.
    const std::string version = zt::openmp_spec_version(_OPENMP);
    EXPECT_NE(version, "unknown") << "_OPENMP " << _OPENMP;
    const std::string line = zt::str("  OpenMP:  ", version, " (_OPENMP ", _OPENMP, "), ");
    const std::string r = zt::environment_report();
    EXPECT_NE(r.find(line), std::string::npos) << "'" << line << "' missing in:\n" << r;
#endif
}

// --- the cluster description ([cluster], --cluster FILE; issue 53) --------------------

TEST(ClusterDescription, DefaultsAreTheShippedFileOfThisMachineKind) {
    const std::string path = std::string(ZT_SOURCE_DIR) + "/inputs/clusters/epyc_2core_vm.ini";
    const Config from_file = zt::parse_deck_text(zt::test::read_file(path), path);
    const Config defaults;
    EXPECT_EQ(zt::to_ini(from_file), zt::to_ini(defaults)) << "ClusterConfig's defaults and " << path << " differ";
}

TEST(ClusterDescription, ShippedFilesPassTheChecks) {
    for (const char* name : {"epyc_2core_vm", "h100_node", "a100_node"}) {
        const std::string path = std::string(ZT_SOURCE_DIR) + "/inputs/clusters/" + name + ".ini";
        const CliResult r = parse({"--plan", "--cluster", path, "--data.train=x.bin"});
        EXPECT_TRUE(r.plan_cluster) << name;
        EXPECT_GT(r.config.cluster.peak_tflops_bf16, 0) << name;
    }
    const std::string h = std::string(ZT_SOURCE_DIR) + "/inputs/clusters/h100_node.ini";
    const CliResult r = parse({"--plan", "--cluster", h, "--data.train=x.bin", "--cluster.nodes=4"});
    EXPECT_EQ(r.config.cluster.nodes, 4);  // the command line wins over the file
    EXPECT_EQ(r.config.cluster.ranks_per_node, 8);
    EXPECT_EQ(r.config.cluster.device, "gpu");
}

TEST(ClusterDescription, BadFilesExit2NamingFileAndKey) {
    zt::test::ScratchDir dir("cluster");
    const std::string bad = dir.file("bad.ini");
    zt::test::write_file(bad, "[cluster]\nnodes = 0\n");
    std::string e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find(bad + ":2: cluster.nodes = 0: expected an integer >= 1"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nnodes = 2\n\ndevice = tpu\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find(bad + ":4: cluster.device = 'tpu': expected cpu"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nattention_kernel = flash\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find("cluster.attention_kernel = 'flash': expected materialized"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nattention_efficiency = 1.5\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find("cluster.attention_efficiency = 1.5: expected a fraction in [0, 1]"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nelementwise = compiled\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find("cluster.elementwise = 'compiled': expected fused"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nactivation_checkpointing = selective_layer\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find("cluster.activation_checkpointing = 'selective_layer': expected deck"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\ninter_gbps = fast\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find(bad + ":2: cluster.inter_gbps"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nnodes = 2\n[train]\nlr = 1\n");
    e = parse_error({"--plan", "--cluster", bad, "--data.train=x.bin"});
    EXPECT_NE(e.find(bad + ":4: key 'train.lr' is not a [cluster] key"), std::string::npos) << e;
    e = parse_error({"--plan", "--cluster", dir.file("none.ini"), "--data.train=x.bin"});
    EXPECT_NE(e.find("--cluster: cannot read"), std::string::npos) << e;
    zt::test::write_file(bad, "[cluster]\nnodes = 2\n");
    e = parse_error({"--plan", "--cluster", bad, "--plan-world-size=4", "--data.train=x.bin"});
    EXPECT_NE(e.find("--plan-world-size and --cluster are both given"), std::string::npos) << e;
    e = parse_error({"--search", "--data.train=x.bin"});
    EXPECT_NE(e.find("--search needs --plan"), std::string::npos) << e;
    e = parse_error({"--plan", "--write", "x.ini", "--data.train=x.bin"});
    EXPECT_NE(e.find("--all and --write need --plan --search"), std::string::npos) << e;
    e = parse_error({"--calibrate"});
    EXPECT_NE(e.find("--calibrate needs --cluster-out FILE"), std::string::npos) << e;
}

}  // namespace
