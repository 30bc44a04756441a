// zt-eval: multiple-choice evaluation (HellaSwag-style tasks) of a trained or downloaded model.
//
//   mpirun -np N zt-eval CKPT_DIR|HF_DIR --tasks FILE[,FILE...] [--limit K] [--output results.json]
//                        [--per-item items.jsonl] [--tokenizer FILE] [--batch B] [--threads T]
//
// CKPT_DIR: a checkpoint directory (its `latest` step) or a step directory; the model and
// the tokenizer come from the deck the checkpoint stores (data.tokenizer, or tokenizer.json
// beside data.train). HF_DIR: a Hugging Face model directory (config.json + safetensors, as
// model.from_hf reads it) with tokenizer.json, or vocab.json + merges.txt. Each rank holds the
// model whole and scores a block of the examples through the inference path, each example's
// context once (CachedChoiceEvaluator, train/choice_eval.hpp), every score the same at any
// world size; the numbers and their definitions: docs/evaluation.md. Exit status: 0 success, 2 bad input, 1 anything else.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/model_source.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/comma_list.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/mpi_start.hpp"
#include "ztrain/core/output_paths.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/train/choice_eval.hpp"
#include "ztrain/train/input_fingerprint.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

struct EvalOptions {
    std::string model;
    std::string base;  ///< a LoRA checkpoint's frozen base where it has moved
    std::string tasks;
    std::string output;
    std::string per_item;
    std::string tokenizer;
    long limit = 0;
    int batch = 32;
    int threads = 0;
};

/// --output and --per-item, before any work: files in existing directories, neither the
/// other nor anything zt-eval reads (a task file named as the output would be replaced).
void check_outputs(const EvalOptions& o) {
    std::vector<zt::ReadPath> inputs{{"the model directory", o.model}, {"--tokenizer", o.tokenizer}, {"--base", o.base}};
    for (const std::string& file : zt::split_comma_list(o.tasks)) inputs.push_back({"a --tasks file", file});
    for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--output", o.output},
                                     std::pair<const char*, const std::string&>{"--per-item", o.per_item}}) {
        if (path.empty()) continue;
        const fs::path parent = fs::absolute(path).parent_path();
        ZT_INPUT_CHECK(fs::is_directory(parent), flag, " ", path, ": directory '", parent.string(),
                       "' does not exist");
        ZT_INPUT_CHECK(!fs::is_directory(path), flag, " ", path, ": is a directory (name a file)");
        zt::refuse_output_over_inputs(flag, path, inputs);
    }
    ZT_INPUT_CHECK(o.output.empty() || o.per_item.empty() || !zt::same_path(o.output, o.per_item),
                   "--output and --per-item name the same file (", o.output, "): one would overwrite the other");
}

/// Parses the command line; false for --help (printed by rank 0).
bool parse(int argc, char** argv, EvalOptions& o, bool root) {
    po::options_description visible(
        "Usage:\n  mpirun -np N zt-eval CKPT_DIR|HF_DIR --tasks FILE[,FILE...] [--limit K] [--output results.json]\n"
        "              [--base DIR]\n\n"
        "CKPT_DIR: a checkpoint directory (its latest step) or a step directory; HF_DIR: a Hugging Face\n"
        "model directory (config.json, model.safetensors, tokenizer.json or vocab.json + merges.txt).\n"
        "Prints acc, acc_norm and acc_token per task (definitions: docs/evaluation.md).\n\nOptions");
    visible.add_options()("help,h", "print this help and exit")(
        "tasks", po::value(&o.tasks), "task files, comma-separated: HellaSwag JSON Lines or llm.c's .bin")(
        "limit", po::value(&o.limit), "the first K examples of each task (0: all)")(
        "output,o", po::value(&o.output), "also write the results as JSON to this file")(
        "per-item", po::value(&o.per_item),
        "also write one JSON line per example to this file: task, index, label and each ending's summed "
        "log-likelihood (loglik), characters (chars) and scored tokens (tokens)")(
        "tokenizer", po::value(&o.tokenizer), "a ztrain tokenizer description (default: found as said above)")(
        "batch", po::value(&o.batch), "endings per forward, of one example or of several consecutive ones (default 32)")(
        "threads", po::value(&o.threads), "CPU threads per rank (0: cores / ranks on the node)")(
        "base", po::value(&o.base),
        "a LoRA checkpoint's frozen base where it is now, if it has moved from the path the checkpoint records");
    po::options_description all;
    all.add(visible).add_options()("model", po::value(&o.model), "model directory");
    po::positional_options_description positional;
    positional.add("model", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        if (root) std::cout << visible << "\n";
        return false;
    }
    ZT_INPUT_CHECK(!o.model.empty(), "no model directory given (see --help)");
    ZT_INPUT_CHECK(fs::is_directory(o.model), "model directory '", o.model, "' does not exist");
    ZT_INPUT_CHECK(!o.tasks.empty(), "--tasks: no task file given (see --help)");
    ZT_INPUT_CHECK(o.limit >= 0, "--limit ", o.limit, ": expected an integer >= 0");
    ZT_INPUT_CHECK(o.batch >= 1, "--batch ", o.batch, ": expected an integer >= 1");
    ZT_INPUT_CHECK(o.threads >= 0, "--threads ", o.threads, ": expected an integer >= 0");
    check_outputs(o);
    return true;
}

/// --tokenizer, a Hugging Face directory's own, or the one the checkpoint's run used.
std::unique_ptr<zt::Tokenizer> find_tokenizer(const EvalOptions& o, const zt::ModelSource& src) {
    zt::ModelTokenizerPlaces places{o.tokenizer, src.hf_dir ? src.path : "", "", "", o.model};
    if (o.tokenizer.empty() && !src.hf_dir) {
        const zt::Config cfg = zt::parse_deck_text(src.deck, src.step_dir + " (the checkpoint's config)");
        places.run_tokenizer = cfg.data.tokenizer;
        places.run_train = cfg.data.train;
    }
    return zt::find_model_tokenizer(places);
}

void write_file(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp);
        out << text;
        ZT_REQUIRE(out.good(), "cannot write ", tmp);
    }
    fs::rename(tmp, path);  // a reader never sees half a file
}

/// --per-item's lines for one task: each example's ending scores, in example order.
std::string per_item_lines(const zt::ChoiceTask& task, const std::vector<std::vector<zt::EndingScore>>& items) {
    std::string text;
    for (size_t i = 0; i < items.size(); ++i) {
        nlohmann::ordered_json line{{"task", task.name}, {"index", i}, {"label", task.examples[i].label}};
        for (const zt::EndingScore& s : items[i]) {
            line["loglik"].push_back(s.loglik);
            line["chars"].push_back(s.chars);
            line["tokens"].push_back(s.tokens);
        }
        text += line.dump() + "\n";
    }
    return text;
}

/// Rows one forward takes, and rows the cache holds: --batch rows as long as the longest, up
/// to 512, and at least the longest row. Consecutive examples whose contexts, rows and
/// endings fit run side by side (CachedChoiceEvaluator).
int forward_rows(const EvalOptions& o, int context) {
    return static_cast<int>(std::max<long>(context, std::min<long>(static_cast<long>(context) * o.batch, 512)));
}

int run(int argc, char** argv) {
    auto comm = zt::make_mpi_communicator(MPI_COMM_WORLD);
    const bool root = comm->rank() == 0;
    EvalOptions o;
    if (!parse(argc, argv, o, root)) return zt::kExitOk;
    const zt::ModelSource src = zt::open_model_source(o.model, o.base);
    if (!src.hf_dir) zt::check_lora_base_unchanged(src.step_dir, o.base);
    const zt::ModelConfig& mc = src.model;
    const std::unique_ptr<zt::Tokenizer> tok = find_tokenizer(o, src);
    ZT_INPUT_CHECK(tok->vocab_size() <= mc.vocab_size, "the tokenizer's ", tok->vocab_size(),
                   " tokens exceed the model's vocabulary (", mc.vocab_size, ")");
    const std::vector<zt::ChoiceTask> tasks = zt::read_choice_tasks(o.tasks, *tok);
    // results.json is keyed by task name: a second task of a name would replace the first.
    for (size_t i = 0; i < tasks.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            ZT_INPUT_CHECK(tasks[j].name != tasks[i].name, "--tasks: ", tasks[j].file, " and ", tasks[i].file,
                           " are both task '", tasks[i].name,
                           "' (a task is named by its file's name without the extension): rename one");
        }
    }
    const int threads = o.threads > 0 ? o.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / comm->size());
    // The model whole on every rank, its inference path with a cache sized by the longest
    // row, not by the model's positions (a Hugging Face model may declare 128k of them).
    int context = 1;
    int branch = 1;
    for (const zt::ChoiceTask& task : tasks) {
        const zt::ChoiceExtents ext = zt::choice_extents(task, o.limit, mc.seq_len, tok->eot());
        context = std::max(context, ext.row);
        branch = std::max(branch, ext.branch);
    }
    const int rows = forward_rows(o, context);
    // Logits for a forward's branch rows (a context keeps its last row's only): up to 512
    // rows, and the longest branch, not every row of a long context.
    const int logits_rows = std::min(rows, std::max(branch, 512));
    const std::unique_ptr<zt::Backend> backend = zt::make_cpu_backend(threads);
    zt::Generator gen(mc, *backend, logits_rows, rows, rows);
    zt::ResidentWeights weights(gen.layout(), *backend);
    zt::read_model_weights(src, gen.layout(), [&](int unit, size_t begin, const float* data, size_t n) {
        weights.set(unit, begin, data, n);
    });
    zt::CachedChoiceEvaluator evaluator(gen, weights, *comm, o.batch, tok->eot());
    nlohmann::ordered_json results;
    results["model"] = src.hf_dir ? o.model : src.step_dir;
    results["world_size"] = comm->size();
    std::string per_item;
    for (const zt::ChoiceTask& task : tasks) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::vector<zt::EndingScore>> items;
        const zt::ChoiceCounts c = evaluator.evaluate(task, o.limit, o.per_item.empty() ? nullptr : &items);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        per_item += per_item_lines(task, items);
        const double n = static_cast<double>(std::max(1L, c.n));
        results["tasks"][task.name] = {{"file", task.file},
                                       {"n", c.n},
                                       {"acc", static_cast<double>(c.acc) / n},
                                       {"acc_norm", static_cast<double>(c.acc_norm) / n},
                                       {"acc_token", static_cast<double>(c.acc_token) / n},
                                       {"seconds", s},
                                       {"examples_per_s", static_cast<double>(c.n) / s}};
        if (root) std::printf("%s  (%.1f examples/s)\n", zt::choice_summary(task.name, c).c_str(), static_cast<double>(c.n) / s);
    }
    if (root && !o.output.empty()) write_file(o.output, results.dump(2) + "\n");
    if (root && !o.per_item.empty()) write_file(o.per_item, per_item);
    return zt::kExitOk;
}

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    zt::prefer_isolated_mpi_singleton();
    MPI_Init(&argc, &argv);
    int code = zt::kExitOk;
    try {
        code = run(argc, argv);
    } catch (const zt::InputError& e) {
        // Every rank reads the same inputs, so every rank fails alike: no rank is left waiting.
        if (world_rank() == 0) std::fprintf(stderr, "zt-eval: error: %s\n", e.what());
        code = zt::kExitBadInput;
    } catch (const po::error& e) {
        if (world_rank() == 0) std::fprintf(stderr, "zt-eval: error: %s (see --help)\n", e.what());
        code = zt::kExitBadInput;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zt-eval: rank %d: fatal: %s\n", world_rank(), e.what());
        std::fflush(stderr);
        int size = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, zt::kExitFailure);
        code = zt::kExitFailure;
    }
    std::fflush(stdout);
    MPI_Finalize();
    return code;
}
