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
// A single process with no MPI launcher: checkpoints of any world size are read shard by
// shard, one tensor at a time (peak memory: the largest tensor and one copy of it).
// Deliberately does not: write tokenizer files (the run's tokenizer.json sits next to its
// shards), or re-shard a checkpoint for another world size (ztrain loads any world size).
// Exit status: 0 success, 2 bad input (options, checkpoint), 1 anything else.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/tool_main.hpp"

namespace po = boost::program_options;

namespace {

int run(int argc, char** argv) {
    std::string ckpt;
    std::string output;
    std::string dtype = "fp32";
    std::string max_shard_size;
    po::options_description visible(
        "Usage:\n"
        "  zt-consolidate CKPT_DIR --output FILE [--dtype fp32|bf16|fp16] [--with-optimizer]\n"
        "  zt-consolidate CKPT_DIR --output DIR/ [--dtype fp32|bf16|fp16] [--max-shard-size SIZE]\n"
        "  zt-consolidate CKPT_DIR --info\n\n"
        "CKPT_DIR: a checkpoint directory (its `latest` step is used) or a step_N directory.\n"
        "FILE: .h5 (ztrain tensor names, one dataset each) or .safetensors (Hugging Face names and\n"
        "layout of the checkpoint's family: GPT-2 or Llama). A directory (or a name ending in /)\n"
        "gets model.safetensors + config.json (GPT2LMHeadModel or LlamaForCausalLM):\n"
        "AutoModelForCausalLM.from_pretrained(DIR), or ztrain --model.from_hf=DIR.\n\nOptions");
    visible.add_options()
        ("help,h", "print this help and exit")
        ("output,o", po::value(&output), "the file to write (.h5, .hdf5 or .safetensors)")
        ("dtype", po::value(&dtype), "element type of the weights: fp32 (default), bf16, fp16")
        ("with-optimizer", "also write AdamW m and v (fp32; .h5 only)")
        ("max-shard-size", po::value(&max_shard_size),
         "a directory's weights in files of at most SIZE (5GB, 500MB, 100KB: powers of 10; or bytes), "
         "model-00001-of-0000N.safetensors ... + model.safetensors.index.json, as save_pretrained")
        ("info", "describe the checkpoint (step, world size, tensors, shard files) and exit");
    po::options_description all;
    all.add(visible).add_options()("checkpoint", po::value(&ckpt), "checkpoint directory");
    po::positional_options_description positional;
    positional.add("checkpoint", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        std::cout << visible << "\n";
        return zt::kExitOk;
    }
    ZT_INPUT_CHECK(!ckpt.empty(), "no checkpoint directory given (see --help)");
    if (vm.count("info")) {
        ZT_INPUT_CHECK(output.empty() && !vm.count("with-optimizer") && !vm.count("max-shard-size"),
                       "--info describes a checkpoint; it does not take --output, --with-optimizer or --max-shard-size");
        std::cout << zt::checkpoint_info(ckpt);
        return zt::kExitOk;
    }
    ZT_INPUT_CHECK(!output.empty(), "--output FILE is required (or --info)");
    const zt::DType t = zt::parse_dtype(dtype, "--dtype");
    const uint64_t shard_bytes = vm.count("max-shard-size") ? zt::parse_max_shard_size(max_shard_size) : 0;
    ZT_INPUT_CHECK(shard_bytes == 0 || std::filesystem::is_directory(output) || output.back() == '/',
                   "--max-shard-size: splits a Hugging Face directory's weights; '", output,
                   "' is a file (give a directory, or a name ending in /)");
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> files;
    try {
        files = zt::consolidate(ckpt, output, t, vm.count("with-optimizer") > 0, shard_bytes);
    } catch (const zt::InputError& e) {
        // A damaged step: name the newest complete one beside it, the one to consolidate.
        const std::string good = zt::newest_complete_checkpoint(ckpt);
        if (good.empty()) throw;
        throw zt::InputError(zt::str(e.what(), ". The newest complete checkpoint there is ", good,
                                     ": zt-consolidate ", good, " --output ", output));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool hf_dir = std::filesystem::is_directory(output);
    double bytes = 0;
    for (const std::string& f : files) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(f, ec);
        if (!ec) bytes += static_cast<double>(size);
    }
    // As the directory was named: OUTPUT/model.safetensors.
    auto shown = [&](const std::string& f) {
        return hf_dir ? (std::filesystem::path(output) / std::filesystem::path(f).filename()).string() : f;
    };
    const std::string weights = files.size() == 1 ? shown(files[0])
                                                  : zt::str(shown(files.front()), " ... ",
                                                            std::filesystem::path(files.back()).filename().string(), " (",
                                                            files.size(), " shards), model.safetensors.index.json");
    std::printf("zt-consolidate: wrote %s%s (%s, %.2f MiB) in %.2f s\n", weights.c_str(),
                hf_dir ? " and config.json" : "", zt::dtype_name(t), bytes / 1048576.0, s);
    return zt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return zt::run_tool("zt-consolidate", [&] { return run(argc, argv); }); }
