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
// Inputs may be gzip or zstd compressed (detected by content, whatever the name: .gz,
// .zst, .jsonl.gz ...); "-" reads standard input (one part, never split, not resumable).
//
// Text: each input file is one document, or, with a document separator, each run of lines
// between lines equal to it (e.g. "%" for fortune files; a line's trailing '\r' is
// ignored). Documents that are empty or only whitespace are skipped. Every document is
// preceded by the tokenizer's document separator (Tokenizer::eot). Shards hold uint16
// tokens (version 1) unless the vocabulary exceeds 65536 ids (version 2, uint32),
// shard_tokens tokens each, the last one shorter.
//
// JSON Lines (format jsonl, or every input named *.jsonl): one example per line, in the
// layouts of examples.hpp, written as example shards of at most shard_tokens tokens (an
// example is never split). Bad lines are reported as FILE:LINE: reason, and stop the run
// (InputError, output untouched) unless skip_bad.
//
// The validation split (both), in one pass: a document or example goes to val when a
// fixed-seed hash of its position (input file number, byte offset in the file's content)
// falls under val_fraction, so it is the same whatever the threads, ranks or parts; when
// that picks nothing while val_fraction > 0 and there are two or more, the last one is val.
// Both splits keep the input order.
//
// Streaming: the inputs are read in chunks and cut into parts (a byte range of a plain
// file, at a document or line boundary; compressed files and standard input are whole
// parts); the parts are tokenized on `threads` threads and shared among the ranks; the
// shards are cut from the parts' tokens at fixed token offsets, so the shards are the
// same, byte for byte, for any thread and rank count. Memory holds a few batches of
// documents per thread (and a whole document; an example shard while it is written), not
// the input. Everything is written into OUTPUT.zt-prepare-partial and moved into the
// output folder at the end, so a failure leaves the output untouched; a rerun of an
// interrupted run with the same inputs and options resumes there (finished parts and
// shards are kept) and writes the same shards.
//
// Outputs: DIR/train_000000.bin..., DIR/val_000000.bin..., DIR/tokenizer.json
// (Tokenizer::save); old train_NNNNNN.bin / val_NNNNNN.bin files in DIR that the run did
// not write are removed, so a glob like DIR/train_*.bin never picks up a stale shard.
// Deliberately does not: shuffle or deduplicate documents, or recurse into folders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ztrain/core/error.hpp"
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
    int threads = 0;            ///< tokenizing threads per rank; 0: cores / ranks on the node
    long long part_bytes = 64ll << 20;  ///< inputs are cut into parts of about this size
    long long batch_bytes = 1ll << 20;  ///< documents are tokenized in batches of about this size
    double progress_seconds = 5.0;      ///< at most one progress line (to err) this often
};

/// The ranks that prepare together (mpirun -np N zt-prepare): each tokenizes its share of
/// the parts and writes its share of the shards. One process by default.
struct PrepareRanks {
    int rank = 0;
    int size = 1;
    int ranks_on_node = 1;
    /// A barrier that returns true when every rank passed true (zt-prepare: an MPI
    /// allreduce); a rank that failed passes false, and the others then stop too.
    std::function<bool(bool ok)> all_ok = [](bool ok) { return ok; };
};

/// Thrown on the ranks that stop because another rank failed (that rank reports why).
class OtherRankFailed : public Error {
  public:
    OtherRankFailed() : Error("another rank failed") {}
};

/// Prepares the corpus: checks the options (before any file is touched), writes the shards
/// and the tokenizer, and prints a summary to `out` (jsonl bad lines and the progress line
/// go to `err`; rank 0 prints). InputError for bad options and bad input.
void prepare_corpus(const PrepareOptions& opt, std::ostream& out, std::ostream& err,
                    const PrepareRanks& ranks = PrepareRanks());

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

/// Expands the inputs into the files to read, in order (folders: see above; "-" stays
/// "-"). A folder's file is binary when its first 64 KiB (decompressed) hold a NUL byte.
/// InputError for a missing input or a folder without text files.
std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs, SkippedInputs& skipped);

/// True for the shard names zt-prepare writes: train_NNNNNN.bin or val_NNNNNN.bin.
bool is_prepared_shard_name(const std::string& name);

/// Removes the train_NNNNNN.bin / val_NNNNNN.bin files in `dir` not in `written`; returns
/// how many.
size_t remove_stale_shards(const std::string& dir, const std::set<std::string>& written);

}  // namespace zt
