// The Hugging Face form of a run's tokenizer, for zt-consolidate's model directories:
// tokenizer.json and tokenizer_config.json, which AutoTokenizer.from_pretrained reads.
//
// An hf description's file is the user's tokenizer.json as zt-prepare copied it, so it goes
// out as it is. A gpt2 description's vocab.json and merges.txt are laid out as GPT-2's own
// tokenizer.json is (ByteLevel pre-tokenizer, post-processor and decoder, BPE model,
// <|endoftext|> an added special token), with tokenizer_class GPT2Tokenizer. Deliberately
// does not: export the byte tokenizer (Hugging Face has no tokenizer of its kind), or carry a
// chat template (zt-prepare keeps none beside the shards).
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace fs = std::filesystem;

namespace {

/// merges.txt's merges in order, as "a b" strings (GPT-2's tokenizer.json keeps that form;
/// make_gpt2_tokenizer has checked every line).
nlohmann::json merges_of(const std::string& path) {
    std::istringstream in(detail::read_input_file(path, "a GPT-2 merges file"));
    nlohmann::json merges = nlohmann::json::array();
    std::string line;
    for (size_t line_no = 1; std::getline(in, line); ++line_no) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        merges.push_back(line);
    }
    return merges;
}

/// GPT-2's tokenizer.json layout around a vocabulary and its merges.
std::string gpt2_tokenizer_json(const std::string& vocab_path, const std::string& merges_path, uint32_t eot,
                                const std::string& eot_text) {
    using ojson = nlohmann::ordered_json;
    const ojson byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                              {"use_regex", true}};
    ojson post = byte_level;
    post["trim_offsets"] = false;
    ojson model = {{"type", "BPE"},       {"dropout", nullptr},      {"unk_token", nullptr},
                   {"continuing_subword_prefix", ""},                {"end_of_word_suffix", ""},
                   {"fuse_unk", false},   {"byte_fallback", false}};
    model["vocab"] = ojson::parse(detail::read_input_file(vocab_path, "a GPT-2 vocabulary JSON"));
    model["merges"] = merges_of(merges_path);
    const ojson root = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens",
         {{{"id", eot}, {"content", eot_text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
           {"normalized", false}, {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", byte_level},
        {"post_processor", post},
        {"decoder", byte_level},
        {"model", model},
    };
    return root.dump(2) + "\n";
}

}  // namespace

std::optional<HfTokenizerFiles> hf_tokenizer_files(const std::string& description_path, long model_max_length) {
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(description_path);  // checks every file it names
    if (tok->type() == "byte") return std::nullopt;
    fs::path path(description_path);
    std::error_code ec;
    if (fs::is_directory(path, ec)) path /= "tokenizer.json";
    const nlohmann::json desc = nlohmann::json::parse(detail::read_input_file(path.string(), "a tokenizer description"));
    const auto named = [&](const char* key) {
        const fs::path p(desc.at(key).get<std::string>());
        return (p.is_absolute() ? p : path.parent_path() / p).string();
    };
    HfTokenizerFiles files;
    files.bos = tok->eot();
    files.eos = tok->end_of_text();
    const std::string bos_text = tok->decode({files.bos});
    const bool gpt2 = tok->type() == "gpt2";
    files.tokenizer_json = gpt2 ? gpt2_tokenizer_json(named("vocab"), named("merges"), files.bos, bos_text)
                                : detail::read_input_file(named("file"), "a Hugging Face tokenizer.json");
    nlohmann::ordered_json config = {
        // PreTrainedTokenizerFast reads any tokenizer.json as it is, in transformers 4 and 5.
        {"tokenizer_class", gpt2 ? "GPT2Tokenizer" : "PreTrainedTokenizerFast"},
        {"bos_token", bos_text},
        {"eos_token", tok->decode({files.eos})},
        {"model_max_length", model_max_length},
        // ztrain decodes tokens to their bytes; no clean-up of spaces before punctuation.
        {"clean_up_tokenization_spaces", false},
    };
    if (gpt2) config["add_prefix_space"] = false;
    files.tokenizer_config = config.dump(2) + "\n";
    return files;
}

}  // namespace zt
