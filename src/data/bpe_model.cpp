// Byte-level BPE shared by the GPT-2 and Hugging Face tokenizers (see bpe_model.hpp).
//
// Merging follows GPT-2's encoder.py: each round merges every occurrence of the
// lowest-ranked adjacent pair, left to right; a heap keeps that O(n log n) per piece instead
// of quadratic, so a long run without spaces (a DNA string, a line of dashes) stays fast.
// Hugging Face's BPE pops one merge at a time (lowest rank, then leftmost) and queues the
// pairs it creates at once; the two orders agree whenever every merge's parts are made by
// earlier merges, which holds for any trained merges list (GPT-2's, Llama 3's, SmolLM's),
// and the tests check real files token for token against Hugging Face's JavaScript port.
// Encoded pieces are cached (bounded; dropped when full: real text has a small working set).
#include "bpe_model.hpp"

#include <functional>
#include <queue>

#include "ztrain/core/error.hpp"

namespace zt::detail {

namespace {

constexpr uint32_t kNoToken = 0xFFFFFFFFu;
constexpr size_t kMaxCacheEntries = 1 << 20;

std::string hex_byte(uint8_t b) {
    const char* digits = "0123456789ABCDEF";
    return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

}  // namespace

const std::array<uint32_t, 256>& byte_to_codepoint() {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable =
                (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            t[b] = printable ? b : next++;
        }
        return t;
    }();
    return table;
}

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

std::string byte_level_key_to_bytes(const std::string& key) {
    // The alphabet's code points are all < 0x144, so a flat table inverts it.
    static const std::array<int16_t, 0x144> inverse = [] {
        std::array<int16_t, 0x144> inv{};
        inv.fill(-1);
        const std::array<uint32_t, 256>& to_cp = byte_to_codepoint();
        for (uint32_t b = 0; b < 256; ++b) {
            inv[to_cp[b]] = static_cast<int16_t>(b);
        }
        return inv;
    }();
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
        if (cp < inverse.size() && inverse[cp] >= 0) {
            out.push_back(static_cast<char>(inverse[cp]));
        } else {
            out.append(key, i, len);
        }
        i += len;
    }
    return out;
}

void BpeModel::set_vocab(std::vector<std::string> id_to_key) {
    m_key_to_id.clear();
    m_key_to_id.reserve(id_to_key.size());
    m_id_to_bytes.assign(id_to_key.size(), std::string());
    for (size_t id = 0; id < id_to_key.size(); ++id) {
        if (id_to_key[id].empty()) {
            continue;
        }
        m_id_to_bytes[id] = byte_level_key_to_bytes(id_to_key[id]);
        m_key_to_id.emplace(std::move(id_to_key[id]), static_cast<uint32_t>(id));
    }
    const std::array<uint32_t, 256>& to_cp = byte_to_codepoint();
    for (uint32_t b = 0; b < 256; ++b) {
        std::string sym;
        append_utf8(sym, to_cp[b]);
        const auto it = m_key_to_id.find(sym);
        m_byte_id[b] = it == m_key_to_id.end() ? kNoToken : it->second;
    }
    m_merges.clear();
    m_num_merges = 0;
    m_cache.clear();
}

int64_t BpeModel::find(const std::string& key) const {
    const auto it = m_key_to_id.find(key);
    return it == m_key_to_id.end() ? -1 : static_cast<int64_t>(it->second);
}

std::string BpeModel::add_merge(const std::string& left, const std::string& right) {
    const int64_t left_id = find(left);
    if (left_id < 0) {
        return str("'", left, "' is not in ", m_vocab_name);
    }
    const int64_t right_id = find(right);
    if (right_id < 0) {
        return str("'", right, "' is not in ", m_vocab_name);
    }
    const int64_t merged = find(left + right);
    if (merged < 0) {
        return str("the merge '", left, " ", right, "' makes '", left + right,
                   "', which is not in ", m_vocab_name);
    }
    m_merges.emplace(pair_key(static_cast<uint32_t>(left_id), static_cast<uint32_t>(right_id)),
                     Merge{m_num_merges, static_cast<uint32_t>(merged)});
    ++m_num_merges;
    return "";
}

const BpeModel::Merge* BpeModel::find_merge(uint32_t left, uint32_t right) const {
    const auto it = m_merges.find(pair_key(left, right));
    return it == m_merges.end() ? nullptr : &it->second;
}

void BpeModel::encode(std::string_view piece, std::vector<uint32_t>& out) const {
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

namespace {

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

/// Applies the merges to a run of byte tokens, in encoder.py's order. `find_merge(left,
/// right)` is the pair's merge (its rank and result), or nullptr.
template <class FindMerge>
class MergeLoop {
  public:
    MergeLoop(const std::vector<uint32_t>& byte_ids, const FindMerge& find_merge)
        : m_find_merge(find_merge),
          m_nodes(byte_ids.size()),
          m_alive(byte_ids.size(), true) {
        const int32_t n = static_cast<int32_t>(byte_ids.size());
        for (int32_t i = 0; i < n; ++i) {
            m_nodes[static_cast<size_t>(i)] = Node{byte_ids[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
        }
        for (int32_t i = 0; i + 1 < n; ++i) {
            push_pair(i);
        }
    }

    std::vector<uint32_t> run() {
        std::vector<int32_t> merged_at;
        while (!m_heap.empty()) {
            // One round of encoder.py's loop: the lowest rank present, all its occurrences,
            // left to right (the heap pops equal ranks in position order). New pairs are
            // only queued after the round, as encoder.py recomputes pairs between rounds.
            merge_round(merged_at);
            for (int32_t pos : merged_at) {
                push_pair(node(pos).prev);
                push_pair(pos);
            }
        }
        std::vector<uint32_t> ids;
        for (int32_t i = 0; i >= 0; i = node(i).next) {
            ids.push_back(node(i).id);
        }
        return ids;
    }

  private:
    Node& node(int32_t pos) { return m_nodes[static_cast<size_t>(pos)]; }

    void push_pair(int32_t pos) {
        if (pos < 0) {
            return;
        }
        const Node& a = node(pos);
        if (a.next < 0) {
            return;
        }
        const uint32_t right = node(a.next).id;
        if (const auto* m = m_find_merge(a.id, right)) {
            m_heap.push(Candidate{m->rank, pos, a.id, right});
        }
    }

    bool valid(const Candidate& c) {
        const Node& a = node(c.pos);
        return a.id == c.left && a.next >= 0 && node(a.next).id == c.right;
    }

    /// Merges every occurrence of the lowest rank queued; `merged_at` gets the merged nodes.
    void merge_round(std::vector<int32_t>& merged_at) {
        const uint32_t rank = m_heap.top().rank;
        merged_at.clear();
        while (!m_heap.empty() && m_heap.top().rank == rank) {
            const Candidate c = m_heap.top();
            m_heap.pop();
            if (!m_alive[static_cast<size_t>(c.pos)] || !valid(c)) {
                continue;
            }
            Node& a = node(c.pos);
            const int32_t b = a.next;
            a.id = m_find_merge(c.left, c.right)->result;
            a.next = node(b).next;
            if (a.next >= 0) {
                node(a.next).prev = c.pos;
            }
            m_alive[static_cast<size_t>(b)] = false;
            merged_at.push_back(c.pos);
        }
    }

    const FindMerge& m_find_merge;
    std::vector<Node> m_nodes;
    std::vector<bool> m_alive;
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> m_heap;
};

}  // namespace

std::vector<uint32_t> BpeModel::byte_ids(std::string_view piece) const {
    std::vector<uint32_t> ids(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
        const uint8_t b = static_cast<uint8_t>(piece[i]);
        if (m_byte_id[b] == kNoToken) {
            std::string sym;
            append_utf8(sym, byte_to_codepoint()[b]);
            throw InputError(str(m_vocab_name, ": no token for byte ", hex_byte(b), " ('", sym,
                                 "'), which the text contains; a byte-level BPE vocabulary "
                                 "needs all 256 byte tokens"));
        }
        ids[i] = m_byte_id[b];
    }
    return ids;
}

int64_t BpeModel::whole_piece_id(std::string_view piece) const {
    std::string key;
    for (const char c : piece) {
        append_utf8(key, byte_to_codepoint()[static_cast<uint8_t>(c)]);
    }
    const auto it = m_key_to_id.find(key);
    return it == m_key_to_id.end() ? -1 : static_cast<int64_t>(it->second);
}

std::vector<uint32_t> BpeModel::bpe(std::string_view piece) const {
    std::vector<uint32_t> ids = byte_ids(piece);
    if (ids.size() <= 1) {
        return ids;
    }
    if (m_ignore_merges) {
        const int64_t whole = whole_piece_id(piece);
        if (whole >= 0) {
            return {static_cast<uint32_t>(whole)};
        }
    }
    const auto find = [this](uint32_t left, uint32_t right) { return find_merge(left, right); };
    return MergeLoop<decltype(find)>(ids, find).run();
}

}  // namespace zt::detail
