// Tokenizers: byte-level and GPT-2 byte-pair encoding, plus the tokenizer description file.
//
// zt-prepare writes DIR/tokenizer.json next to the shards; ztrain loads it to decode
// samples. Its fields:
//   {"type": "byte", "vocab_size": 257, "eot": 256}
//   {"type": "gpt2", "vocab_size": N, "eot": ID, "vocab": "vocab.json", "merges": "merges.txt"}
// where the gpt2 file names are relative to the description's folder (zt-prepare copies the
// vocabulary and merges there, so the folder is self-contained).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;
    virtual std::string type() const = 0;
    virtual int vocab_size() const = 0;
    /// End-of-text token, appended between documents.
    virtual uint32_t eot() const = 0;
    virtual std::vector<uint32_t> encode(const std::string& text) const = 0;
    /// Decodes tokens to UTF-8 bytes (invalid sequences are passed through as bytes).
    /// A token >= vocab_size() throws zt::Error.
    virtual std::string decode(const std::vector<uint32_t>& tokens) const = 0;
    /// Writes DIR/tokenizer.json (and copies any files it needs into DIR).
    virtual void save(const std::string& dir) const = 0;
};

/// Bytes 0..255 are tokens 0..255; token 256 is end-of-text; vocab_size 257.
/// decode() renders token 256 as the text "<|endoftext|>", like GPT-2's vocabulary does.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

/// GPT-2 BPE from an encoder/vocab JSON (token string -> id, in GPT-2's byte-to-unicode
/// alphabet) and a merges file (optional "#version" first line, then "a b" per line, in
/// priority order). Both OpenAI's (encoder.json + vocab.bpe) and Hugging Face's
/// (vocab.json + merges.txt) names hold the same formats. Throws InputError naming the file
/// and line on malformed input.
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json_path,
                                                const std::string& merges_path);

/// Loads a tokenizer description (tokenizer.json; a folder means FOLDER/tokenizer.json).
/// Throws InputError naming the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& description_path);

/// GPT-2's pre-tokenizer: splits text into the pieces that BPE encodes independently,
/// exactly as GPT-2's regex does. The pieces view into `text` and concatenate to it.
/// Exposed for tests.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace zt
