// zt-consolidate: one weights file from a sharded checkpoint, or a description of it.
//
//   zt-consolidate CKPT_DIR --output FILE [--dtype fp32|bf16|fp16] [--with-optimizer]
//   zt-consolidate CKPT_DIR --output DIR/ [--dtype fp32|bf16|fp16] [--max-shard-size SIZE]
//   zt-consolidate CKPT_DIR --info
//
// CKPT_DIR is a step directory (step_00000100) or a checkpoint directory, whose `latest`
// names the step. FILE's extension picks the format: .h5 (ztrain names and layout) or
// .safetensors (Hugging Face names and layout of the checkpoint's family, GPT-2 or Llama);
// see ckpt/export.hpp. A FILE that is a directory (or ends with '/') becomes a Hugging Face
// model directory: model.safetensors plus config.json (GPT2LMHeadModel or LlamaForCausalLM),
// loadable with AutoModelForCausalLM.from_pretrained(FILE) and by ztrain's model.init_from;
// --max-shard-size splits its weights into model-0000k-of-0000n.safetensors files with
// model.safetensors.index.json, as save_pretrained(max_shard_size=SIZE) does.
// A directory also gets the run's tokenizer as tokenizer.json + tokenizer_config.json (and
// its special ids as config.json's bos/eos_token_id) when the run used a Hugging Face or
// GPT-2 tokenizer that is still where zt-eval finds it (data.tokenizer, or tokenizer.json
// beside data.train, relative to the working directory) and still the file the checkpoint
// fingerprinted; otherwise a note says why there is none.
// A single process with no MPI launcher: checkpoints of any world size are read shard by
// shard, one tensor at a time (peak memory: the largest tensor and one copy of it).
// Deliberately does not: re-shard a checkpoint for another world size (ztrain loads any
// world size).
// Exit status: 0 success, 2 bad input (options, checkpoint), 1 anything else.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/tool_main.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/train/input_fingerprint.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

/// The run's tokenizer description: data.tokenizer, else tokenizer.json beside data.train.
std::string run_tokenizer_path(const zt::Config& deck) {
    if (!deck.data.tokenizer.empty()) return deck.data.tokenizer;
    return (fs::path(zt::first_corpus_pattern(deck.data.train)).parent_path() / "tokenizer.json").string();
}

/// The run's tokenizer in Hugging Face's files for a directory export of `step_dir`; empty, with
/// `note` saying why, when there is none to add. A checkpoint that cannot be read is left
/// to consolidate(), which names what is wrong with it.
std::optional<zt::HfTokenizerFiles> run_tokenizer(const std::string& step_dir, std::string* note) {
    nlohmann::json meta;
    try {
        meta = zt::read_checkpoint_meta(step_dir);
    } catch (const zt::InputError&) {
        return std::nullopt;
    }
    const zt::Config deck = zt::parse_deck_text(meta.value("config_ini", std::string()),
                                                step_dir + " (the checkpoint's config)");
    const nlohmann::json inputs = meta.value("inputs", nlohmann::json());
    const std::string path = run_tokenizer_path(deck);
    if (inputs.is_object() && !inputs.value("tokenizer", nlohmann::json()).is_object()) {
        *note = "the run used no tokenizer file";
        return std::nullopt;
    }
    if (!fs::is_regular_file(path)) {
        *note = zt::str("the run's tokenizer ", path, " is not there (relative to this directory)");
        return std::nullopt;
    }
    // The tokenizer's entry alone (the training shards need not be there); a checkpoint
    // written before ztrain fingerprinted its inputs has nothing to compare.
    const nlohmann::json recorded = inputs.is_object() ? nlohmann::json{{"tokenizer", inputs["tokenizer"]}} : inputs;
    const std::vector<std::string> changes = zt::input_changes(recorded, zt::input_fingerprint({}, {}, path));
    if (!changes.empty()) {
        *note = zt::str(path, " is not the run's tokenizer (", changes.front(), ")");
        return std::nullopt;
    }
    std::optional<zt::HfTokenizerFiles> files = zt::hf_tokenizer_files(path, deck.model.seq_len);
    if (!files) *note = zt::str("the run's tokenizer (", path, ") is the byte tokenizer, which Hugging Face has no equal of");
    return files;
}

/// A directory export's extras: the run's tokenizer files and special ids, when it has them.
/// A tokenizer (or recorded deck) that cannot be read costs the export its tokenizer files
/// only: the weights never needed them.
zt::HfDirectoryExtras tokenizer_extras(const std::string& step_dir, std::string* note) {
    zt::HfDirectoryExtras extras;
    std::optional<zt::HfTokenizerFiles> tok;
    try {
        tok = run_tokenizer(step_dir, note);
    } catch (const zt::InputError& e) {
        *note = e.what();
    }
    if (tok) {
        extras.config_fields = {{"bos_token_id", tok->bos}, {"eos_token_id", tok->eos}};
        extras.files = {{"tokenizer.json", tok->tokenizer_json}, {"tokenizer_config.json", tok->tokenizer_config}};
    }
    return extras;
}

/// What the command line gives.
struct Options {
    std::string ckpt;
    std::string output;
    std::string dtype = "fp32";
    std::string max_shard_size;
    std::string lora;
    std::string base;
};

/// The usage text and the options --help shows, bound to `o`.
po::options_description visible_options(Options& o) {
    po::options_description visible(
        "Usage:\n"
        "  zt-consolidate CKPT_DIR --output FILE [--dtype fp32|bf16|fp16] [--with-optimizer]\n"
        "  zt-consolidate CKPT_DIR --output DIR/ [--dtype fp32|bf16|fp16] [--max-shard-size SIZE]\n"
        "  zt-consolidate CKPT_DIR --output DIR/ --lora adapter|merge [--base BASE] [--dtype fp32|bf16|fp16]\n"
        "  zt-consolidate CKPT_DIR --info\n\n"
        "CKPT_DIR: a checkpoint directory (its `latest` step is used) or a step_N directory.\n"
        "FILE: .h5 (ztrain tensor names, one dataset each) or .safetensors (Hugging Face names and\n"
        "layout of the checkpoint's family: GPT-2 or Llama). A directory (or a name ending in /)\n"
        "gets model.safetensors + config.json (GPT2LMHeadModel or LlamaForCausalLM):\n"
        "AutoModelForCausalLM.from_pretrained(DIR), or ztrain --model.from_hf=DIR; and the run's\n"
        "tokenizer.json + tokenizer_config.json when it used a Hugging Face or GPT-2 tokenizer\n"
        "(found as zt-eval finds it: data.tokenizer, or tokenizer.json beside data.train).\n\nOptions");
    visible.add_options()
        ("help,h", "print this help and exit")
        ("output,o", po::value(&o.output), "the file to write (.h5, .hdf5 or .safetensors)")
        ("dtype", po::value(&o.dtype), "element type of the weights: fp32 (default), bf16, fp16")
        ("with-optimizer", "also write AdamW m and v (fp32; .h5 only)")
        ("max-shard-size", po::value(&o.max_shard_size),
         "a directory's weights in files of at most SIZE (5GB, 500MB, 100KB: powers of 10; or bytes), "
         "model-00001-of-0000N.safetensors ... + model.safetensors.index.json, as save_pretrained")
        ("lora", po::value(&o.lora),
         "a LoRA run's checkpoint into a directory: adapter (PEFT's adapter_model.safetensors + "
         "adapter_config.json, for peft.PeftModel.from_pretrained) | merge (a Hugging Face model, the "
         "adapters merged into its weights)")
        ("base", po::value(&o.base),
         "a LoRA checkpoint's frozen base, which it does not hold: the weights its run started from "
         "(model.init_from: a Hugging Face directory, .safetensors or .h5), when they are no longer at "
         "the path the checkpoint records")
        ("info", "describe the checkpoint (step, world size, tensors, shard files) and exit");
    return visible;
}

/// The step zt-consolidate reads for `ckpt` (a step, or a checkpoints directory's newest),
/// resolved once for the tokenizer files, the base check and the damaged-step advice (it was
/// resolved for each). Empty when none resolves (consolidate() then names what is wrong).
std::string step_read(const std::string& ckpt) {
    try {
        return zt::resolve_resume(ckpt, ckpt);
    } catch (const zt::InputError&) {
        return {};
    }
}

int run(int argc, char** argv) {
    Options o;
    po::options_description visible = visible_options(o);
    po::options_description all;
    all.add(visible).add_options()("checkpoint", po::value(&o.ckpt), "checkpoint directory");
    po::positional_options_description positional;
    positional.add("checkpoint", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        std::cout << visible << "\n";
        return zt::kExitOk;
    }
    ZT_INPUT_CHECK(!o.ckpt.empty(), "no checkpoint directory given (see --help)");
    if (vm.count("info")) {
        ZT_INPUT_CHECK(o.output.empty() && !vm.count("with-optimizer") && !vm.count("max-shard-size"),
                       "--info describes a checkpoint; it does not take --output, --with-optimizer or --max-shard-size");
        std::cout << zt::checkpoint_info(o.ckpt);
        return zt::kExitOk;
    }
    ZT_INPUT_CHECK(!o.output.empty(), "--output FILE is required (or --info)");
    const zt::DType t = zt::parse_dtype(o.dtype, "--dtype");
    ZT_INPUT_CHECK(o.lora.empty() || o.lora == "adapter" || o.lora == "merge", "--lora = '", o.lora,
                   "': expected adapter or merge");
    const zt::LoraExport lora_export = o.lora == "adapter" ? zt::LoraExport::kAdapter
                                       : o.lora == "merge" ? zt::LoraExport::kMerge
                                                           : zt::LoraExport::kNone;
    const uint64_t shard_bytes = vm.count("max-shard-size") ? zt::parse_max_shard_size(o.max_shard_size) : 0;
    ZT_INPUT_CHECK(shard_bytes == 0 || std::filesystem::is_directory(o.output) || o.output.back() == '/',
                   "--max-shard-size: splits a Hugging Face directory's weights; '", o.output,
                   "' is a file (give a directory, or a name ending in /)");
    const auto t0 = std::chrono::steady_clock::now();
    const bool to_dir = fs::is_directory(o.output) || o.output.back() == '/';
    std::string tokenizer_note;
    const std::string step = step_read(o.ckpt);
    const zt::HfDirectoryExtras extras = to_dir && !step.empty() ? tokenizer_extras(step, &tokenizer_note)
                                                                 : zt::HfDirectoryExtras{};
    std::vector<std::string> files;
    try {
        // A LoRA checkpoint's base against the fingerprint it records.
        if (!step.empty()) zt::check_lora_base_unchanged(step, o.base);
        // consolidate() takes the path as given: its refusals name it and the step apart.
        files = zt::consolidate(o.ckpt, o.output, t, vm.count("with-optimizer") > 0, shard_bytes, extras, lora_export,
                                o.base);
    } catch (const zt::InputError& e) {
        // A damaged step: name the newest complete one beside it, the one to consolidate
        // (not when it is the step just read: the error is about something else).
        const std::string good = zt::newest_complete_checkpoint(o.ckpt);
        std::error_code ec;
        if (good.empty() || (!step.empty() && fs::equivalent(step, good, ec))) throw;
        throw zt::InputError(zt::str(e.what(), ". The newest complete checkpoint there is ", good,
                                     ": zt-consolidate ", good, " --output ", o.output));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool hf_dir = std::filesystem::is_directory(o.output);
    double bytes = 0;
    for (const std::string& f : files) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(f, ec);
        if (!ec) bytes += static_cast<double>(size);
    }
    // As the directory was named: OUTPUT/model.safetensors.
    auto shown = [&](const std::string& f) {
        return hf_dir ? (std::filesystem::path(o.output) / std::filesystem::path(f).filename()).string() : f;
    };
    const std::string weights = files.size() == 1 ? shown(files[0])
                                                  : zt::str(shown(files.front()), " ... ",
                                                            std::filesystem::path(files.back()).filename().string(), " (",
                                                            files.size(), " shards), model.safetensors.index.json");
    // A PEFT adapter directory: adapter_config.json, no model config or tokenizer.
    const bool adapter = lora_export == zt::LoraExport::kAdapter;
    std::string others = !hf_dir ? "" : adapter ? " and adapter_config.json" : " and config.json";
    for (const auto& file : extras.files) others += adapter ? "" : ", " + file.first;
    std::printf("zt-consolidate: wrote %s%s (%s, %.2f MiB) in %.2f s\n", weights.c_str(), others.c_str(),
                zt::dtype_name(t), bytes / 1048576.0, s);
    if (!tokenizer_note.empty()) std::printf("zt-consolidate: note: no tokenizer files: %s\n", tokenizer_note.c_str());
    return zt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return zt::run_tool("zt-consolidate", [&] { return run(argc, argv); }); }
