// Helpers shared by the corpus preparation sources (prepare*.cpp; not part of the public
// API): reading an input file, the text and JSON Lines runs, and what both do at the end.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "tokenizer_detail.hpp"
#include "ztrain/data/prepare.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt::detail {

/// A whole input file; InputError naming it (as --input) when it cannot be read.
std::string read_prepare_input(const std::string& path);

/// True when the content holds a NUL byte.
bool is_binary(const std::string& content);

/// --tokenizer names a tokenizer.json file (not byte or gpt2).
bool is_hf_tokenizer(const PrepareOptions& opt);

/// Creates the output folder; InputError naming it when that fails.
void create_output_folder(const std::string& dir);

/// DIR/PREFIX_NNNNNN.bin, the index'th shard's path.
std::string shard_path(const std::string& dir, const std::string& prefix, size_t index);

/// "no file", the one file, or "FIRST .. LAST".
std::string describe_files(const std::vector<std::string>& files);

/// After the shards are written: removes stale shards and saves the tokenizer into the
/// output folder; returns the number of stale shards removed.
size_t finish_output(const PrepareOptions& opt, const Tokenizer& tok, const std::vector<std::string>& train_files,
                     const std::vector<std::string>& val_files);

/// The line that reports removed stale shards (nothing when none were).
void print_stale_shards(std::ostream& out, size_t stale);

/// The line that reports the tokenizer description written into the output folder.
void print_tokenizer_written(std::ostream& out, const PrepareOptions& opt);

/// The text run: documents into token shards.
void prepare_documents(const PrepareOptions& opt, const Tokenizer& tok, const std::vector<std::string>& files,
                       const SkippedInputs& skipped, std::ostream& out);

/// The JSON Lines run: everything is read, checked and rendered before the output folder
/// is touched, so a bad line (without skip_bad) leaves nothing behind.
void prepare_examples(const PrepareOptions& opt, const Tokenizer& tok, const std::vector<std::string>& files,
                      std::ostream& out, std::ostream& err);

}  // namespace zt::detail
