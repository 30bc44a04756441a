// Corpus preparation (zt-prepare): text files into token shards, or JSON Lines fine-tuning
// examples into example shards, with a validation split and the tokenizer files beside them.
// Messages name zt-prepare's command-line options (--input, --output ...), since that is
// where every setting comes from.
//
// Tokenizers: byte, gpt2 (vocab + merges), or a path to a Hugging Face tokenizer.json
// (byte-level BPE: GPT-2, Llama 3, SmolLM ...; copied into the output as hf_tokenizer.json).
// Inputs: a file is read as is (a file containing NUL bytes is rejected as binary); a
// folder contributes its regular files (not recursive, sorted by name), skipping binary
// files (any NUL byte), symlinks (which usually duplicate a file, like fortune's *.u8) and
// anything that is not a regular file.
//
// Text: each input file is one document, or, with a document separator, each run of lines
// between lines equal to it (e.g. "%" for fortune files). Documents that are empty or only
// whitespace are skipped. Every document is preceded by the tokenizer's document separator
// (Tokenizer::eot). The last val_fraction of the documents, in input order, go to val.
// Shards hold uint16 tokens (version 1) unless the vocabulary exceeds 65536 ids (version
// 2, uint32), shard_tokens tokens each, the last one shorter.
//
// JSON Lines (format jsonl, or every input named *.jsonl): one example per line, in the
// layouts of examples.hpp, written as example shards of at most shard_tokens tokens (an
// example is never split). Every line is parsed and rendered before anything is written:
// bad lines are reported as FILE:LINE: reason, and stop the run (InputError, output
// untouched) unless skip_bad. The split is by example, a fixed-seed choice, so the same
// input always splits the same way.
//
// Validation count (both): floor(val_fraction * n), at least one when the fraction is > 0
// and n >= 2, never all n. Outputs: DIR/train_000000.bin..., DIR/val_000000.bin...,
// DIR/tokenizer.json (Tokenizer::save); old train_NNNNNN.bin / val_NNNNNN.bin files in DIR
// that the run did not write are removed, so a glob like DIR/train_*.bin never picks up a
// stale shard. Deliberately does not: shuffle or deduplicate documents, recurse into
// folders, or tokenize in parallel (a single pass is fast enough for these corpora).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ztrain/data/examples.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

/// What to prepare: zt-prepare's options.
struct PrepareOptions {
    std::vector<std::string> inputs;  ///< text files or folders
    std::string output;               ///< the folder for the shards (created if needed)
    std::string tokenizer = "byte";   ///< byte, gpt2, or a tokenizer.json path
    std::string vocab;                ///< gpt2: vocab.json / encoder.json
    std::string merges;               ///< gpt2: merges.txt / vocab.bpe
    double val_fraction = 0.05;       ///< in [0, 1)
    std::optional<std::string> doc_separator;
    long long shard_tokens = 100'000'000;
    std::string format;         ///< "" (from the file names), text, jsonl, jsonl:text|prompt|chat
    std::string chat_template;  ///< "" = from tokenizer_config.json beside the tokenizer.json
    bool skip_bad = false;      ///< jsonl: skip and count bad lines
    long long max_tokens = 0;   ///< jsonl: a longer example is a bad line; 0: no limit
};

/// Prepares the corpus: checks the options (before any file is touched), writes the shards
/// and the tokenizer, and prints a summary to `out` (jsonl bad lines go to `err`).
/// InputError for bad options and bad input.
void prepare_corpus(const PrepareOptions& opt, std::ostream& out, std::ostream& err);

/// Validates every option before any file is touched; InputError naming the option.
void check_prepare_options(const PrepareOptions& opt);

/// The tokenizer the options name (byte, gpt2, or a tokenizer.json).
std::unique_ptr<Tokenizer> make_prepare_tokenizer(const PrepareOptions& opt);

/// What expanding folders skipped.
struct SkippedInputs {
    size_t binary = 0;
    size_t symlinks = 0;
    size_t other = 0;
};

/// Expands the inputs into the files to read, in order (folders: see above). InputError
/// for a missing input or a folder without text files.
std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs, SkippedInputs& skipped);

/// Splits a file into documents (views into `content`): the whole content without a
/// separator, else the runs of lines between lines equal to it (a line's trailing '\r' is
/// ignored). Blank documents are dropped and counted in `blank`.
std::vector<std::string_view> split_documents(const std::string& content,
                                              const std::optional<std::string>& separator, size_t& blank);

/// How many of n documents or examples go to val (see "Validation count" above).
size_t validation_count(double val_fraction, size_t n);

/// Accumulates tokens and writes DIR/PREFIX_NNNNNN.bin token shards of a fixed size.
class TokenShardWriter {
  public:
    TokenShardWriter(std::string dir, std::string prefix, size_t shard_tokens, bool force_u32);

    void append(uint32_t token);
    void append(const std::vector<uint32_t>& tokens);
    /// Writes the last, shorter shard (if any tokens are left).
    void finish();

    size_t total() const { return m_total; }
    const std::vector<std::string>& files() const { return m_files; }

  private:
    void flush();

    std::string m_dir;
    std::string m_prefix;
    size_t m_shard_tokens;
    bool m_force_u32;
    std::vector<uint32_t> m_buffer;
    std::vector<std::string> m_files;
    size_t m_total = 0;
};

/// Splits examples into train and val (validation_count of them, chosen by a fixed-seed
/// shuffle so a sorted input does not put one kind of example in val); both keep the input
/// order.
void split_examples(const ExampleSet& all, double val_fraction, ExampleSet& train, ExampleSet& val);

/// Writes DIR/PREFIX_NNNNNN.bin example shards of at most shard_tokens tokens (an example
/// longer than that gets a shard of its own); returns the files written.
std::vector<std::string> write_example_shards(const std::string& dir, const std::string& prefix,
                                              const ExampleSet& set, size_t shard_tokens, bool force_u32);

/// True for the shard names zt-prepare writes: train_NNNNNN.bin or val_NNNNNN.bin.
bool is_prepared_shard_name(const std::string& name);

/// Removes the train_NNNNNN.bin / val_NNNNNN.bin files in `dir` not in `written`; returns
/// how many.
size_t remove_stale_shards(const std::string& dir, const std::set<std::string>& written);

}  // namespace zt
