// Byte-level BPE shared by the GPT-2 tokenizer (vocab.json + merges.txt, gpt2_bpe.cpp) and the
// Hugging Face tokenizer.json reader (hf_tokenizer.cpp). Not part of the public API.
//
// Vocabulary keys are strings in GPT-2's byte-to-unicode alphabet (each byte of the text is
// one printable code point); a piece of text is mapped to those symbols, then merges are
// applied by rank. Callers own the file formats and wrap the reasons returned here into
// messages naming their file and line or key.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zt::detail {

/// GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map
/// to themselves; the other 68 bytes map, in byte order, to U+0100, U+0101, ...
const std::array<uint32_t, 256>& byte_to_codepoint();

/// Appends the UTF-8 encoding of `cp` (< 0x110000) to `out`.
void append_utf8(std::string& out, uint32_t cp);

/// Converts a vocabulary key (UTF-8 in GPT-2's byte alphabet) back to the bytes it stands
/// for. Code points outside the alphabet stay as their own UTF-8.
std::string byte_level_key_to_bytes(const std::string& key);

class BpeModel {
  public:
    /// `vocab_name` names the vocabulary's file in messages (e.g. "vocab.json",
    /// "tokenizer.json: model.vocab").
    explicit BpeModel(std::string vocab_name) : m_vocab_name(std::move(vocab_name)) {}

    /// Sets the vocabulary: id -> key (ids are the positions; an empty key is an unused id).
    /// Keys must be distinct (the caller checks, naming its file).
    void set_vocab(std::vector<std::string> id_to_key);

    /// Adds the next merge (rank = number of merges added before). Returns "" on success,
    /// else the reason ("'x' is not in the vocabulary", ...). A repeated pair keeps its
    /// first rank.
    std::string add_merge(const std::string& left, const std::string& right);

    /// When set, a piece that is a whole vocabulary entry is emitted as that token without
    /// applying merges (Hugging Face's `ignore_merges`, set by Llama 3).
    void set_ignore_merges(bool on) { m_ignore_merges = on; }

    /// Encodes one pre-tokenized piece (raw bytes) and appends its ids. Throws InputError
    /// naming the vocabulary when the piece holds a byte without a token.
    void encode(std::string_view piece, std::vector<uint32_t>& out) const;

    /// Id of a key, or -1.
    int64_t find(const std::string& key) const;
    size_t size() const { return m_id_to_bytes.size(); }
    /// The bytes token `id` stands for.
    const std::string& bytes(uint32_t id) const { return m_id_to_bytes[id]; }

  private:
    struct Merge {
        uint32_t rank;
        uint32_t result;
    };
    static uint64_t pair_key(uint32_t left, uint32_t right) {
        return (static_cast<uint64_t>(left) << 32) | right;
    }
    const Merge* find_merge(uint32_t left, uint32_t right) const;
    /// The piece's ids: the merges applied to its byte tokens (bpe_model.cpp's MergeLoop).
    std::vector<uint32_t> bpe(std::string_view piece) const;
    /// Each byte's single-byte token; throws InputError naming the vocabulary for a byte
    /// without one.
    std::vector<uint32_t> byte_ids(std::string_view piece) const;
    /// The id of the whole piece as one vocabulary entry, or -1 (for ignore_merges).
    int64_t whole_piece_id(std::string_view piece) const;

    std::string m_vocab_name;
    std::unordered_map<std::string, uint32_t> m_key_to_id;  // keys in GPT-2's alphabet
    std::vector<std::string> m_id_to_bytes;                 // raw bytes of each token
    std::array<uint32_t, 256> m_byte_id{};                  // single-byte token ids
    std::unordered_map<uint64_t, Merge> m_merges;           // (left, right) -> merge
    uint32_t m_num_merges = 0;
    bool m_ignore_merges = false;
    // encode() is const and may be called from several threads; the cache is guarded.
    mutable std::mutex m_cache_mutex;
    mutable std::unordered_map<std::string, std::vector<uint32_t>> m_cache;
};

}  // namespace zt::detail
