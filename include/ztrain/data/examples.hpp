// Fine-tuning examples: JSON Lines records in three layouts, the chat templates that render
// them into tokens with a per-token target mask, and the example shards that store them.
//
// An example is a token sequence plus, per token, whether it is a *target*: a token the
// model is trained to predict from the tokens before it in the same example. Its first token
// is never a target (nothing precedes it). Layouts:
//   {"text": T}                          [separator] T [end]             targets: T, end
//   {"prompt": P, "completion": C}       [separator] P C [end]           targets: C, end
//   {"messages": [{"role", "content"}]}  the chat template's rendering   targets: each
//                                        assistant turn's content and its end-of-turn token
// where separator is Tokenizer::eot() (the document separator zt-prepare puts before every
// pretraining document) and end is Tokenizer::end_of_text(). Prompt and completion are
// tokenized separately, so the mask boundary falls exactly between them.
//
// Example shard (version 3 of the llm.c-style header):
//   header[0] = 20240520, header[1] = 3, header[2] = token count N, header[3] = example
//   count E, header[4] = bytes per token (2 or 4); every other header word is 0.
//   Then N tokens (uint16 or uint32), N target bytes (0 or 1), and E + 1 uint32 example
//   starts (0 first, N last, strictly increasing): example e is [starts[e], starts[e+1]).
// Versions 1 and 2 (token_data.hpp) are unchanged; a pretraining reader rejects version 3
// with a message that says what the file is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ztrain/data/tokenizer.hpp"

namespace zt {

constexpr int32_t kShardVersionExamples = 3;

/// Examples stored back to back: example e is tokens/target [starts[e], starts[e+1]).
struct ExampleSet {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;      ///< 1 where the token is a target
    std::vector<uint64_t> starts{0};  ///< num_examples() + 1 entries

    size_t num_examples() const { return starts.size() - 1; }
    size_t length(size_t e) const { return static_cast<size_t>(starts[e + 1] - starts[e]); }
    /// Appends one example (tokens and target have the same, non-zero size).
    void append(const std::vector<uint32_t>& example_tokens, const std::vector<uint8_t>& example_target);
    /// Appends example e of `other`.
    void append_from(const ExampleSet& other, size_t e);
    /// Number of target tokens in the whole set.
    size_t num_targets() const;
};

/// Writes an example shard (version 3), uint16 tokens unless force_u32 or a token needs 32
/// bits. PATH.tmp then rename, like write_token_shard.
void write_example_shard(const std::string& path, const ExampleSet& examples, bool force_u32 = false);

/// Reads and validates an example shard: header, sizes against the file size before any
/// allocation, target bytes 0/1, starts, tokens < vocab_size (when > 0), and that the first
/// token of every example is not a target. Throws InputError naming the file.
ExampleSet read_example_shard(const std::string& path, int vocab_size);

/// The version word of a token or example shard (after checking the magic); InputError
/// naming the file when it is not one.
int32_t read_shard_version(const std::string& path);

/// Token and example counts of example shards, from their headers alone.
struct ExampleShardSizes {
    uint64_t tokens = 0;
    uint64_t examples = 0;
};

/// The counts in an example shard's header, checked as read_example_shard checks them
/// (version, widths, the file size) without reading the body: what the memory plan sizes
/// the resident examples from. InputError naming the file.
ExampleShardSizes read_example_shard_sizes(const std::string& path);

/// The counts of example shards `files`, summed; InputError naming `key` and the file.
ExampleShardSizes example_shard_sizes(const std::vector<std::string>& files, const std::string& key);
/// The same for every file `pattern` names (expand_shard_glob).
ExampleShardSizes example_shard_sizes(const std::string& pattern, const std::string& key);

/// JSON Lines layouts; kAuto decides per line from the keys present.
enum class JsonlLayout { kAuto, kText, kPrompt, kChat };

/// "text", "prompt/completion", "chat" (for messages).
const char* layout_name(JsonlLayout layout);

struct ChatMessage {
    std::string role;  ///< system, user or assistant
    std::string content;
};

/// One parsed line: exactly the fields its layout uses.
struct JsonlRecord {
    JsonlLayout layout = JsonlLayout::kText;
    std::string text;
    std::string prompt;
    std::string completion;
    std::vector<ChatMessage> messages;
};

/// Parses one JSON Lines line. On a bad line returns nothing and sets `reason` (not JSON,
/// not an object, missing key, wrong type, empty text/completion, unknown role, no
/// assistant turn, keys of two layouts). `expected` (when not kAuto) is the layout the
/// line must have. Keys other than the layout's are ignored.
std::optional<JsonlRecord> parse_jsonl_line(std::string_view line, JsonlLayout expected, std::string& reason);

/// The built-in chat templates.
enum class ChatTemplate { kLlama3, kChatml };

/// "llama3" or "chatml"; InputError naming `key` and the supported names otherwise.
ChatTemplate parse_chat_template(const std::string& name, const std::string& key);
const char* chat_template_name(ChatTemplate tmpl);

/// The built-in template a Hugging Face tokenizer_config.json's `chat_template` is,
/// recognised by its special tokens; nothing when the file has no chat_template or it is
/// neither. Throws InputError naming the file when it is not valid JSON.
std::optional<ChatTemplate> detect_chat_template(const std::string& tokenizer_config_path);

/// Renders records into examples with a tokenizer (and, for chat records, a template).
class ExampleRenderer {
  public:
    /// With a template, every special token it uses must exist in the tokenizer: an
    /// InputError names the template and the missing token.
    ExampleRenderer(const Tokenizer& tok, std::optional<ChatTemplate> tmpl);

    /// Appends the rendering of `record` to tokens/target (cleared first). A chat record
    /// needs the template (ZT_REQUIRE: the caller checks before rendering).
    void render(const JsonlRecord& record, std::vector<uint32_t>& tokens, std::vector<uint8_t>& target) const;

    /// The tokens of a conversation to be continued by the assistant, as the template
    /// renders it with add_generation_prompt (zt-generate --chat): the messages (no
    /// assistant message needed), then the assistant's header. Needs the template.
    std::vector<uint32_t> render_generation_prompt(const std::vector<ChatMessage>& messages) const;
    /// The template's end-of-turn token (<|eot_id|>, <|im_end|>); needs the template.
    uint32_t end_of_turn() const;

  private:
    void render_chat(const JsonlRecord& record, std::vector<uint32_t>& tokens, std::vector<uint8_t>& target) const;

    const Tokenizer& m_tok;
    std::optional<ChatTemplate> m_template;
    // The template's special tokens (llama3: begin, header start/end, end of turn;
    // chatml: turn start, end of turn).
    uint32_t m_begin = 0;
    uint32_t m_header_start = 0;
    uint32_t m_header_end = 0;
    uint32_t m_end_of_turn = 0;
};

/// data.packing: how examples are laid into rows of seq_len input positions.
enum class Packing {
    kPack,  ///< whole examples, first-fit in arrival order, several per row
    kPad,   ///< one example per row; a micro-batch is as long as its longest example
};

/// data.overlong: an example that needs more than seq_len input positions.
enum class Overlong { kError, kTruncate, kDrop };

/// The examples of one or many example shards, ready for rows of seq_len input positions.
/// An example of n tokens needs n - 1 positions (inputs tokens[0..n-1), targets tokens[1..n)),
/// so it fits when n - 1 <= seq_len.
class ExampleDataset {
  public:
    /// `key` names the config key in error messages (data.train, data.val). An overlong
    /// example is an InputError naming its index and length (kError), is cut to seq_len + 1
    /// tokens (kTruncate), or is left out (kDrop). An example left without a target (one
    /// token, or a truncation that cut every target off) is left out and counted.
    ExampleDataset(const std::string& pattern, const std::string& key, int vocab_size, int seq_len,
                   Overlong overlong);

    const ExampleSet& examples() const { return m_examples; }
    int seq_len() const { return m_seq_len; }
    size_t truncated() const { return m_truncated; }
    size_t dropped() const { return m_dropped; }
    size_t without_targets() const { return m_without_targets; }
    const std::vector<std::string>& files() const { return m_files; }
    /// Tokens and examples of its shards' headers, before data.overlong.
    const ExampleShardSizes& header_sizes() const { return m_header_sizes; }

    /// Bytes a dataset over shards of `sizes` holds: the constructor reserves the tokens
    /// (uint32), target flags (uint8) and starts (uint64) of every example in the headers
    /// before reading, whatever data.overlong then leaves out, so this is exact.
    static double planned_bytes(const ExampleShardSizes& sizes);
    /// Bytes its example arrays hold (their capacities): planned_bytes of its shards.
    size_t bytes() const;

  private:
    void add(const ExampleSet& shard, size_t e, size_t global_index, const std::string& key, Overlong overlong);

    std::vector<std::string> m_files;
    ExampleShardSizes m_header_sizes;
    ExampleSet m_examples;
    int m_seq_len;
    size_t m_truncated = 0;
    size_t m_dropped = 0;
    size_t m_without_targets = 0;
};

/// A micro-batch of rows: (rows, T) row-major, T = seq_len when packing, the longest
/// example's positions when padding (dynamic padding). Compacted padding (ExampleRows'
/// compact_padding) holds the global rows asked for in fewer batch rows.
struct RowBatch {
    /// Bytes of the five (max_rows, seq_len) int32 arrays: what reserve allocates, and all a
    /// fill of at most max_rows rows ever uses (rows are written at stride seq_len first).
    static double planned_bytes(int max_rows, int seq_len) { return 5.0 * max_rows * seq_len * sizeof(int32_t); }
    /// Allocates the arrays for up to max_rows rows of seq_len positions.
    void reserve(int max_rows, int seq_len);
    /// Bytes the arrays hold (their capacities).
    size_t bytes() const;

    int rows = 0;  ///< rows of T positions the arrays hold
    int T = 0;
    /// Some row holds more than one example (packed rows, or compacted padding): attention
    /// must keep to segment_start.
    bool segmented = false;
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;        ///< the next token where it is a target, else -1
    std::vector<int32_t> positions;      ///< position within the example (restarts at 0)
    std::vector<int32_t> segment_start;  ///< first position of the row this token may attend to
    /// Compacted padding only (else empty): the token's example's index in the micro-batch,
    /// the row one example per row would give it (padding: count + its row, no example's);
    /// LoRA's dropout draws by it.
    std::vector<int32_t> sample;
    size_t num_targets = 0;              ///< targets >= 0
    size_t num_tokens = 0;               ///< positions holding a real token (not padding)
};

/// The layout of compacted padding for a micro-batch of examples needing `need` positions
/// each (each at most seq_len): the rows and their positions T (>= the longest, <= seq_len)
/// with the fewest rows x T positions that first fit, longest first, achieves; row_of (sized
/// as need) receives each example's row, rows numbered in the order of their first example.
std::pair<size_t, size_t> compact_layout(const std::vector<size_t>& need, size_t seq_len,
                                         std::vector<size_t>& row_of);

/// Rows of examples in an order that is a pure function of (seed, epoch), whatever the
/// world size: global row g of the run is row g - (rows of earlier epochs) of its epoch.
/// Each epoch visits every example exactly once. Not thread-safe (caches one epoch).
/// Its arrays are allocated once, at construction (planned_bytes), and rebuilding an epoch
/// reuses them, so a new epoch in the middle of training allocates nothing.
class ExampleRows {
  public:
    /// `compact_padding` (pad only): fill lays a micro-batch's examples into rows of T
    /// positions (compact_layout: the fewest rows x T), each in its own segment, instead of
    /// one example per row padded to the longest: the same examples, losses and gradients,
    /// without computing most of the padding (needs segmented attention).
    ExampleRows(const ExampleDataset& data, Packing packing, uint64_t seed, bool shuffle,
                bool compact_padding = false);

    /// Bytes of the arrays rows over `num_examples` examples hold: pad, the epoch's order;
    /// pack, also first fit's row of each example, each row's room and start, and the
    /// order grouped by row (every row holds an example, so rows <= examples). Not counted:
    /// the epoch boundaries, 8 bytes per epoch reached.
    static double planned_bytes(size_t num_examples, Packing packing);
    /// Bytes its arrays hold (their capacities): planned_bytes of its examples.
    size_t bytes() const;

    /// Rows of epoch e (pack: depends on the epoch's order; pad: the example count).
    size_t rows_in_epoch(uint64_t epoch) const;
    /// The epoch global row g belongs to, and g's row within it.
    std::pair<uint64_t, size_t> locate(uint64_t g) const;
    /// Example indices of row r of epoch e, in position order (a copy: a later call may
    /// rebuild the cached epoch).
    std::vector<uint32_t> row(uint64_t epoch, size_t r) const;
    /// Fills `count` consecutive global rows starting at `first` (compacted padding: into
    /// batch.rows <= count rows).
    void fill(uint64_t first, int count, RowBatch& batch) const;

  private:
    void fill_compact(uint64_t first, int count, RowBatch& batch) const;
    void build_epoch(uint64_t epoch) const;
    /// Row r of the cached epoch: [begin, end) of m_order.
    std::pair<const uint32_t*, const uint32_t*> cached_row(size_t r) const;

    const ExampleDataset& m_data;
    Packing m_packing;
    uint64_t m_seed;
    bool m_shuffle;
    bool m_compact_padding;
    mutable uint64_t m_cached_epoch = UINT64_MAX;
    mutable size_t m_num_rows = 0;                 // rows of the cached epoch
    // The cached epoch's examples in row order (pad: one per row); pack: row r is
    // m_order[m_row_begin[r] .. m_row_begin[r + 1]).
    mutable std::vector<uint32_t> m_order;
    mutable std::vector<uint32_t> m_row_begin;
    // First fit's working arrays (pack): the epoch's arrival order, the row each example
    // went to, each row's room left (then its fill cursor).
    mutable std::vector<uint32_t> m_arrival;
    mutable std::vector<uint32_t> m_row_of;
    mutable std::vector<uint32_t> m_room;
    mutable std::vector<uint64_t> m_epoch_end{};  // cumulative rows after each epoch
};

}  // namespace zt
