// The byte tokenizer, the tokenizer description file (tokenizer.json) and shared helpers.
//
// Implements: make_byte_tokenizer, load_tokenizer (dispatching on "type"), and the file
// helpers used by the tokenizers. The GPT-2 BPE tokenizer lives in gpt2_bpe.cpp, the Hugging
// Face tokenizer.json reader in hf_tokenizer.cpp, their shared BPE in bpe_model.cpp and the
// pre-tokenizers in pretokenize.cpp. Deliberately does not support other tokenizer families
// (SentencePiece, WordPiece, Unigram): the description's "type" is the hook.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace fs = std::filesystem;

namespace detail {

bool is_blank(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    });
}

std::string read_input_file(const std::string& path, const std::string& what) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        throw InputError(str(path, ": no such file (expected ", what, ")"));
    }
    if (fs::is_directory(path, ec)) {
        throw InputError(str(path, ": is a directory (expected ", what, ")"));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw InputError(str(path, ": cannot open (", std::strerror(errno), ")"));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) {
        throw InputError(str(path, ": read failed"));
    }
    return ss.str();
}

void copy_file_into(const std::string& from, const std::string& to) {
    std::error_code ec;
    const fs::path dir = fs::path(to).parent_path();
    if (!dir.empty()) {
        fs::create_directories(dir, ec);
        if (ec) {
            throw Error(str(dir.string(), ": cannot create the folder (", ec.message(), ")"));
        }
    }
    if (fs::exists(to, ec) && fs::equivalent(from, to, ec)) {
        return;
    }
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) {
        throw Error(str("cannot copy ", from, " to ", to, " (", ec.message(), ")"));
    }
}

void write_tokenizer_description(const std::string& dir, const nlohmann::json& description) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
        throw Error(str(dir, ": cannot create the folder (", ec.message(), ")"));
    }
    const std::string path = (fs::path(dir) / "tokenizer.json").string();
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) {
            throw Error(str(tmp, ": cannot open for writing (", std::strerror(errno), ")"));
        }
        out << description.dump(2) << "\n";
        out.flush();
        if (!out) {
            throw Error(str(tmp, ": write failed"));
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        throw Error(str("cannot rename ", tmp, " to ", path, " (", std::strerror(errno), ")"));
    }
}

}  // namespace detail

namespace {

constexpr uint32_t kByteEot = 256;
constexpr int kByteVocab = 257;

class ByteTokenizer final : public Tokenizer {
  public:
    std::string type() const override { return "byte"; }
    int vocab_size() const override { return kByteVocab; }
    uint32_t eot() const override { return kByteEot; }
    std::optional<uint32_t> special_token(const std::string& text) const override {
        return text == "<|endoftext|>" ? std::optional<uint32_t>(kByteEot) : std::nullopt;
    }

    std::vector<uint32_t> encode(const std::string& text) const override {
        std::vector<uint32_t> out(text.size());
        for (size_t i = 0; i < text.size(); ++i) {
            out[i] = static_cast<uint8_t>(text[i]);
        }
        return out;
    }

    std::string decode(const std::vector<uint32_t>& tokens) const override {
        std::string out;
        out.reserve(tokens.size());
        for (uint32_t t : tokens) {
            if (t < 256) {
                out.push_back(static_cast<char>(t));
            } else if (t == kByteEot) {
                // Same text as GPT-2's end-of-text token, so samples look alike.
                out += "<|endoftext|>";
            } else {
                throw Error(str("byte tokenizer: cannot decode token ", t, " (vocab_size ",
                                kByteVocab, ")"));
            }
        }
        return out;
    }

    void save(const std::string& dir) const override {
        detail::write_tokenizer_description(
            dir, nlohmann::json{{"type", "byte"}, {"vocab_size", kByteVocab}, {"eot", kByteEot}});
    }
};

/// Checks an optional integer field of the description against the loaded tokenizer.
void check_field(const nlohmann::json& desc, const std::string& path, const char* key,
                 int64_t actual, const std::string& source) {
    if (!desc.contains(key)) {
        return;
    }
    const nlohmann::json& v = desc.at(key);
    if (!v.is_number_integer()) {
        throw InputError(str(path, ": \"", key, "\" must be an integer (found ", v.dump(), ")"));
    }
    if (v.get<int64_t>() != actual) {
        throw InputError(
            str(path, ": \"", key, "\" is ", v.get<int64_t>(), " but ", source, " gives ", actual));
    }
}

std::string string_field(const nlohmann::json& desc, const std::string& path, const char* key,
                         const char* why) {
    if (!desc.contains(key) || !desc.at(key).is_string()) {
        throw InputError(str(path, ": missing string field \"", key, "\" (", why, ")"));
    }
    return desc.at(key).get<std::string>();
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
    return std::make_unique<ByteTokenizer>();
}

std::unique_ptr<Tokenizer> find_model_tokenizer(const ModelTokenizerPlaces& places) {
    std::error_code ec;
    if (!places.given.empty()) {
        const fs::path given(places.given);
        const fs::path file = fs::is_directory(given, ec) ? given / "tokenizer.json" : given;
        if (!fs::is_regular_file(file, ec)) throw InputError(str("--tokenizer: '", file.string(), "' does not exist"));
        // zt-prepare's descriptions name their type; a Hugging Face tokenizer.json has none.
        const nlohmann::json j = nlohmann::json::parse(detail::read_input_file(file.string(), "a tokenizer file"),
                                                       nullptr, false);
        const bool description = j.is_object() && j.contains("type") && j.at("type").is_string();
        return description ? load_tokenizer(file.string()) : make_hf_tokenizer(file.string());
    }
    if (!places.hf_dir.empty()) {
        const fs::path dir(places.hf_dir);
        if (fs::is_regular_file(dir / "tokenizer.json", ec)) return make_hf_tokenizer((dir / "tokenizer.json").string());
        if (fs::is_regular_file(dir / "vocab.json", ec) && fs::is_regular_file(dir / "merges.txt", ec)) {
            return make_gpt2_tokenizer((dir / "vocab.json").string(), (dir / "merges.txt").string());
        }
        throw InputError(str(places.hf_dir, ": holds no tokenizer.json nor vocab.json + merges.txt (give --tokenizer F)"));
    }
    std::vector<std::string> tried;
    if (!places.run_tokenizer.empty()) tried.push_back(places.run_tokenizer);
    if (!places.run_train.empty()) {
        tried.push_back((fs::path(first_corpus_pattern(places.run_train)).parent_path() / "tokenizer.json").string());
    }
    for (const std::string& t : tried) {
        if (fs::exists(t, ec)) return load_tokenizer(t);
    }
    std::string where;
    for (const std::string& t : tried) where += " " + t;
    throw InputError(str(places.model, ": no tokenizer found", tried.empty() ? "" : " (tried" + where + ")",
                         "; give --tokenizer F (zt-prepare's tokenizer.json or a Hugging Face one)"));
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& description_path) {
    std::string path = description_path;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        path = (fs::path(path) / "tokenizer.json").string();
    }
    const std::string text =
        detail::read_input_file(path, "a tokenizer description written by zt-prepare");
    nlohmann::json desc;
    try {
        desc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(path, ": not valid JSON (", e.what(), ")"));
    }
    if (!desc.is_object()) {
        throw InputError(str(path, ": expected a JSON object like {\"type\": \"byte\", ...}"));
    }
    if (!desc.contains("type") || !desc.at("type").is_string()) {
        throw InputError(
            str(path, ": missing string field \"type\" (expected \"byte\", \"gpt2\" or \"hf\")"));
    }
    const std::string type = desc.at("type").get<std::string>();
    // Relative names are relative to the description's folder (zt-prepare copies the files
    // there), so a prepared data folder can be moved as a whole.
    const fs::path base = fs::path(path).parent_path();
    const auto resolve = [&](const std::string& name) {
        const fs::path p(name);
        return (p.is_absolute() ? p : base / p).string();
    };
    std::unique_ptr<Tokenizer> tok;
    std::string source;
    if (type == "byte") {
        tok = make_byte_tokenizer();
        source = "the byte tokenizer";
    } else if (type == "gpt2") {
        const char* why = "a gpt2 description names its vocab and merges files";
        const std::string vocab = resolve(string_field(desc, path, "vocab", why));
        const std::string merges = resolve(string_field(desc, path, "merges", why));
        tok = make_gpt2_tokenizer(vocab, merges);
        source = vocab;
    } else if (type == "hf") {
        const std::string file = resolve(
            string_field(desc, path, "file", "an hf description names its tokenizer.json copy"));
        tok = make_hf_tokenizer(file);
        source = file;
    } else {
        throw InputError(str(path, ": unknown tokenizer type '", type,
                             "' (expected \"byte\", \"gpt2\" or \"hf\")"));
    }
    check_field(desc, path, "vocab_size", tok->vocab_size(), source);
    check_field(desc, path, "eot", tok->eot(), source);
    return tok;
}

}  // namespace zt
