// GPT-2 byte-pair encoding: loading vocab.json / merges.txt, encoding and decoding.
//
// Implements GPT-2's encoder.py: text -> pre-tokenizer pieces (gpt2_pretokenize.cpp) ->
// bytes -> GPT-2's byte-to-unicode symbols -> merges applied by rank. Each round merges
// every occurrence of the lowest-ranked adjacent pair, left to right, exactly as
// encoder.py's bpe() does; a heap keeps that O(n log n) per piece instead of quadratic,
// so a long run without spaces (a DNA string, a line of dashes) stays fast.
// Deliberately does not: treat "<|endoftext|>" in the input text as the special token (it
// is encoded as ordinary text; callers append eot() explicitly), or fall back to anything
// for a byte that has no token (that is an error: the vocabulary is incomplete).
#include <array>
#include <filesystem>
#include <functional>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kNoToken = 0xFFFFFFFFu;
constexpr const char* kEotText = "<|endoftext|>";
/// Bound on cached pieces; the cache is dropped when full (simple, and real text has a
/// small working set of frequent words).
constexpr size_t kMaxCacheEntries = 1 << 20;

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

/// GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map
/// to themselves; the other 68 bytes map, in byte order, to U+0100, U+0101, ...
std::array<uint32_t, 256> byte_to_codepoint() {
    std::array<uint32_t, 256> table{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        table[b] = printable ? b : next++;
    }
    return table;
}

/// Converts a vocabulary key (UTF-8 in GPT-2's byte alphabet) back to the bytes it stands
/// for. Code points outside the alphabet (added tokens in some vocabularies) stay as their
/// own UTF-8; invalid UTF-8 cannot occur because nlohmann::json validates strings.
std::string key_to_bytes(const std::string& key,
                         const std::unordered_map<uint32_t, uint8_t>& inverse) {
    std::string out;
    size_t i = 0;
    while (i < key.size()) {
        const uint8_t b0 = static_cast<uint8_t>(key[i]);
        const size_t len = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : 4;
        uint32_t cp = len == 1   ? b0
                      : len == 2 ? (b0 & 0x1Fu)
                      : len == 3 ? (b0 & 0x0Fu)
                                 : (b0 & 0x07u);
        for (size_t k = 1; k < len && i + k < key.size(); ++k) {
            cp = (cp << 6) | (static_cast<uint8_t>(key[i + k]) & 0x3Fu);
        }
        const auto it = inverse.find(cp);
        if (it != inverse.end()) {
            out.push_back(static_cast<char>(it->second));
        } else {
            out.append(key, i, len);
        }
        i += len;
    }
    return out;
}

std::string hex_byte(uint8_t b) {
    const char* digits = "0123456789ABCDEF";
    return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

class Gpt2Tokenizer final : public Tokenizer {
  public:
    Gpt2Tokenizer(const std::string& vocab_path, const std::string& merges_path)
        : m_vocab_path(vocab_path), m_merges_path(merges_path) {
        load_vocab();
        load_merges();
    }

    std::string type() const override { return "gpt2"; }
    int vocab_size() const override { return static_cast<int>(m_id_to_bytes.size()); }
    uint32_t eot() const override { return m_eot; }

    std::vector<uint32_t> encode(const std::string& text) const override {
        std::vector<uint32_t> out;
        out.reserve(text.size() / 3 + 1);
        for (std::string_view piece : gpt2_pretokenize(text)) {
            encode_piece(piece, out);
        }
        return out;
    }

    std::string decode(const std::vector<uint32_t>& tokens) const override {
        std::string out;
        for (uint32_t t : tokens) {
            if (t >= m_id_to_bytes.size()) {
                throw Error(str("gpt2 tokenizer: cannot decode token ", t, " (vocab_size ",
                                m_id_to_bytes.size(), ", ", m_vocab_path, ")"));
            }
            out += m_id_to_bytes[t];
        }
        return out;
    }

    void save(const std::string& dir) const override {
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) {
            throw Error(str(dir, ": cannot create the folder (", ec.message(), ")"));
        }
        copy_into(m_vocab_path, (fs::path(dir) / "vocab.json").string());
        copy_into(m_merges_path, (fs::path(dir) / "merges.txt").string());
        detail::write_tokenizer_description(dir, nlohmann::json{{"type", "gpt2"},
                                                                {"vocab_size", vocab_size()},
                                                                {"eot", m_eot},
                                                                {"vocab", "vocab.json"},
                                                                {"merges", "merges.txt"}});
    }

  private:
    struct Merge {
        uint32_t rank;
        uint32_t result;
    };

    static uint64_t pair_key(uint32_t left, uint32_t right) {
        return (static_cast<uint64_t>(left) << 32) | right;
    }

    static void copy_into(const std::string& from, const std::string& to) {
        std::error_code ec;
        // Saving next to the files we were loaded from (load, then save to the same folder)
        // must not copy a file onto itself.
        if (fs::exists(to, ec) && fs::equivalent(from, to, ec)) {
            return;
        }
        fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
        if (ec) {
            throw Error(str("cannot copy ", from, " to ", to, " (", ec.message(), ")"));
        }
    }

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

        const std::array<uint32_t, 256> to_cp = byte_to_codepoint();
        std::unordered_map<uint32_t, uint8_t> inverse;
        for (uint32_t b = 0; b < 256; ++b) {
            inverse.emplace(to_cp[b], static_cast<uint8_t>(b));
        }

        m_id_to_bytes.assign(n, std::string());
        std::vector<std::string> id_to_key(n);
        std::vector<bool> seen(n, false);
        m_token_to_id.reserve(n);
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
            m_id_to_bytes[id] = key_to_bytes(key, inverse);
            m_token_to_id.emplace(key, static_cast<uint32_t>(id));
        }

        for (uint32_t b = 0; b < 256; ++b) {
            std::string sym;
            append_utf8(sym, to_cp[b]);
            m_byte_symbol[b] = sym;
            const auto it = m_token_to_id.find(sym);
            m_byte_id[b] = it == m_token_to_id.end() ? kNoToken : it->second;
        }

        const auto eot = m_token_to_id.find(kEotText);
        if (eot == m_token_to_id.end()) {
            throw InputError(str(m_vocab_path, ": no '", kEotText,
                                 "' token (needed as the end-of-text separator)"));
        }
        m_eot = eot->second;
    }

    void load_merges() {
        const std::string text = detail::read_input_file(
            m_merges_path, "a GPT-2 merges file (\"a b\" per line, in priority order)");
        std::istringstream in(text);
        std::string line;
        size_t line_no = 0;
        uint32_t rank = 0;
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
            const std::string left = line.substr(0, space);
            const std::string right = line.substr(space + 1);
            const uint32_t left_id = lookup(left, line_no);
            const uint32_t right_id = lookup(right, line_no);
            const auto merged = m_token_to_id.find(left + right);
            if (merged == m_token_to_id.end()) {
                throw InputError(str(m_merges_path, ":", line_no, ": the merge '", line,
                                     "' makes '", left + right, "', which is not in ",
                                     m_vocab_path));
            }
            // A repeated pair keeps its first (highest-priority) rank.
            m_merges.emplace(pair_key(left_id, right_id), Merge{rank, merged->second});
            ++rank;
        }
    }

    uint32_t lookup(const std::string& token, size_t line_no) const {
        const auto it = m_token_to_id.find(token);
        if (it == m_token_to_id.end()) {
            throw InputError(
                str(m_merges_path, ":", line_no, ": '", token, "' is not in ", m_vocab_path));
        }
        return it->second;
    }

    const Merge* find_merge(uint32_t left, uint32_t right) const {
        const auto it = m_merges.find(pair_key(left, right));
        return it == m_merges.end() ? nullptr : &it->second;
    }

    void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
        {
            std::lock_guard<std::mutex> lock(m_cache_mutex);
            const auto it = m_cache.find(std::string(piece));
            if (it != m_cache.end()) {
                out.insert(out.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        std::vector<uint32_t> ids = bpe(piece);
        out.insert(out.end(), ids.begin(), ids.end());
        std::lock_guard<std::mutex> lock(m_cache_mutex);
        if (m_cache.size() >= kMaxCacheEntries) {
            m_cache.clear();
        }
        m_cache.emplace(std::string(piece), std::move(ids));
    }

    std::vector<uint32_t> bpe(std::string_view piece) const {
        // Symbols form a doubly linked list; merged-away nodes are marked dead.
        struct Node {
            uint32_t id;
            int32_t prev;
            int32_t next;
        };
        // A candidate merge of node `pos` with its successor, valid only while both still
        // hold the ids it was made from (ids only ever grow, so a stale entry never matches).
        struct Candidate {
            uint32_t rank;
            int32_t pos;
            uint32_t left;
            uint32_t right;
            bool operator>(const Candidate& o) const {
                return rank != o.rank ? rank > o.rank : pos > o.pos;
            }
        };

        const int32_t n = static_cast<int32_t>(piece.size());
        std::vector<Node> nodes(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) {
            const uint8_t b = static_cast<uint8_t>(piece[static_cast<size_t>(i)]);
            if (m_byte_id[b] == kNoToken) {
                throw InputError(str(m_vocab_path, ": no token for byte ", hex_byte(b), " ('",
                                     m_byte_symbol[b],
                                     "'), which the text contains; a GPT-2 vocabulary needs "
                                     "all 256 byte tokens"));
            }
            nodes[static_cast<size_t>(i)] = Node{m_byte_id[b], i - 1, i + 1 < n ? i + 1 : -1};
        }
        if (n <= 1) {
            return n == 1 ? std::vector<uint32_t>{nodes[0].id} : std::vector<uint32_t>{};
        }

        std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
        const auto push_pair = [&](int32_t pos) {
            if (pos < 0) {
                return;
            }
            const Node& a = nodes[static_cast<size_t>(pos)];
            if (a.next < 0) {
                return;
            }
            const uint32_t right = nodes[static_cast<size_t>(a.next)].id;
            if (const Merge* m = find_merge(a.id, right)) {
                heap.push(Candidate{m->rank, pos, a.id, right});
            }
        };
        const auto valid = [&](const Candidate& c) {
            const Node& a = nodes[static_cast<size_t>(c.pos)];
            return a.id == c.left && a.next >= 0 &&
                   nodes[static_cast<size_t>(a.next)].id == c.right;
        };
        for (int32_t i = 0; i + 1 < n; ++i) {
            push_pair(i);
        }

        std::vector<bool> alive(static_cast<size_t>(n), true);
        std::vector<int32_t> merged_at;
        while (!heap.empty()) {
            // One round of encoder.py's loop: the lowest rank present, all its occurrences,
            // left to right (the heap pops equal ranks in position order). New pairs are
            // only queued after the round, as encoder.py recomputes pairs between rounds.
            const uint32_t rank = heap.top().rank;
            merged_at.clear();
            while (!heap.empty() && heap.top().rank == rank) {
                const Candidate c = heap.top();
                heap.pop();
                if (!alive[static_cast<size_t>(c.pos)] || !valid(c)) {
                    continue;
                }
                Node& a = nodes[static_cast<size_t>(c.pos)];
                const int32_t b = a.next;
                a.id = find_merge(c.left, c.right)->result;
                a.next = nodes[static_cast<size_t>(b)].next;
                if (a.next >= 0) {
                    nodes[static_cast<size_t>(a.next)].prev = c.pos;
                }
                alive[static_cast<size_t>(b)] = false;
                merged_at.push_back(c.pos);
            }
            for (int32_t pos : merged_at) {
                push_pair(nodes[static_cast<size_t>(pos)].prev);
                push_pair(pos);
            }
        }

        std::vector<uint32_t> ids;
        for (int32_t i = 0; i >= 0; i = nodes[static_cast<size_t>(i)].next) {
            ids.push_back(nodes[static_cast<size_t>(i)].id);
        }
        return ids;
    }

    std::string m_vocab_path;
    std::string m_merges_path;
    std::unordered_map<std::string, uint32_t> m_token_to_id;  // keys in GPT-2's alphabet
    std::vector<std::string> m_id_to_bytes;                   // raw bytes of each token
    std::array<uint32_t, 256> m_byte_id{};                    // single-byte token ids
    std::array<std::string, 256> m_byte_symbol{};             // for error messages
    std::unordered_map<uint64_t, Merge> m_merges;             // (left, right) -> merge
    uint32_t m_eot = 0;
    // encode() is const and may be called from several threads; the cache is guarded.
    mutable std::mutex m_cache_mutex;
    mutable std::unordered_map<std::string, std::vector<uint32_t>> m_cache;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json_path,
                                               const std::string& merges_path) {
    return std::make_unique<Gpt2Tokenizer>(vocab_json_path, merges_path);
}

}  // namespace zt
