// Helpers shared by the corpus preparation sources (prepare*.cpp; not part of the public
// API). The run streams: the inputs are cut into parts (a whole file, or a byte range of a
// plain file at a document or line boundary, the same cut whatever the thread and rank
// counts); each part is read in chunks, its documents or examples tokenized in ordered
// batches on worker threads into the part's segment files (train and val by the hash of
// the record's position) in a work folder beside the output; then the shards are cut from
// the segments at fixed global token offsets, and the finished folder is moved into place.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tokenizer_detail.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/prepare.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt::detail {

// ---- Inputs (prepare_input.cpp) ---------------------------------------------------------

/// True for the input "-" (standard input).
bool is_stdin(const std::string& path);

/// An input's bytes, decompressed when the content starts with the gzip or zstd magic;
/// "-" reads standard input. InputError naming the file when it cannot be read.
class InputReader {
  public:
    /// Reads from raw byte `offset` (a plain file only; 0 otherwise).
    InputReader(const std::string& path, uint64_t offset);
    ~InputReader();
    InputReader(const InputReader&) = delete;
    InputReader& operator=(const InputReader&) = delete;

    /// Up to `n` bytes of content into `buf`; 0 at the end.
    size_t read(char* buf, size_t n);
    /// Raw (compressed) bytes read so far.
    uint64_t raw_bytes() const;
    bool compressed() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

/// Whether the file's content is gzip or zstd (by its first bytes); false for "-".
bool is_compressed_file(const std::string& path);

/// One line of an input and where it starts (content bytes from the start of the file).
struct InputLine {
    std::string_view text;  ///< with its '\n' (none on a last line without one)
    uint64_t offset = 0;
};

/// Reads an input's lines from a content offset up to `end` (the line that starts before
/// `end` is the last). InputError naming the file for NUL bytes when `text_only`.
class LineReader {
  public:
    LineReader(const std::string& path, uint64_t begin, uint64_t end, bool text_only);
    /// The next line (valid until the next call); false at the end.
    bool next(InputLine& line);
    uint64_t raw_bytes() const { return m_in.raw_bytes(); }

  private:
    bool fill();

    std::string m_path;
    InputReader m_in;
    uint64_t m_end;
    bool m_text_only;
    std::string m_buf;
    size_t m_pos = 0;
    uint64_t m_buf_offset = 0;  ///< content offset of m_buf[0]
    bool m_eof = false;
};

/// A part of the inputs: content bytes [begin, end) of file `file` (end = UINT64_MAX:
/// to the end; compressed files and standard input are one part).
struct InputPart {
    size_t file = 0;
    uint64_t begin = 0;
    uint64_t end = UINT64_MAX;
    uint64_t raw_bytes = 0;  ///< size on disk (0 for standard input), for progress
};

/// Cuts the files into parts of about `part_bytes` at record boundaries (jsonl: lines;
/// text: after a --doc-separator line; text without one: whole files).
std::vector<InputPart> plan_parts(const std::vector<std::string>& files, const PrepareOptions& opt, bool jsonl,
                                  uint64_t part_bytes);

// ---- Records and their tokens (prepare_text.cpp, prepare_examples.cpp) ----------------

/// One document or JSON line, with its place in the file.
struct InputRecord {
    std::string text;
    uint64_t offset = 0;  ///< content offset in its file (the split's hash key)
    uint64_t line = 0;    ///< jsonl: 1-based line number within its part
};

/// True when the record at `offset` of file `file` goes to val: a fixed-seed hash of the
/// position falls under the fraction (independent of threads, ranks and parts).
bool goes_to_val(double val_fraction, size_t file, uint64_t offset);

/// Tokens of one split of a batch: the tokens, the target flags (examples only) and the
/// length of each record.
struct SplitTokens {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;
    std::vector<uint64_t> lengths;
};

/// A tokenized batch: train and val tokens, and what was counted.
struct BatchResult {
    SplitTokens split[2];  ///< 0 train, 1 val
    size_t blank = 0;
    size_t by_layout[4] = {0, 0, 0, 0};
    std::vector<std::pair<uint64_t, std::string>> bad;  ///< jsonl: (line in part, reason)
};

/// What a part's records are tokenized with.
struct RecordContext {
    const PrepareOptions* opt = nullptr;
    const Tokenizer* tok = nullptr;
    bool jsonl = false;
    size_t file = 0;
    JsonlLayout layout = JsonlLayout::kAuto;  ///< jsonl: the file's layout
    uint64_t layout_from = 0;                  ///< jsonl: lines before this offset parse with kAuto
    const ExampleRenderer* renderer = nullptr;       ///< jsonl: text and prompt records
    const ExampleRenderer* chat_renderer = nullptr;  ///< jsonl: chat records; null: chat_error
    std::string chat_error;                           ///< why chat records cannot be rendered
};

/// Tokenizes text documents (every one after Tokenizer::eot) into `out`.
void tokenize_documents(const std::vector<InputRecord>& records, const RecordContext& ctx, BatchResult& out);

/// Parses and renders JSON lines into `out`; bad lines are recorded, not thrown.
void tokenize_examples(const std::vector<InputRecord>& records, const RecordContext& ctx, BatchResult& out);

/// --format jsonl:LAYOUT's layout, else kAuto.
JsonlLayout forced_layout(const PrepareOptions& opt);

/// Without --format jsonl:LAYOUT, the first good line of a file fixes its layout: when
/// `line` (at `offset`) is good, sets the layout and layout_from (lines before it parse
/// as kAuto) and returns true.
bool take_layout_from(std::string_view line, uint64_t offset, RecordContext& ctx);

/// The layout of a jsonl file read from its start (for a part that starts later).
void find_file_layout(const std::string& path, RecordContext& ctx);

/// The renderers of a jsonl run: `plain` for text and prompt records (with --chat-template's
/// template when given, whose special tokens must exist), `chat` for chat records (or the
/// reason there is none, raised at the first chat record).
struct ExampleRenderers {
    std::unique_ptr<ExampleRenderer> plain;
    std::unique_ptr<ExampleRenderer> chat;
    std::string chat_error;
    std::optional<ChatTemplate> chat_template;
};
ExampleRenderers make_example_renderers(const PrepareOptions& opt, const Tokenizer& tok);

// ---- Parts into segments (prepare_parts.cpp) -------------------------------------------

/// What a finished part holds (its done record).
struct PartSummary {
    uint64_t records[2] = {0, 0};
    uint64_t tokens[2] = {0, 0};
    uint64_t targets[2] = {0, 0};
    uint64_t blank = 0;
    uint64_t lines = 0;  ///< lines read (jsonl line numbers of later parts of the file)
    uint64_t by_layout[4] = {0, 0, 0, 0};
    uint64_t bad_count = 0;
    std::vector<std::pair<uint64_t, std::string>> bad;  ///< the first few
};

/// Where a part's segment files and done record live in the work folder.
std::string segment_path(const std::string& work, size_t part, int split, const char* kind);
std::string part_done_path(const std::string& work, size_t part);

/// Progress of this rank's parts: a line to `out` at most every `every_seconds`.
class PrepareProgress {
  public:
    PrepareProgress(uint64_t total_raw_bytes, double every_seconds, std::ostream* out);
    void add(uint64_t raw_bytes, uint64_t records, uint64_t tokens);

  private:
    uint64_t m_total;
    double m_every;
    std::ostream* m_out;  ///< null: silent (ranks other than 0)
    uint64_t m_bytes = 0, m_records = 0, m_tokens = 0;
    std::chrono::steady_clock::time_point m_start;
    double m_last = 0;
};

/// Tokenizes one part into its segment files on `threads` workers and writes its done
/// record last (a part with a done record is finished).
void process_part(size_t index, const InputPart& part, const std::vector<std::string>& files,
                  const RecordContext& base, int threads, const std::string& work, PrepareProgress& progress);

/// A finished part's summary; nullopt when it has none (not finished).
std::optional<PartSummary> read_part_done(const std::string& work, size_t part);

// ---- Segments into shards (prepare_shards.cpp) -----------------------------------------

/// The shards of one split cut from the segments.
struct SplitShards {
    std::vector<std::string> files;
    uint64_t records = 0;
    uint64_t tokens = 0;
    uint64_t targets = 0;
};

/// Writes the shards of both splits into `dir` (those of rank `rank` of `ranks`: shard i
/// when i % ranks == rank; a shard already there is kept, a resumed run's), and returns
/// what every rank's shards hold. The val split's records are those the hash chose; when
/// that is none and val_fraction > 0 with two or more records, the last record is val.
std::vector<SplitShards> write_shards(const std::vector<PartSummary>& parts, const std::string& work,
                                      const std::string& dir, const PrepareOptions& opt, bool examples,
                                      bool force_u32, int rank, int ranks);

// ---- The run (prepare.cpp, prepare_run.cpp) --------------------------------------------

/// Whether the files are JSON Lines: --format says so, or (without --format) every file is
/// named *.jsonl (or *.jsonl.gz, *.jsonl.zst). A mix without --format is an error.
bool is_jsonl_run(const PrepareOptions& opt, const std::vector<std::string>& files);

// ---- Output -----------------------------------------------------------------------------

/// True when the content holds a NUL byte.
bool is_binary(std::string_view content);

/// --tokenizer names a tokenizer.json file (not byte or gpt2).
bool is_hf_tokenizer(const PrepareOptions& opt);

/// DIR/PREFIX_NNNNNN.bin, the index'th shard's path.
std::string shard_path(const std::string& dir, const std::string& prefix, size_t index);

/// "no file", the one file, or "FIRST .. LAST".
std::string describe_files(const std::vector<std::string>& files);

/// The line that reports removed stale shards (nothing when none were).
void print_stale_shards(std::ostream& out, size_t stale);

/// The line that reports the tokenizer description written into the output folder.
void print_tokenizer_written(std::ostream& out, const PrepareOptions& opt);

/// Totals over the parts.
PartSummary total_of(const std::vector<PartSummary>& parts);

/// The text run's summary lines.
void print_document_summary(std::ostream& out, const PrepareOptions& opt, const Tokenizer& tok, bool force_u32,
                            size_t num_files, const SkippedInputs& skipped, const PartSummary& total,
                            const std::vector<SplitShards>& shards);

/// The JSON Lines run's summary lines.
void print_example_summary(std::ostream& out, const PrepareOptions& opt, const Tokenizer& tok,
                           const PartSummary& total, const std::vector<SplitShards>& shards);

/// Prints the bad lines of all parts as FILE:LINE: reason (the first 20, then a count) to
/// `err` and, without skip_bad, throws the InputError that stops the run.
void report_bad_lines(const PrepareOptions& opt, const std::vector<std::string>& files,
                      const std::vector<InputPart>& parts, const std::vector<PartSummary>& done, std::ostream& err);

}  // namespace zt::detail
