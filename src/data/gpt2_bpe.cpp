// GPT-2 byte-pair encoding: loading vocab.json / merges.txt, encoding and decoding.
//
// Implements GPT-2's encoder.py: text -> pre-tokenizer pieces (pretokenize.cpp) ->
// bytes -> GPT-2's byte-to-unicode symbols -> merges applied by rank (bpe_model.cpp, shared
// with the Hugging Face tokenizer.json reader).
// Deliberately does not: treat "<|endoftext|>" in the input text as the special token (it
// is encoded as ordinary text; callers append eot() explicitly), or fall back to anything
// for a byte that has no token (that is an error: the vocabulary is incomplete).
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bpe_model.hpp"
#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEotText = "<|endoftext|>";

class Gpt2Tokenizer final : public Tokenizer {
  public:
    Gpt2Tokenizer(const std::string& vocab_path, const std::string& merges_path)
        : m_vocab_path(vocab_path), m_merges_path(merges_path), m_bpe(vocab_path) {
        load_vocab();
        load_merges();
    }

    std::string type() const override { return "gpt2"; }
    int vocab_size() const override { return static_cast<int>(m_bpe.size()); }
    uint32_t eot() const override { return m_eot; }
    std::optional<uint32_t> special_token(const std::string& text) const override {
        // GPT-2 has one special token; other vocabulary entries are ordinary text.
        return text == kEotText ? std::optional<uint32_t>(m_eot) : std::nullopt;
    }

    std::vector<uint32_t> encode(const std::string& text) const override {
        std::vector<uint32_t> out;
        out.reserve(text.size() / 3 + 1);
        for (std::string_view piece : gpt2_pretokenize(text)) {
            m_bpe.encode(piece, out);
        }
        return out;
    }

    std::string decode(const std::vector<uint32_t>& tokens) const override {
        std::string out;
        for (uint32_t t : tokens) {
            if (t >= m_bpe.size()) {
                throw Error(str("gpt2 tokenizer: cannot decode token ", t, " (vocab_size ",
                                m_bpe.size(), ", ", m_vocab_path, ")"));
            }
            out += m_bpe.bytes(t);
        }
        return out;
    }

    void save(const std::string& dir) const override {
        detail::copy_file_into(m_vocab_path, (fs::path(dir) / "vocab.json").string());
        detail::copy_file_into(m_merges_path, (fs::path(dir) / "merges.txt").string());
        detail::write_tokenizer_description(dir, nlohmann::json{{"type", "gpt2"},
                                                                {"vocab_size", vocab_size()},
                                                                {"eot", m_eot},
                                                                {"vocab", "vocab.json"},
                                                                {"merges", "merges.txt"}});
    }

  private:
    void load_vocab() {
        const std::string text =
            detail::read_input_file(m_vocab_path, "a GPT-2 vocabulary JSON (token -> id)");
        nlohmann::json vocab;
        try {
            vocab = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            throw InputError(str(m_vocab_path, ": not valid JSON (", e.what(), ")"));
        }
        if (!vocab.is_object()) {
            throw InputError(
                str(m_vocab_path, ": expected a JSON object mapping token strings to ids"));
        }
        if (vocab.empty()) {
            throw InputError(str(m_vocab_path, ": empty vocabulary"));
        }
        const size_t n = vocab.size();
        ZT_INPUT_CHECK(n <= 0x7FFFFFFFu, m_vocab_path, ": too many tokens (", n, ")");

        std::vector<std::string> id_to_key(n);
        std::vector<bool> seen(n, false);
        for (const auto& [key, value] : vocab.items()) {
            if (!value.is_number_integer()) {
                throw InputError(str(m_vocab_path, ": the id of token '", key,
                                     "' is not an integer (found ", value.dump(), ")"));
            }
            if (key.empty()) {
                throw InputError(str(m_vocab_path, ": empty token string (id ", value.dump(), ")"));
            }
            // Ids must be exactly 0..n-1, so vocab_size is the entry count and a hostile id
            // cannot make us allocate a huge table.
            const bool negative = value.is_number_unsigned() ? false : value.get<int64_t>() < 0;
            const uint64_t id = negative ? 0 : value.get<uint64_t>();
            if (negative || id >= n) {
                throw InputError(str(m_vocab_path, ": id ", value.dump(), " of token '", key,
                                     "' is out of range (the ", n, " entries must use ids 0..",
                                     n - 1, ")"));
            }
            if (seen[id]) {
                throw InputError(str(m_vocab_path, ": id ", id, " is used by both '", id_to_key[id],
                                     "' and '", key, "'"));
            }
            seen[id] = true;
            id_to_key[id] = key;
        }
        m_bpe.set_vocab(std::move(id_to_key));

        const int64_t eot = m_bpe.find(kEotText);
        if (eot < 0) {
            throw InputError(str(m_vocab_path, ": no '", kEotText,
                                 "' token (needed as the end-of-text separator)"));
        }
        m_eot = static_cast<uint32_t>(eot);
    }

    void load_merges() {
        const std::string text = detail::read_input_file(
            m_merges_path, "a GPT-2 merges file (\"a b\" per line, in priority order)");
        std::istringstream in(text);
        std::string line;
        size_t line_no = 0;
        while (std::getline(in, line)) {
            ++line_no;
            if (!line.empty() && line.back() == '\r') {
                line.pop_back();
            }
            // Only a first "#version" line is a comment: '#' is an ordinary symbol elsewhere.
            if (line_no == 1 && line.rfind("#version", 0) == 0) {
                continue;
            }
            if (line.empty()) {
                continue;
            }
            const size_t space = line.find(' ');
            if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
                line.find(' ', space + 1) != std::string::npos) {
                throw InputError(str(m_merges_path, ":", line_no,
                                     ": expected two tokens separated by one space, found '", line,
                                     "'"));
            }
            const std::string why = m_bpe.add_merge(line.substr(0, space), line.substr(space + 1));
            if (!why.empty()) {
                throw InputError(str(m_merges_path, ":", line_no, ": ", why));
            }
        }
    }

    std::string m_vocab_path;
    std::string m_merges_path;
    detail::BpeModel m_bpe;
    uint32_t m_eot = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json_path,
                                               const std::string& merges_path) {
    return std::make_unique<Gpt2Tokenizer>(vocab_json_path, merges_path);
}

}  // namespace zt
