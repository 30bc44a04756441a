// Hugging Face `tokenizers` files (tokenizer.json) of the byte-level BPE kind: GPT-2,
// Llama 3, SmolLM and the many models that share their layout.
//
// Encoding follows the `tokenizers` pipeline: added tokens are split out of the text first
// (matched exactly, leftmost then longest), each remaining segment goes through the
// normalizer (none, or NFC as Qwen2's: nfc.cpp, utf8proc) and the pre-tokenizer steps
// (pretokenize.cpp, PCRE2: a Split step's own regex, GPT-2's regex of ByteLevel with
// use_regex, Digits), and each piece through byte-level BPE (bpe_model.cpp, with
// `ignore_merges`).
// Decoding maps vocabulary tokens back to their bytes (the ByteLevel decoder) and added
// tokens to their text.
// The document separator (Tokenizer::eot) is the BOS token when the file has one (the
// special token that TemplateProcessing puts before the sequence, else an added token or
// vocabulary entry named <|begin_of_text|> or <s>), else the end-of-text token (the special
// token TemplateProcessing puts after the sequence, else one named <|end_of_text|>,
// <|endoftext|> or </s>).
// Deliberately rejected, naming the key: other models (Unigram, WordPiece, WordLevel),
// normalizers other than NFC, other pre-tokenizers, Split behaviours other than Isolated
// (and invert), regexes PCRE2 cannot compile, ByteLevel with add_prefix_space, byte
// fallback, dropout, subword prefixes/suffixes, and added tokens with lstrip / rstrip /
// single_word: each would change the encoding, and a silently different encoding is worse
// than a clear refusal.
#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "bpe_model.hpp"
#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kCopyName = "hf_tokenizer.json";

struct AddedToken {
    std::string content;
    uint32_t id;
};

/// Reads the keys of one JSON file, naming the file and the key path in every message.
class Reader {
  public:
    explicit Reader(std::string path) : m_path(std::move(path)) {}

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw InputError(str(m_path, ": ", key, ": ", what));
    }
    [[noreturn]] void unsupported(const std::string& key, const json& value,
                                  const std::string& expected) const {
        std::string shown = value.dump();
        if (shown.size() > 200) {
            shown = shown.substr(0, 200) + "...";
        }
        fail(key, str(shown, " is not supported (ztrain reads byte-level BPE tokenizers: ",
                      expected, ")"));
    }

    const json& object(const json& parent, const std::string& key, const std::string& name) const {
        if (!parent.contains(key)) {
            fail(name, "missing");
        }
        const json& v = parent.at(key);
        if (!v.is_object()) {
            fail(name, str("expected an object, found ", v.type_name()));
        }
        return v;
    }
    std::string string(const json& obj, const std::string& key, const std::string& name) const {
        if (!obj.contains(key) || !obj.at(key).is_string()) {
            fail(name, obj.contains(key) ? str("expected a string, found ", obj.at(key).dump())
                                         : std::string("missing"));
        }
        return obj.at(key).get<std::string>();
    }
    /// A boolean key; absent or null gives `fallback`.
    bool boolean(const json& obj, const std::string& key, const std::string& name,
                 bool fallback) const {
        if (!obj.contains(key) || obj.at(key).is_null()) {
            return fallback;
        }
        if (!obj.at(key).is_boolean()) {
            fail(name, str("expected true or false, found ", obj.at(key).dump()));
        }
        return obj.at(key).get<bool>();
    }
    /// A token id: an integer in [0, 2^31).
    uint32_t id(const json& v, const std::string& name) const {
        if (!v.is_number_integer()) {
            fail(name, str("expected an integer token id, found ", v.dump()));
        }
        const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
        if (negative ||
            v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
            fail(name, str("token id ", v.dump(), " is out of range"));
        }
        return static_cast<uint32_t>(v.get<uint64_t>());
    }
    const std::string& path() const { return m_path; }

  private:
    std::string m_path;
};

class HfTokenizer final : public Tokenizer {
  public:
    explicit HfTokenizer(const std::string& path)
        : m_path(path), m_bpe(str(path, ": model.vocab")) {
        const std::string text = detail::read_input_file(
            path, "a Hugging Face tokenizer.json (byte-level BPE, as GPT-2's or Llama 3's)");
        json root;
        try {
            root = json::parse(text);
        } catch (const json::exception& e) {
            throw InputError(str(path, ": not valid JSON (", e.what(), ")"));
        }
        const Reader r(path);
        if (!root.is_object()) {
            r.fail("(top level)", str("expected a JSON object, found ", root.type_name()));
        }
        load_normalizer(r, root);
        load_model(r, root);
        load_added_tokens(r, root);
        check_dense_ids(r);
        load_pre_tokenizer(r, root);
        load_decoder(r, root);
        choose_separator(r, root);
    }

    HfTokenizer(const HfTokenizer&) = delete;  // m_added_by_first points into m_added
    HfTokenizer& operator=(const HfTokenizer&) = delete;

    std::string type() const override { return "hf"; }
    int vocab_size() const override { return static_cast<int>(m_vocab_size); }
    uint32_t eot() const override { return m_separator; }
    uint32_t end_of_text() const override { return m_end_of_text; }
    std::optional<uint32_t> special_token(const std::string& text) const override {
        const int64_t id = find_token(text);
        return id >= 0 ? std::optional<uint32_t>(static_cast<uint32_t>(id)) : std::nullopt;
    }

    std::vector<uint32_t> encode(const std::string& text) const override {
        std::vector<uint32_t> out;
        out.reserve(text.size() / 3 + 1);
        std::vector<std::string_view> pieces;
        std::vector<std::string_view> next;
        std::string normalized;  // the NFC segment the pieces view into
        const std::string_view all(text);
        size_t segment = 0;
        const auto encode_segment = [&](std::string_view s) {
            if (s.empty()) {
                return;
            }
            if (m_nfc) {
                normalized = nfc_normalize(s);
                s = normalized;
            }
            pieces.assign(1, s);
            for (const RegexSplit& step : m_steps) {
                next.clear();
                for (std::string_view p : pieces) {
                    step.split_into(p, next);
                }
                pieces.swap(next);
            }
            for (std::string_view p : pieces) {
                m_bpe.encode(p, out);
            }
        };
        for (size_t i = 0; i < all.size(); ++i) {
            if (m_added_by_first[static_cast<uint8_t>(all[i])].empty()) {
                continue;
            }
            const AddedToken* match = match_added(all, i);
            if (match == nullptr) {
                continue;
            }
            encode_segment(all.substr(segment, i - segment));
            out.push_back(match->id);
            i += match->content.size() - 1;
            segment = i + 1;
        }
        encode_segment(all.substr(segment));
        return out;
    }

    std::string decode(const std::vector<uint32_t>& tokens) const override {
        std::string out;
        for (uint32_t t : tokens) {
            if (t >= m_vocab_size) {
                throw Error(str("hf tokenizer: cannot decode token ", t, " (vocab_size ",
                                m_vocab_size, ", ", m_path, ")"));
            }
            const auto added = m_added_by_id.find(t);
            if (added != m_added_by_id.end()) {
                out += added->second;
            } else {
                out += m_bpe.bytes(t);
            }
        }
        return out;
    }

    void save(const std::string& dir) const override {
        detail::copy_file_into(m_path, (fs::path(dir) / kCopyName).string());
        detail::write_tokenizer_description(dir, json{{"type", "hf"},
                                                      {"vocab_size", vocab_size()},
                                                      {"eot", m_separator},
                                                      {"eot_text", decode({m_separator})},
                                                      {"file", kCopyName}});
    }

  private:
    /// None, or NFC (Qwen2's): applied to each segment between added tokens, as
    /// `tokenizers` does for added tokens that are not `normalized`.
    void load_normalizer(const Reader& r, const json& root) {
        if (!root.contains("normalizer") || root.at("normalizer").is_null()) {
            return;
        }
        const json& n = root.at("normalizer");
        if (!n.is_object() || n.value("type", json()) != "NFC" || n.size() != 1) {
            r.unsupported("normalizer", n, "expected null or {\"type\": \"NFC\"}");
        }
        m_nfc = true;
    }

    void load_model(const Reader& r, const json& root) {
        const json& model = r.object(root, "model", "model");
        if (!model.contains("type")) {
            r.fail("model.type", "missing (expected \"BPE\")");
        }
        if (model.at("type") != "BPE") {
            r.unsupported("model.type", model.at("type"), "expected \"BPE\"");
        }
        if (r.boolean(model, "byte_fallback", "model.byte_fallback", false)) {
            r.unsupported("model.byte_fallback", true, "expected false");
        }
        if (model.contains("dropout") && !model.at("dropout").is_null() &&
            !(model.at("dropout").is_number() && model.at("dropout").get<double>() == 0.0)) {
            r.unsupported("model.dropout", model.at("dropout"), "expected null");
        }
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
            if (model.contains(key) && !model.at(key).is_null() && model.at(key) != "") {
                r.unsupported(str("model.", key), model.at(key), "expected null");
            }
        }
        m_bpe.set_ignore_merges(r.boolean(model, "ignore_merges", "model.ignore_merges", false));

        const json& vocab = r.object(model, "vocab", "model.vocab");
        if (vocab.empty()) {
            r.fail("model.vocab", "empty vocabulary");
        }
        std::vector<std::string> id_to_key;
        for (const auto& [key, value] : vocab.items()) {
            const uint32_t id = r.id(value, str("model.vocab[\"", key, "\"]"));
            if (key.empty()) {
                r.fail("model.vocab", str("empty token string (id ", id, ")"));
            }
            // Ids are checked to be dense (0..n-1 over vocab and added tokens) below, so a
            // hostile id cannot make this table huge.
            if (id >= vocab.size() + 65536) {
                r.fail(str("model.vocab[\"", key, "\"]"),
                       str("token id ", id, " is out of range (", vocab.size(), " entries)"));
            }
            if (id >= id_to_key.size()) {
                id_to_key.resize(id + 1);
            }
            if (!id_to_key[id].empty()) {
                r.fail("model.vocab",
                       str("id ", id, " is used by both '", id_to_key[id], "' and '", key, "'"));
            }
            id_to_key[id] = key;
        }
        m_vocab_size = static_cast<uint32_t>(id_to_key.size());
        m_bpe.set_vocab(std::move(id_to_key));

        if (!model.contains("merges")) {
            r.fail("model.merges", "missing (a BPE model lists its merges)");
        }
        const json& merges = model.at("merges");
        if (!merges.is_array()) {
            r.fail("model.merges", str("expected an array, found ", merges.type_name()));
        }
        for (size_t i = 0; i < merges.size(); ++i) {
            const json& m = merges[i];
            const std::string name = str("model.merges[", i, "]");
            std::string left;
            std::string right;
            if (m.is_string()) {
                // "a b": exactly one space (tokens never hold a raw space in this alphabet).
                const std::string s = m.get<std::string>();
                const size_t space = s.find(' ');
                if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
                    s.find(' ', space + 1) != std::string::npos) {
                    r.fail(name,
                           str("expected two tokens separated by one space, found ", m.dump()));
                }
                left = s.substr(0, space);
                right = s.substr(space + 1);
            } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
                left = m[0].get<std::string>();
                right = m[1].get<std::string>();
            } else {
                r.fail(name, str("expected \"a b\" or [\"a\", \"b\"], found ", m.dump()));
            }
            const std::string why = m_bpe.add_merge(left, right);
            if (!why.empty()) {
                r.fail(name, why);
            }
        }
    }

    void load_added_tokens(const Reader& r, const json& root) {
        if (!root.contains("added_tokens") || root.at("added_tokens").is_null()) {
            return;
        }
        const json& list = root.at("added_tokens");
        if (!list.is_array()) {
            r.fail("added_tokens", str("expected an array, found ", list.type_name()));
        }
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string name = str("added_tokens[", i, "]");
            const json& t = list[i];
            if (!t.is_object()) {
                r.fail(name, str("expected an object, found ", t.dump()));
            }
            if (!t.contains("id")) {
                r.fail(name + ".id", "missing");
            }
            const uint32_t id = r.id(t.at("id"), name + ".id");
            const std::string content = r.string(t, "content", name + ".content");
            if (content.empty()) {
                r.fail(name + ".content", "empty");
            }
            for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
                if (r.boolean(t, flag, str(name, ".", flag), false)) {
                    r.unsupported(str(name, ".", flag), true, "expected false");
                }
            }
            if (id >= m_bpe.size() + list.size()) {
                r.fail(name + ".id",
                       str("token id ", id, " is out of range (", m_bpe.size(),
                           " vocabulary entries and ", list.size(), " added tokens)"));
            }
            // An added token may repeat a vocabulary entry (GPT-2's <|endoftext|>), but not
            // give its id to another text.
            if (id < m_bpe.size() && !m_bpe.bytes(id).empty() && m_bpe.bytes(id) != content) {
                r.fail(name, str("id ", id, " is '", content, "' here but '", m_bpe.bytes(id),
                                 "' in model.vocab"));
            }
            const auto [it, inserted] = m_added_by_id.emplace(id, content);
            if (!inserted && it->second != content) {
                r.fail(name,
                       str("id ", id, " is used by both '", it->second, "' and '", content, "'"));
            }
            m_vocab_size = std::max(m_vocab_size, id + 1);
            m_added.push_back(AddedToken{content, id});
        }
        // Longest first, so the first match at a position is the longest one.
        std::stable_sort(m_added.begin(), m_added.end(),
                         [](const AddedToken& a, const AddedToken& b) {
                             return a.content.size() > b.content.size();
                         });
        for (const AddedToken& t : m_added) {
            m_added_by_first[static_cast<uint8_t>(t.content[0])].push_back(&t);
        }
    }

    void check_dense_ids(const Reader& r) const {
        for (uint32_t id = 0; id < m_vocab_size; ++id) {
            if ((id >= m_bpe.size() || m_bpe.bytes(id).empty()) && m_added_by_id.count(id) == 0) {
                r.fail("model.vocab",
                       str("no token has id ", id, " (ids must be 0..", m_vocab_size - 1,
                           " without gaps, over model.vocab "
                           "and added_tokens)"));
            }
        }
    }

    /// A Split step: its regex compiled by PCRE2 (an InputError naming the file, the key, the
    /// pattern and PCRE2's message when it cannot be), with behavior Isolated, not inverted
    /// (what every tokenizer.json checked against `tokenizers` here uses).
    void add_split(const Reader& r, const json& p, const std::string& name) {
        const json& pattern = r.object(p, "pattern", name + ".pattern");
        if (!pattern.contains("Regex") || !pattern.at("Regex").is_string()) {
            r.unsupported(name + ".pattern", pattern, "expected {\"Regex\": \"...\"}");
        }
        if (!p.contains("behavior") || p.at("behavior") != "Isolated") {
            r.unsupported(name + ".behavior", p.value("behavior", json()),
                          "expected \"Isolated\"; Removed, MergedWithPrevious, MergedWithNext and "
                          "Contiguous are not implemented");
        }
        if (r.boolean(p, "invert", name + ".invert", false)) {
            r.unsupported(name + ".invert", true, "expected false");
        }
        m_steps.emplace_back(pattern.at("Regex").get<std::string>(),
                             str(r.path(), ": ", name, ".pattern.Regex"));
    }

    /// One pre-tokenizer step (an element of a Sequence, or the whole pre_tokenizer).
    void add_step(const Reader& r, const json& p, const std::string& name, bool last) {
        if (!p.is_object()) {
            r.fail(name, str("expected an object, found ", p.type_name()));
        }
        const std::string type = r.string(p, "type", name + ".type");
        if (m_byte_level) {
            r.fail(name, "ByteLevel must be the last pre-tokenizer");
        }
        if (type == "ByteLevel") {
            if (r.boolean(p, "add_prefix_space", name + ".add_prefix_space", true)) {
                r.unsupported(name + ".add_prefix_space", true, "expected false");
            }
            if (r.boolean(p, "use_regex", name + ".use_regex", true)) {
                m_steps.emplace_back(detail::kGpt2Regex, str(r.path(), ": ", name));
            }
            m_byte_level = true;
        } else if (type == "Split") {
            add_split(r, p, name);
        } else if (type == "Digits") {
            m_steps.push_back(
                digits_split(r.boolean(p, "individual_digits", name + ".individual_digits", false)));
        } else {
            r.unsupported(name + ".type", type, "expected ByteLevel, Split, Digits or Sequence");
        }
        if (last && !m_byte_level) {
            r.fail(name, "the pre-tokenizer must end with ByteLevel (a byte-level BPE tokenizer)");
        }
    }

    void load_pre_tokenizer(const Reader& r, const json& root) {
        if (!root.contains("pre_tokenizer") || root.at("pre_tokenizer").is_null()) {
            r.fail("pre_tokenizer", "missing (expected ByteLevel, or a Sequence ending with it)");
        }
        const json& p = root.at("pre_tokenizer");
        if (p.is_object() && p.contains("type") && p.at("type") == "Sequence") {
            if (!p.contains("pretokenizers") || !p.at("pretokenizers").is_array() ||
                p.at("pretokenizers").empty()) {
                r.fail("pre_tokenizer.pretokenizers", "expected a non-empty array");
            }
            const json& list = p.at("pretokenizers");
            for (size_t i = 0; i < list.size(); ++i) {
                add_step(r, list[i], str("pre_tokenizer.pretokenizers[", i, "]"),
                         i + 1 == list.size());
            }
        } else {
            add_step(r, p, "pre_tokenizer", true);
        }
    }

    void load_decoder(const Reader& r, const json& root) const {
        if (!root.contains("decoder") || !root.at("decoder").is_object()) {
            r.unsupported("decoder", root.value("decoder", json()), "expected ByteLevel");
        }
        const json& d = root.at("decoder");
        if (d.value("type", json()) != "ByteLevel") {
            r.unsupported("decoder.type", d.value("type", json()), "expected \"ByteLevel\"");
        }
    }

    /// Id of a token text: an added token's, else a vocabulary entry's; -1 when absent.
    int64_t find_token(const std::string& content) const {
        for (const AddedToken& t : m_added) {
            if (t.content == content) {
                return t.id;
            }
        }
        return m_bpe.find(content);
    }

    /// TemplateProcessing's special tokens before (BOS) and after (EOS) the sequence "A".
    void read_template(const Reader& r, const json& proc, const std::string& name,
                       std::optional<int64_t>& bos, std::optional<int64_t>& eos) const {
        if (!proc.is_object()) {
            return;
        }
        const json type = proc.value("type", json());
        if (type == "Sequence" && proc.contains("processors") && proc.at("processors").is_array()) {
            const json& list = proc.at("processors");
            for (size_t i = 0; i < list.size(); ++i) {
                read_template(r, list[i], str(name, ".processors[", i, "]"), bos, eos);
            }
            return;
        }
        if (type != "TemplateProcessing") {
            return;
        }
        if (!proc.contains("single") || !proc.at("single").is_array()) {
            r.fail(name + ".single", "expected an array");
        }
        bos = -1;  // the template decides: no special token before A means no BOS
        bool seen_sequence = false;
        const json& single = proc.at("single");
        for (size_t i = 0; i < single.size(); ++i) {
            const json& item = single[i];
            if (item.is_object() && item.contains("Sequence")) {
                seen_sequence = true;
                continue;
            }
            if (!item.is_object() || !item.contains("SpecialToken") ||
                !item.at("SpecialToken").is_object()) {
                r.fail(str(name, ".single[", i, "]"),
                       str("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, found ",
                           item.dump()));
            }
            const std::string token = r.string(item.at("SpecialToken"), "id",
                                               str(name, ".single[", i, "].SpecialToken.id"));
            const int64_t id = find_token(token);
            if (id < 0) {
                r.fail(str(name, ".single[", i, "]"),
                       str("special token '", token,
                           "' is neither an added token nor in model.vocab"));
            }
            if (!seen_sequence) {
                bos = id;
            } else if (!eos) {
                eos = id;
            }
        }
    }

    void choose_separator(const Reader& r, const json& root) {
        std::optional<int64_t> bos;
        std::optional<int64_t> eos;
        if (root.contains("post_processor")) {
            read_template(r, root.at("post_processor"), "post_processor", bos, eos);
        }
        const auto first_named = [&](std::initializer_list<const char*> names) -> int64_t {
            for (const char* n : names) {
                if (const int64_t id = find_token(n); id >= 0) {
                    return id;
                }
            }
            return -1;
        };
        if (!bos) {
            bos = first_named({"<|begin_of_text|>", "<s>"});
        }
        if (!eos) {
            eos = first_named({"<|end_of_text|>", "<|endoftext|>", "</s>"});
        }
        const int64_t sep = *bos >= 0 ? *bos : *eos;
        if (sep < 0) {
            r.fail("added_tokens",
                   "no BOS or end-of-text token to separate documents (expected a "
                   "TemplateProcessing post_processor, or a token <|begin_of_text|>, <s>, "
                   "<|end_of_text|>, <|endoftext|> or </s>)");
        }
        m_separator = static_cast<uint32_t>(sep);
        m_end_of_text = *eos >= 0 ? static_cast<uint32_t>(*eos) : m_separator;
    }

    /// The longest added token starting at text[i], or null.
    const AddedToken* match_added(std::string_view text, size_t i) const {
        for (const AddedToken* t : m_added_by_first[static_cast<uint8_t>(text[i])]) {
            if (text.compare(i, t->content.size(), t->content) == 0) {
                return t;
            }
        }
        return nullptr;
    }

    std::string m_path;
    detail::BpeModel m_bpe;
    uint32_t m_vocab_size = 0;
    std::vector<AddedToken> m_added;  // longest content first
    std::unordered_map<uint32_t, std::string> m_added_by_id;
    // Added tokens by their first byte, longest first (pointers into m_added).
    std::array<std::vector<const AddedToken*>, 256> m_added_by_first{};
    std::vector<RegexSplit> m_steps;
    bool m_nfc = false;
    bool m_byte_level = false;
    uint32_t m_separator = 0;
    uint32_t m_end_of_text = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& tokenizer_json_path) {
    return std::make_unique<HfTokenizer>(tokenizer_json_path);
}

}  // namespace zt
