// zt-generate: text from a trained model, streamed to stdout as it is decoded.
//
//   zt-generate CKPT_DIR|HF_DIR --prompt TEXT|--prompt-file F [--max-new-tokens N]
//               [--temperature T] [--top-k K] [--top-p P] [--seed S] [--tokenizer F] [--threads N]
//               [--ignore-eos] [--chat [--chat-template llama3|chatml]] [--print-prompt-tokens]
//
// One process, the CPU backend's threads. The model is a checkpoint (any world size and ZeRO
// stage, read piece by piece as zt-consolidate reads it) or a Hugging Face model directory;
// its weights stay resident and decoding runs the model's key/value-cache forward
// (model/generator.hpp), one row per token. The prompt starts with the tokenizer's document
// separator, as every training document does (zt-prepare); with --chat it is a conversation
// rendered by the chat template (zt-prepare's llama3 or chatml, from --chat-template or the
// tokenizer_config.json beside the tokenizer) followed by the assistant's header, as
// apply_chat_template(..., add_generation_prompt=True) renders it. Decoding stops at
// end-of-text (the tokenizer's, and a Hugging Face directory's eos_token_id), at the
// template's end-of-turn token with --chat, after --max-new-tokens, or when the context
// (model.seq_len) is full. Timings and tokens/s go to stderr at the end, so
// stdout holds the text only.
// Exit status: 0 success, 2 bad input (options, model, tokenizer, prompt), 1 anything else.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/model_source.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/tool_main.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/train/input_fingerprint.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

struct Options {
    std::string model;
    std::string base;  ///< a LoRA checkpoint's frozen base where it has moved
    std::string prompt;
    std::string prompt_file;
    std::string tokenizer;
    long max_new_tokens = 128;
    double temperature = 1.0;
    long top_k = 0;
    double top_p = 1.0;
    long long seed = 1234;
    long threads = 0;
    bool chat = false;
    std::string chat_template;
    bool print_prompt_tokens = false;
    bool ignore_eos = false;
};

/// JSON file contents; InputError naming the file when unreadable or not JSON.
nlohmann::json read_json(const fs::path& file) {
    std::ifstream in(file);
    ZT_INPUT_CHECK(in.good(), file.string(), ": cannot read");
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw zt::InputError(zt::str(file.string(), ": not JSON: ", e.what()));
    }
}

/// --tokenizer; else a Hugging Face directory's own; else the one the checkpoint's run used.
std::unique_ptr<zt::Tokenizer> find_tokenizer(const Options& o, const zt::ModelSource& src) {
    zt::ModelTokenizerPlaces places{o.tokenizer, src.hf_dir ? src.path : "", "", "", src.path};
    if (o.tokenizer.empty() && !src.hf_dir && !src.deck.empty()) {
        const zt::Config deck = zt::parse_deck_text(src.deck, src.step_dir + " (config_ini)");
        places.run_tokenizer = deck.data.tokenizer;
        places.run_train = deck.data.train;
    }
    return zt::find_model_tokenizer(places);
}

/// The token ids that end generation: the tokenizer's end-of-text and a Hugging Face
/// directory's eos_token_id (a number or a list: Llama 3's instruct models end turns with
/// <|eot_id|>).
std::set<int> stop_tokens(const zt::Tokenizer& tok, const zt::ModelSource& src) {
    std::set<int> stop{static_cast<int>(tok.eot())};
    if (!src.hf_dir) return stop;
    const nlohmann::json cfg = read_json(fs::path(src.path) / "config.json");
    const nlohmann::json eos = cfg.value("eos_token_id", nlohmann::json());
    for (const nlohmann::json& e : eos.is_array() ? eos : nlohmann::json::array({eos})) {
        if (e.is_number_integer()) stop.insert(e.get<int>());
    }
    return stop;
}

/// Parses the command line; false when --help was printed.
bool parse(int argc, char** argv, Options& o) {
    po::options_description visible(
        "Usage:\n"
        "  zt-generate CKPT_DIR|HF_DIR --prompt TEXT|--prompt-file F [--max-new-tokens N] [--temperature T]\n"
        "              [--top-k K] [--top-p P] [--seed S] [--tokenizer F] [--threads N]\n"
        "              [--chat [--chat-template llama3|chatml]] [--print-prompt-tokens] [--base DIR]\n\n"
        "CKPT_DIR: a checkpoint directory (its `latest` step) or a step_N directory; HF_DIR: a Hugging Face\n"
        "model directory (config.json, model.safetensors, tokenizer.json). The text streams to stdout;\n"
        "timings and tokens/s go to stderr.\n\nOptions");
    visible.add_options()
        ("help,h", "print this help and exit")
        ("prompt", po::value(&o.prompt), "the text to continue")
        ("prompt-file", po::value(&o.prompt_file), "read the prompt from this file")
        ("max-new-tokens", po::value(&o.max_new_tokens), "tokens to generate at most (default 128)")
        ("temperature", po::value(&o.temperature), "softmax temperature; 0 = greedy (default 1)")
        ("top-k", po::value(&o.top_k), "sample among the K most likely tokens; 0 = all (default 0)")
        ("top-p", po::value(&o.top_p), "sample among the most likely tokens holding probability P (default 1)")
        ("seed", po::value(&o.seed), "seed of the sampling draws (default 1234)")
        ("tokenizer", po::value(&o.tokenizer),
         "tokenizer file: zt-prepare's tokenizer.json or a Hugging Face one (default: the model's)")
        ("threads", po::value(&o.threads), "compute threads; 0 = all cores (default 0)")
        ("base", po::value(&o.base),
         "a LoRA checkpoint's frozen base where it is now, if it has moved from the path the checkpoint records")
        ("ignore-eos", "do not stop at end-of-text: always --max-new-tokens tokens (benchmarks)")
        ("chat", "the prompt is a conversation: {\"messages\": [...]} or one user message; rendered with the "
                 "chat template, generation stops at its end-of-turn token")
        ("chat-template", po::value(&o.chat_template),
         "llama3 or chatml (default: from the tokenizer_config.json beside the tokenizer)")
        ("print-prompt-tokens", "write the prompt's token ids to stderr before generating");
    po::options_description all;
    all.add(visible).add_options()("model", po::value(&o.model), "checkpoint or Hugging Face directory");
    po::positional_options_description positional;
    positional.add("model", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        std::cout << visible << "\n";
        return false;
    }
    o.chat = vm.count("chat") > 0;
    o.ignore_eos = vm.count("ignore-eos") > 0;
    o.print_prompt_tokens = vm.count("print-prompt-tokens") > 0;
    ZT_INPUT_CHECK(o.chat || o.chat_template.empty(), "--chat-template applies with --chat only");
    ZT_INPUT_CHECK(!o.model.empty(), "no model given: zt-generate CKPT_DIR|HF_DIR --prompt TEXT (see --help)");
    ZT_INPUT_CHECK(vm.count("prompt") + vm.count("prompt-file") == 1,
                   "give exactly one of --prompt TEXT and --prompt-file F");
    ZT_INPUT_CHECK(o.max_new_tokens >= 1, "--max-new-tokens = ", o.max_new_tokens, ": must be at least 1");
    ZT_INPUT_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "--temperature = ", o.temperature,
                   ": must be a finite number >= 0");
    ZT_INPUT_CHECK(o.top_k >= 0, "--top-k = ", o.top_k, ": must be >= 0");
    ZT_INPUT_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p = ", o.top_p, ": must be in (0, 1]");
    ZT_INPUT_CHECK(o.seed >= 0, "--seed = ", o.seed, ": must be >= 0");
    ZT_INPUT_CHECK(o.threads >= 0 && o.threads <= 4096, "--threads = ", o.threads, ": must be in [0, 4096]");
    if (!o.prompt_file.empty() || vm.count("prompt-file")) {
        std::ifstream in(o.prompt_file, std::ios::binary);
        ZT_INPUT_CHECK(in.good() && fs::is_regular_file(o.prompt_file), "--prompt-file: cannot read '",
                       o.prompt_file, "'");
        std::ostringstream text;
        text << in.rdbuf();
        o.prompt = text.str();
    }
    return true;
}

/// The tokens' text: ids past the tokenizer's vocabulary (a model vocabulary may be larger)
/// show as <id>.
std::string token_text(const zt::Tokenizer& tok, int id) {
    if (id < tok.vocab_size()) return tok.decode({static_cast<uint32_t>(id)});
    return zt::str("<", id, ">");
}

/// --chat's template: --chat-template, else the one the tokenizer_config.json beside the
/// tokenizer (--tokenizer's folder, or the Hugging Face directory) names.
zt::ChatTemplate chat_template(const Options& o, const zt::ModelSource& src) {
    if (!o.chat_template.empty()) return zt::parse_chat_template(o.chat_template, "--chat-template");
    fs::path dir;
    if (!o.tokenizer.empty()) {
        dir = fs::is_directory(o.tokenizer) ? fs::path(o.tokenizer) : fs::path(o.tokenizer).parent_path();
    } else if (src.hf_dir) {
        dir = src.path;
    }
    const fs::path config = dir / "tokenizer_config.json";
    if (!dir.empty()) {
        if (const std::optional<zt::ChatTemplate> t = zt::detect_chat_template(config.string())) return *t;
    }
    throw zt::InputError(zt::str("--chat: ", dir.empty() ? std::string("no tokenizer_config.json to read")
                                                         : config.string() + " has no chat_template recognisable",
                                 " as llama3 or chatml; give --chat-template llama3|chatml"));
}

/// --chat's conversation: a prompt that is a JSON object with "messages" (a list of
/// {"role": system|user|assistant, "content": TEXT}), else the prompt as one user message.
std::vector<zt::ChatMessage> conversation(const std::string& prompt) {
    const nlohmann::json j = nlohmann::json::parse(prompt, nullptr, false);
    if (!j.is_object() || !j.contains("messages")) return {zt::ChatMessage{"user", prompt}};
    const nlohmann::json& list = j.at("messages");
    ZT_INPUT_CHECK(list.is_array() && !list.empty(), "--chat: \"messages\" must be a non-empty list, found ",
                   list.dump());
    std::vector<zt::ChatMessage> out;
    for (size_t i = 0; i < list.size(); ++i) {
        const nlohmann::json& m = list[i];
        const bool ok = m.is_object() && m.value("role", nlohmann::json()).is_string() &&
                        m.value("content", nlohmann::json()).is_string();
        ZT_INPUT_CHECK(ok, "--chat: messages[", i, "]: expected {\"role\": ..., \"content\": ...}, found ", m.dump());
        const std::string role = m.at("role").get<std::string>();
        ZT_INPUT_CHECK(role == "system" || role == "user" || role == "assistant", "--chat: messages[", i,
                       "].role: unknown role \"", role, "\" (expected system, user or assistant)");
        out.push_back(zt::ChatMessage{role, m.at("content").get<std::string>()});
    }
    return out;
}

/// The prompt's tokens: the document separator then the text, or with --chat the
/// conversation as the template renders it for the assistant to continue (then
/// `end_of_turn` is the template's end-of-turn token).
std::vector<int32_t> prompt_tokens(const Options& o, const zt::ModelSource& src, const zt::Tokenizer& tok,
                                   std::optional<uint32_t>& end_of_turn) {
    std::vector<uint32_t> ids;
    if (o.chat) {
        const zt::ExampleRenderer renderer(tok, chat_template(o, src));
        ids = renderer.render_generation_prompt(conversation(o.prompt));
        end_of_turn = renderer.end_of_turn();
    } else {
        ids.push_back(tok.eot());
        for (uint32_t t : tok.encode(o.prompt)) ids.push_back(t);
    }
    if (o.print_prompt_tokens) {
        std::string list;
        for (uint32_t t : ids) list += (list.empty() ? "" : ", ") + std::to_string(t);
        std::fprintf(stderr, "zt-generate: prompt tokens: [%s]\n", list.c_str());
    }
    return std::vector<int32_t>(ids.begin(), ids.end());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) return zt::kExitOk;
    const auto t_load = std::chrono::steady_clock::now();
    const zt::ModelSource src = zt::open_model_source(o.model, o.base);
    if (!src.hf_dir) zt::check_lora_base_unchanged(src.step_dir, o.base);
    const zt::ModelConfig& mc = src.model;
    const std::unique_ptr<zt::Tokenizer> tok = find_tokenizer(o, src);
    std::optional<uint32_t> end_of_turn;
    const std::vector<int32_t> prompt = prompt_tokens(o, src, *tok, end_of_turn);
    std::set<int> stop = o.ignore_eos ? std::set<int>{} : stop_tokens(*tok, src);
    if (end_of_turn && !o.ignore_eos) stop.insert(static_cast<int>(*end_of_turn));
    const int T = static_cast<int>(prompt.size());
    ZT_INPUT_CHECK(T < mc.seq_len, "--prompt: ", T, " tokens (with the leading separator or template) leave no ",
                   "room in the model's ", mc.seq_len, "-token context (model.seq_len)");
    for (int32_t t : prompt) {
        ZT_INPUT_CHECK(t < mc.vocab_size, "--prompt: token ", t, " is outside the model's vocabulary of ",
                       mc.vocab_size, " (a tokenizer of another model? see --tokenizer)");
    }

    const std::unique_ptr<zt::Backend> backend = zt::make_cpu_backend(static_cast<int>(o.threads));
    // The cache holds what this run can reach, not the whole model.seq_len (a Hugging Face
    // model may declare 128k positions).
    const long reach = std::min<long>(mc.seq_len, T + o.max_new_tokens);
    zt::Generator gen(mc, *backend, 1, static_cast<int>(reach), T);
    zt::ResidentWeights weights(gen.layout(), *backend);
    zt::read_model_weights(src, gen.layout(), [&](int unit, size_t begin, const float* data, size_t n) {
        weights.set(unit, begin, data, n);
    });
    const double load_s = seconds_since(t_load);

    const zt::SamplingOptions sampling{o.temperature, static_cast<int>(o.top_k), o.top_p};
    std::vector<float> logits(static_cast<size_t>(mc.padded_vocab()));
    const auto t_prompt = std::chrono::steady_clock::now();
    gen.forward(weights, prompt.data(), T);
    const double prompt_s = seconds_since(t_prompt);
    const auto t_decode = std::chrono::steady_clock::now();
    long generated = 0;
    std::string why = "--max-new-tokens reached";
    for (;;) {
        gen.logits_row_to_host(0, logits.data());
        const int32_t next = zt::sample_token(logits.data(), mc.vocab_size, sampling, static_cast<uint64_t>(o.seed),
                                              static_cast<uint64_t>(generated));
        ++generated;
        if (stop.count(next)) {
            why = end_of_turn && next == static_cast<int32_t>(*end_of_turn) ? "end of turn" : "end of text";
            break;
        }
        const std::string text = token_text(*tok, next);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        if (generated >= o.max_new_tokens) break;
        if (gen.position() >= gen.context()) {
            why = zt::str("the model's context (", mc.seq_len, " tokens) is full");
            break;
        }
        gen.forward(weights, &next, 1);
    }
    const double decode_s = seconds_since(t_decode);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "zt-generate: loaded in %.2f s; prompt %d tokens in %.3f s (%.1f tokens/s); generated %ld tokens "
                 "in %.3f s (%.1f tokens/s, %d threads); stopped: %s\n",
                 load_s, T, prompt_s, T / prompt_s, generated, decode_s, generated / decode_s, backend->threads(),
                 why.c_str());
    return zt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return zt::run_tool("zt-generate", [&] { return run(argc, argv); }); }
