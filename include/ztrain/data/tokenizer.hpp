// Tokenizers: byte-level, GPT-2 byte-pair encoding, Hugging Face byte-level BPE
// (tokenizer.json), plus the tokenizer description file.
//
// zt-prepare writes DIR/tokenizer.json next to the shards; ztrain loads it to decode
// samples. Its fields:
//   {"type": "byte", "vocab_size": 257, "eot": 256}
//   {"type": "gpt2", "vocab_size": N, "eot": ID, "vocab": "vocab.json", "merges": "merges.txt"}
//   {"type": "hf", "vocab_size": N, "eot": ID, "file": "hf_tokenizer.json"}
// where the file names are relative to the description's folder (zt-prepare copies the
// files there, so the folder is self-contained). The Hugging Face file is copied as
// hf_tokenizer.json because the description itself is named tokenizer.json.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;
    virtual std::string type() const = 0;
    virtual int vocab_size() const = 0;
    /// The document separator: zt-prepare writes it before every document and ztrain starts
    /// samples from it. End-of-text for byte and gpt2 (llm.c's convention); for hf, the
    /// tokenizer's BOS when it has one (Llama 3's <|begin_of_text|>), else its end-of-text.
    virtual uint32_t eot() const = 0;
    /// The token that ends a text (what a model learns to emit to stop): eot() for byte and
    /// gpt2; for hf, the end-of-sequence token (Llama 3's <|end_of_text|>), else eot().
    virtual uint32_t end_of_text() const { return eot(); }
    /// The id of a special token given by its text (e.g. "<|eot_id|>"): an added token of a
    /// tokenizer.json (or its vocabulary entry); "<|endoftext|>" for byte and gpt2. Empty
    /// when the tokenizer has no such token.
    virtual std::optional<uint32_t> special_token(const std::string& text) const = 0;
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

/// A Hugging Face `tokenizers` file (tokenizer.json) of the byte-level BPE kind: model
/// "BPE" (vocab + merges, as "a b" strings or [a, b] pairs; ignore_merges), added tokens
/// (matched exactly in the text, before pre-tokenization), no normalizer or NFC, decoder
/// ByteLevel, and a pre-tokenizer that is ByteLevel (GPT-2's split), Split with Llama 3's,
/// Qwen2's or GPT-2's regex followed by ByteLevel(use_regex=false), optionally after Digits. Throws InputError
/// naming the file and the unsupported or malformed key.
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& tokenizer_json_path);

/// Loads a tokenizer description (tokenizer.json; a folder means FOLDER/tokenizer.json).
/// Throws InputError naming the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& description_path);

/// Where the tokenizer of a model to run (zt-generate, zt-eval) may be, in the order
/// find_model_tokenizer looks.
struct ModelTokenizerPlaces {
    /// --tokenizer: zt-prepare's description or a Hugging Face tokenizer.json (a directory:
    /// its tokenizer.json).
    std::string given;
    /// A Hugging Face model directory: its tokenizer.json, else its vocab.json + merges.txt.
    std::string hf_dir;
    /// A checkpoint's run: its data.tokenizer, then the tokenizer.json zt-prepare wrote
    /// beside its data.train shards.
    std::string run_tokenizer;
    std::string run_train;
    std::string model;  ///< the model's path, for messages
};

/// The first tokenizer of `places` that exists; InputError naming what was looked for (and
/// a --tokenizer that does not exist).
std::unique_ptr<Tokenizer> find_model_tokenizer(const ModelTokenizerPlaces& places);

/// A tokenizer in Hugging Face's files (a model directory's tokenizer.json and
/// tokenizer_config.json, as AutoTokenizer.from_pretrained reads them) and its special ids.
struct HfTokenizerFiles {
    std::string tokenizer_json;
    std::string tokenizer_config;
    uint32_t bos = 0;  ///< the document separator (eot()): config.json's bos_token_id
    uint32_t eos = 0;  ///< end_of_text(): config.json's eos_token_id
};

/// The Hugging Face files of the tokenizer the description at `description_path` loads (see
/// hf_tokenizer_export.cpp): an hf description's tokenizer.json as it is, a gpt2 one's
/// vocabulary and merges in GPT-2's tokenizer.json layout. model_max_length is the model's
/// context. Empty for the byte tokenizer, which Hugging Face has no equal of. Throws
/// InputError naming a bad description or file.
std::optional<HfTokenizerFiles> hf_tokenizer_files(const std::string& description_path, long model_max_length);

/// A pre-tokenizer step: text split by a regex (a tokenizer.json's Split pattern, or GPT-2's
/// regex), run by PCRE2 with UTF and Unicode properties (\p{L}, \p{N}, \s), JIT-compiled where
/// PCRE2 has a JIT. As Hugging Face's Split with behavior "Isolated": each match and each
/// stretch of text between matches is a piece. Bytes that are not valid UTF-8 match nothing,
/// so they end up in the stretches between matches.
class RegexSplit {
  public:
    /// Compiles `pattern`; one PCRE2 cannot compile is an InputError naming `where` (the file
    /// and key it came from), the pattern and PCRE2's message.
    RegexSplit(const std::string& pattern, const std::string& where);
    /// Appends the pieces of `text`: non-empty, viewing into `text`, concatenating to it.
    void split_into(std::string_view text, std::vector<std::string_view>& pieces) const;

  private:
    struct Compiled;
    std::shared_ptr<const Compiled> m_compiled;
    std::string m_pattern;
    std::string m_where;
};

/// GPT-2's pre-tokenizer: splits text into the pieces that BPE encodes independently,
/// exactly as GPT-2's regex does. The pieces view into `text` and concatenate to it.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

/// Llama 3's pre-tokenizer regex, same contract as gpt2_pretokenize.
std::vector<std::string_view> llama3_pretokenize(std::string_view text);

/// Hugging Face's Digits pre-tokenizer: runs of numbers (\p{N}) and of everything else, each
/// number character alone when `individual_digits`.
std::vector<std::string_view> digits_pretokenize(std::string_view text, bool individual_digits);

/// The RegexSplit of Hugging Face's Digits pre-tokenizer (\p{N}+, or \p{N} when individual).
const RegexSplit& digits_split(bool individual_digits);

/// Unicode NFC normalization for a tokenizer.json's {"type": "NFC"} normalizer (utf8proc;
/// its Unicode version against `tokenizers`', see nfc.cpp). Bytes that are not valid UTF-8
/// pass through unchanged.
std::string nfc_normalize(std::string_view text);

}  // namespace zt
