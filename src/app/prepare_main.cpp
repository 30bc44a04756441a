// zt-prepare: tokenizes text files into llm.c token shards for ztrain.
//
//   zt-prepare --input PATH... --output DIR [--tokenizer byte|gpt2|FILE.json]
//              [--vocab F --merges F] [--val-fraction X] [--doc-separator LINE]
//              [--shard-tokens N] [--format text|jsonl[:text|:prompt|:chat]]
//              [--chat-template llama3|chatml] [--skip-bad] [--max-tokens N]
//
// JSON Lines (--format jsonl, or every input named *.jsonl): one fine-tuning example per
// line, in the layouts of ztrain/data/examples.hpp, written as example shards (tokens, a
// target mask, example boundaries). Every line is parsed and rendered before anything is
// written: bad lines are reported as FILE:LINE: reason, and stop the run (exit 2, output
// untouched) unless --skip-bad. The --val-fraction split is by example (a fixed-seed choice,
// so the same input always splits the same way).
// Tokenizers: byte, gpt2 (--vocab/--merges), or a path to a Hugging Face tokenizer.json
// (byte-level BPE: GPT-2, Llama 3, SmolLM ...; copied into DIR as hf_tokenizer.json).
// Documents: each input file is one document, or, with --doc-separator, each run of lines
// between lines equal to LINE (e.g. "%" for fortune files). Documents that are empty or
// only whitespace are skipped. Every document is preceded by the tokenizer's document
// separator (Tokenizer::eot: end-of-text as in llm.c, or the BOS of a tokenizer.json that
// has one, as Llama 3's), so the model sees a separator before each document.
// Inputs: a file is read as is (a file containing NUL bytes is rejected as binary); a
// folder contributes its regular files (not recursive, sorted by name), skipping binary
// files (any NUL byte), symlinks (which usually duplicate a file, like fortune's *.u8) and
// anything that is not a regular file.
// Split: the last --val-fraction of the documents, in input order, go to val (at least one
// when the fraction is > 0 and there are >= 2 documents; at least one always stays in train).
// Outputs: DIR/train_000000.bin..., DIR/val_000000.bin... (--shard-tokens tokens each, the
// last shard shorter), DIR/tokenizer.json (plus vocab.json and merges.txt for gpt2,
// hf_tokenizer.json for a tokenizer.json). Shards hold uint16 tokens (version 1) unless the
// vocabulary exceeds 65536 ids (version 2, uint32: Llama 3's 128256). Old
// train_NNNNNN.bin / val_NNNNNN.bin files in DIR that this run did not write are removed,
// so a glob like DIR/train_*.bin never picks up a stale shard.
// Deliberately does not: shuffle or deduplicate documents, recurse into folders, or
// tokenize in parallel (a single pass is fast enough for the corpora this targets).
// Exit status: 0 success, 2 bad input (options, files), 1 anything else.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "ztrain/core/error.hpp"
#include "ztrain/core/tool_main.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace {

struct Options {
    std::vector<std::string> inputs;
    std::string output;
    std::string tokenizer = "byte";
    std::string vocab;
    std::string merges;
    double val_fraction = 0.05;
    std::optional<std::string> doc_separator;
    long long shard_tokens = 100'000'000;
    std::string format;  ///< "" (from the file names), text, jsonl, jsonl:text|prompt|chat
    std::string chat_template;  ///< "" = from tokenizer_config.json beside --tokenizer
    bool skip_bad = false;
    long long max_tokens = 0;  ///< 0: no limit
};

struct SkipCounts {
    size_t binary = 0;
    size_t symlinks = 0;
    size_t other = 0;
};

std::string read_whole_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw zt::InputError(zt::str("--input: cannot read '", path, "'"));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) {
        throw zt::InputError(zt::str("--input: read failed for '", path, "'"));
    }
    return ss.str();
}

bool is_binary(const std::string& content) {
    return content.find('\0') != std::string::npos;
}

bool is_blank(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    });
}

/// Splits a file into documents (views into `content`), dropping blank ones; `blank`
/// counts the dropped documents.
std::vector<std::string_view> split_documents(const std::string& content,
                                              const std::optional<std::string>& separator,
                                              size_t& blank) {
    std::vector<std::string_view> docs;
    const std::string_view all(content);
    const auto keep = [&](std::string_view doc) {
        if (is_blank(doc)) {
            ++blank;
        } else {
            docs.push_back(doc);
        }
    };
    if (!separator) {
        keep(all);
        return docs;
    }
    size_t doc_start = 0;
    size_t pos = 0;
    while (pos < all.size()) {
        size_t end = all.find('\n', pos);
        const size_t next = end == std::string_view::npos ? all.size() : end + 1;
        if (end == std::string_view::npos) {
            end = all.size();
        }
        std::string_view line = all.substr(pos, end - pos);
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);  // tolerate CRLF files
        }
        if (line == *separator) {
            keep(all.substr(doc_start, pos - doc_start));
            doc_start = next;
        }
        pos = next;
    }
    keep(all.substr(doc_start));
    return docs;
}

/// Expands --input into the list of files to read, in order.
std::vector<std::string> collect_files(const std::vector<std::string>& inputs,
                                       SkipCounts& skipped) {
    std::vector<std::string> files;
    for (const std::string& input : inputs) {
        std::error_code ec;
        const fs::file_status st = fs::status(input, ec);
        if (!fs::exists(st)) {
            throw zt::InputError(zt::str("--input: '", input, "': no such file or directory"));
        }
        if (!fs::is_directory(st)) {
            files.push_back(input);
            continue;
        }
        std::vector<std::string> found;
        for (const fs::directory_entry& entry : fs::directory_iterator(input, ec)) {
            const fs::file_status link_st = entry.symlink_status(ec);
            if (fs::is_symlink(link_st)) {
                ++skipped.symlinks;
            } else if (!fs::is_regular_file(link_st)) {
                ++skipped.other;
            } else {
                found.push_back(entry.path().string());
            }
        }
        if (ec) {
            throw zt::InputError(
                zt::str("--input: cannot list '", input, "' (", ec.message(), ")"));
        }
        std::sort(found.begin(), found.end());
        size_t kept = 0;
        for (const std::string& f : found) {
            // Reading twice (here and when tokenizing) keeps memory at one file at a time.
            if (is_binary(read_whole_file(f))) {
                ++skipped.binary;
                continue;
            }
            files.push_back(f);
            ++kept;
        }
        if (kept == 0) {
            throw zt::InputError(zt::str("--input: folder '", input,
                                         "' holds no text files (binary files, symlinks and "
                                         "subfolders are skipped)"));
        }
    }
    return files;
}

/// Accumulates tokens and writes PREFIX_NNNNNN.bin shards of a fixed size.
class ShardWriter {
  public:
    ShardWriter(std::string dir, std::string prefix, size_t shard_tokens, bool force_u32)
        : m_dir(std::move(dir)),
          m_prefix(std::move(prefix)),
          m_shard_tokens(shard_tokens),
          m_force_u32(force_u32) {}

    void append(uint32_t token) {
        m_buffer.push_back(token);
        ++m_total;
        if (m_buffer.size() == m_shard_tokens) {
            flush();
        }
    }

    void append(const std::vector<uint32_t>& tokens) {
        for (uint32_t t : tokens) {
            append(t);
        }
    }

    void finish() {
        if (!m_buffer.empty()) {
            flush();
        }
    }

    size_t total() const { return m_total; }
    const std::vector<std::string>& files() const { return m_files; }

  private:
    void flush() {
        char name[64];
        std::snprintf(name, sizeof(name), "%s_%06zu.bin", m_prefix.c_str(), m_files.size());
        const std::string path = (fs::path(m_dir) / name).string();
        zt::write_token_shard(path, m_buffer, m_force_u32);
        m_files.push_back(path);
        m_buffer.clear();
    }

    std::string m_dir;
    std::string m_prefix;
    size_t m_shard_tokens;
    bool m_force_u32;
    std::vector<uint32_t> m_buffer;
    std::vector<std::string> m_files;
    size_t m_total = 0;
};

/// True for names zt-prepare writes: train_NNNNNN.bin or val_NNNNNN.bin (six digits).
/// (Hand-written rather than std::regex, whose libstdc++ code trips GCC 12's
/// maybe-uninitialized warning under the sanitizer build with -Werror.)
bool is_shard_name(const std::string& name) {
    for (const std::string prefix : {"train_", "val_"}) {
        if (name.size() == prefix.size() + 10 && name.compare(0, prefix.size(), prefix) == 0 &&
            name.compare(name.size() - 4, 4, ".bin") == 0 &&
            std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end() - 4,
                        [](char c) { return c >= '0' && c <= '9'; })) {
            return true;
        }
    }
    return false;
}

/// Removes train_NNNNNN.bin / val_NNNNNN.bin files in `dir` that this run did not write.
size_t remove_stale_shards(const std::string& dir, const std::set<std::string>& written) {
    size_t removed = 0;
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (is_shard_name(name) && written.count(entry.path().string()) == 0) {
            fs::remove(entry.path(), ec);
            ++removed;
        }
    }
    return removed;
}

std::string describe_files(const std::vector<std::string>& files) {
    if (files.empty()) {
        return "no file";
    }
    if (files.size() == 1) {
        return files.front();
    }
    return zt::str(files.front(), " .. ", files.back());
}

void print_usage(std::ostream& os, const po::options_description& desc) {
    os << "Usage: zt-prepare --input PATH... --output DIR [options]\n"
          "Tokenizes text into llm.c token shards (DIR/train_*.bin, DIR/val_*.bin) and writes\n"
          "DIR/tokenizer.json. A folder input contributes its regular text files (sorted,\n"
          "not recursive; binary files and symlinks are skipped).\n\n"
       << desc << "\n";
}

/// The options, bound to the fields of `opt`.
po::options_description describe_options(Options& opt) {
    po::options_description desc("Options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("input,i", po::value<std::vector<std::string>>(&opt.inputs)->multitoken(),
         "text files or folders (each file, or each --doc-separator part, is a document)")
        ("output,o", po::value<std::string>(&opt.output), "output folder (created if needed)")
        ("tokenizer", po::value<std::string>(&opt.tokenizer)->default_value("byte"),
         "byte, gpt2, or the path of a Hugging Face tokenizer.json (byte-level BPE)")
        ("vocab", po::value<std::string>(&opt.vocab), "gpt2: vocab.json / encoder.json")
        ("merges", po::value<std::string>(&opt.merges), "gpt2: merges.txt / vocab.bpe")
        ("val-fraction", po::value<double>(&opt.val_fraction)->default_value(0.05, "0.05"),
         "fraction of documents (the last ones) written to val, in [0, 1)")
        ("doc-separator", po::value<std::string>(),
         "a line equal to this separates documents within a file (e.g. % for fortunes)")
        ("shard-tokens", po::value<long long>(&opt.shard_tokens)->default_value(100'000'000),
         "tokens per shard file (jsonl: at most, examples are never split)")
        ("format", po::value<std::string>(&opt.format),
         "text, or jsonl[:text|:prompt|:chat] for fine-tuning examples (default: jsonl when "
         "every input file is named *.jsonl, text otherwise)")
        ("chat-template", po::value<std::string>(&opt.chat_template),
         "jsonl chat records: llama3 or chatml (default: from tokenizer_config.json beside "
         "the tokenizer.json)")
        ("skip-bad", po::bool_switch(&opt.skip_bad),
         "jsonl: skip and count bad lines instead of stopping before writing anything")
        ("max-tokens", po::value<long long>(&opt.max_tokens)->default_value(0),
         "jsonl: an example longer than this many tokens is a bad line (0: no limit)");
    // clang-format on
    return desc;
}

/// --tokenizer names a tokenizer.json file (not byte or gpt2).
bool is_hf_tokenizer(const Options& opt) { return opt.tokenizer != "byte" && opt.tokenizer != "gpt2"; }

/// Validates every option before any file is touched.
void check_options(const Options& opt) {
    ZT_INPUT_CHECK(!opt.inputs.empty(), "--input is required (text files or folders)");
    ZT_INPUT_CHECK(!opt.output.empty(), "--output is required (the folder for the shards)");
    if (is_hf_tokenizer(opt)) {
        std::error_code ec;
        ZT_INPUT_CHECK(fs::is_regular_file(opt.tokenizer, ec), "--tokenizer: '", opt.tokenizer,
                       "' is not byte, gpt2 or an existing tokenizer.json file");
    }
    if (opt.tokenizer == "gpt2") {
        ZT_INPUT_CHECK(!opt.vocab.empty() && !opt.merges.empty(),
                       "--tokenizer gpt2 needs --vocab FILE and --merges FILE");
    } else {
        ZT_INPUT_CHECK(opt.vocab.empty() && opt.merges.empty(),
                       "--vocab and --merges only apply to --tokenizer gpt2");
    }
    ZT_INPUT_CHECK(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0,
                   "--val-fraction: ", opt.val_fraction, " is outside [0, 1)");
    ZT_INPUT_CHECK(opt.shard_tokens >= 1 && opt.shard_tokens <= std::numeric_limits<int32_t>::max(),
                   "--shard-tokens: ", opt.shard_tokens, " is outside [1, ",
                   std::numeric_limits<int32_t>::max(),
                   "] (the shard header stores an int32 count)");
    ZT_INPUT_CHECK(opt.format.empty() || opt.format == "text" || opt.format == "jsonl" ||
                       opt.format == "jsonl:text" || opt.format == "jsonl:prompt" ||
                       opt.format == "jsonl:chat",
                   "--format: '", opt.format,
                   "' is not text, jsonl, jsonl:text, jsonl:prompt or jsonl:chat");
    if (!opt.chat_template.empty()) {
        zt::parse_chat_template(opt.chat_template, "--chat-template");
    }
    ZT_INPUT_CHECK(opt.max_tokens >= 0, "--max-tokens: ", opt.max_tokens, " is negative (0: no limit)");
    std::error_code ec;
    if (fs::exists(opt.output, ec) && !fs::is_directory(opt.output, ec)) {
        throw zt::InputError(zt::str("--output: '", opt.output, "' exists and is not a folder"));
    }
}

std::unique_ptr<zt::Tokenizer> make_tokenizer(const Options& opt) {
    return is_hf_tokenizer(opt)        ? zt::make_hf_tokenizer(opt.tokenizer)
           : opt.tokenizer == "gpt2"   ? zt::make_gpt2_tokenizer(opt.vocab, opt.merges)
                                       : zt::make_byte_tokenizer();
}

/// How many documents there are and where they go.
struct DocumentCounts {
    size_t docs = 0;
    size_t blank = 0;  ///< blank documents skipped
    size_t train = 0;
    size_t val = 0;
};

/// Pass 1: counts the documents, so the split is known before anything is written.
DocumentCounts count_documents(const std::vector<std::string>& files, const Options& opt) {
    DocumentCounts counts;
    for (const std::string& f : files) {
        const std::string content = read_whole_file(f);
        ZT_INPUT_CHECK(!is_binary(content), "--input: '", f,
                       "' contains NUL bytes (binary?); zt-prepare reads text files only");
        counts.docs += split_documents(content, opt.doc_separator, counts.blank).size();
    }
    ZT_INPUT_CHECK(counts.docs > 0, "--input: the ", files.size(),
                   " input file(s) hold no documents (all empty or whitespace)");
    if (opt.val_fraction > 0.0 && counts.docs >= 2) {
        counts.val = static_cast<size_t>(std::floor(opt.val_fraction * static_cast<double>(counts.docs)));
        counts.val = std::clamp<size_t>(counts.val, 1, counts.docs - 1);
    }
    counts.train = counts.docs - counts.val;
    return counts;
}

/// Pass 2: tokenizes the documents into `train` (the first counts.train) and `val`.
void write_documents(const std::vector<std::string>& files, const Options& opt, const zt::Tokenizer& tok,
                     const DocumentCounts& counts, ShardWriter& train, ShardWriter& val) {
    size_t doc_index = 0;
    size_t ignored = 0;
    for (const std::string& f : files) {
        const std::string content = read_whole_file(f);
        for (std::string_view doc : split_documents(content, opt.doc_separator, ignored)) {
            ShardWriter& out = doc_index < counts.train ? train : val;
            out.append(tok.eot());
            out.append(tok.encode(std::string(doc)));
            ++doc_index;
        }
    }
    ZT_REQUIRE(doc_index == counts.docs, "input files changed between passes: ", doc_index,
               " documents now, ", counts.docs, " before");
    train.finish();
    val.finish();
}

/// The lines zt-prepare prints when it is done.
void print_summary(const Options& opt, const zt::Tokenizer& tok, bool force_u32, size_t num_files,
                   const SkipCounts& skipped, const DocumentCounts& counts, const ShardWriter& train,
                   const ShardWriter& val, size_t stale) {
    std::cout << "zt-prepare: tokenizer " << tok.type() << " (vocab_size " << tok.vocab_size()
              << ", document separator " << tok.eot() << " '" << tok.decode({tok.eot()})
              << "', shard version " << (force_u32 ? zt::kShardVersionU32 : zt::kShardVersionU16)
              << ")\n";
    std::cout << "zt-prepare: " << num_files << " input file(s)";
    if (skipped.binary + skipped.symlinks + skipped.other > 0) {
        std::cout << "; skipped in folders: " << skipped.binary << " binary, " << skipped.symlinks
                  << " symlink(s), " << skipped.other << " other";
    }
    std::cout << "\n";
    std::cout << "zt-prepare: " << counts.docs << " documents (" << counts.train << " train, " << counts.val
              << " val)";
    if (counts.blank > 0) {
        std::cout << "; " << counts.blank << " blank document(s) skipped";
    }
    std::cout << "\n";
    std::cout << "zt-prepare: train: " << train.total() << " tokens in " << train.files().size()
              << " shard(s): " << describe_files(train.files()) << "\n";
    std::cout << "zt-prepare: val: " << val.total() << " tokens in " << val.files().size()
              << " shard(s): " << describe_files(val.files()) << "\n";
    if (counts.val == 0 && opt.val_fraction > 0) {
        // Documents are whole files unless --doc-separator splits them: one file, one
        // document, which goes to train; the validation loss would silently be missing.
        std::cout << "zt-prepare: note: no validation tokens: --val-fraction " << opt.val_fraction << " of "
                  << counts.docs << " document(s) is less than one"
                  << (!opt.doc_separator ? " (each input file is one document: split the text with "
                                                  "--doc-separator LINE, or give more files)"
                                                : "")
                  << "; leave data.val unset for this data\n";
    }
    if (stale > 0) {
        std::cout << "zt-prepare: removed " << stale << " stale shard(s) from an earlier run\n";
    }
    std::cout << "zt-prepare: wrote " << (fs::path(opt.output) / "tokenizer.json").string() << "\n";
}

// ---------------------------------------------------------------------------------------
// JSON Lines: fine-tuning examples into example shards (examples.hpp).
// ---------------------------------------------------------------------------------------

bool ends_with_jsonl(const std::string& path) {
    const std::string ext = ".jsonl";
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

/// Whether the files are JSON Lines: --format says so, or (without --format) every file is
/// named *.jsonl. A mix without --format is an error: it is unclear what was meant.
bool is_jsonl_run(const Options& opt, const std::vector<std::string>& files) {
    if (!opt.format.empty()) {
        return opt.format != "text";
    }
    const size_t jsonl = static_cast<size_t>(std::count_if(files.begin(), files.end(), ends_with_jsonl));
    ZT_INPUT_CHECK(jsonl == 0 || jsonl == files.size(), "--input: ", jsonl, " of ", files.size(),
                   " input files are named *.jsonl: give --format jsonl (all are JSON Lines) or "
                   "--format text (all are text documents)");
    return jsonl > 0;
}

zt::JsonlLayout forced_layout(const Options& opt) {
    return opt.format == "jsonl:text"     ? zt::JsonlLayout::kText
           : opt.format == "jsonl:prompt" ? zt::JsonlLayout::kPrompt
           : opt.format == "jsonl:chat"   ? zt::JsonlLayout::kChat
                                          : zt::JsonlLayout::kAuto;
}

/// A parsed line and where it came from.
struct SourcedRecord {
    zt::JsonlRecord record;
    std::string file;
    size_t line = 0;
};

/// Every record of the input, and every bad line as "FILE:LINE: reason".
struct JsonlInput {
    std::vector<SourcedRecord> records;
    std::vector<std::string> bad;
    size_t blank_lines = 0;
    size_t by_layout[4] = {0, 0, 0, 0};  // indexed by JsonlLayout
};

/// Parses one file. Without --format jsonl:LAYOUT, the first good line fixes the file's
/// layout, and a later line of another layout is bad.
void read_jsonl_file(const std::string& file, zt::JsonlLayout forced, JsonlInput& in) {
    const std::string content = read_whole_file(file);
    zt::JsonlLayout layout = forced;
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < content.size()) {
        size_t end = content.find('\n', pos);
        end = end == std::string::npos ? content.size() : end;
        const std::string_view line(content.data() + pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (is_blank(line)) {
            ++in.blank_lines;
            continue;
        }
        std::string reason;
        std::optional<zt::JsonlRecord> rec = zt::parse_jsonl_line(line, layout, reason);
        if (!rec) {
            in.bad.push_back(zt::str(file, ":", line_no, ": ", reason));
            continue;
        }
        layout = rec->layout;
        ++in.by_layout[static_cast<int>(layout)];
        in.records.push_back(SourcedRecord{std::move(*rec), file, line_no});
    }
}

/// The chat template for chat records: --chat-template, else the one tokenizer_config.json
/// beside the tokenizer.json names.
zt::ChatTemplate choose_chat_template(const Options& opt) {
    if (!opt.chat_template.empty()) {
        return zt::parse_chat_template(opt.chat_template, "--chat-template");
    }
    if (is_hf_tokenizer(opt)) {
        const std::string config = (fs::path(opt.tokenizer).parent_path() / "tokenizer_config.json").string();
        if (const std::optional<zt::ChatTemplate> t = zt::detect_chat_template(config)) {
            return *t;
        }
        throw zt::InputError(zt::str("--chat-template: the input has chat records (\"messages\") and ",
                                     config, " has no chat_template recognisable as one of the "
                                     "supported templates: give --chat-template llama3 or chatml"));
    }
    throw zt::InputError(zt::str("--chat-template: the input has chat records (\"messages\"): give "
                                 "--chat-template llama3 or chatml (supported) with a tokenizer.json "
                                 "that holds its special tokens"));
}

/// Renders the records; examples over --max-tokens are bad lines.
zt::ExampleSet render_examples(const Options& opt, const zt::Tokenizer& tok, JsonlInput& in,
                               std::optional<zt::ChatTemplate> tmpl) {
    const zt::ExampleRenderer renderer(tok, tmpl);
    zt::ExampleSet all;
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;
    for (const SourcedRecord& r : in.records) {
        renderer.render(r.record, tokens, target);
        if (opt.max_tokens > 0 && tokens.size() > static_cast<size_t>(opt.max_tokens)) {
            in.bad.push_back(zt::str(r.file, ":", r.line, ": an example of ", tokens.size(),
                                     " tokens, longer than --max-tokens ", opt.max_tokens));
            continue;
        }
        all.append(tokens, target);
    }
    return all;
}

/// Prints the bad lines (the first 20, then a count) and, without --skip-bad, stops.
void report_bad_lines(const Options& opt, const std::vector<std::string>& bad) {
    if (bad.empty()) {
        return;
    }
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < bad.size() && i < kShown; ++i) {
        std::cerr << "zt-prepare: " << (opt.skip_bad ? "skipped: " : "bad line: ") << bad[i] << "\n";
    }
    if (bad.size() > kShown) {
        std::cerr << "zt-prepare: ... and " << bad.size() - kShown << " more bad line(s)\n";
    }
    ZT_INPUT_CHECK(opt.skip_bad, "--input: ", bad.size(),
                   " bad line(s) (listed above); nothing was written (--skip-bad skips them)");
}

/// Splits the examples: val gets floor(fraction * n) of them (at least one when the fraction
/// is > 0 and n >= 2, never all), chosen by a fixed-seed shuffle so a sorted input does not
/// put one kind of example in val; both keep the input order.
void split_examples(const zt::ExampleSet& all, double val_fraction, zt::ExampleSet& train, zt::ExampleSet& val) {
    const size_t n = all.num_examples();
    size_t n_val = 0;
    if (val_fraction > 0.0 && n >= 2) {
        n_val = std::clamp<size_t>(static_cast<size_t>(std::floor(val_fraction * static_cast<double>(n))), 1, n - 1);
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) {
        order[i] = i;
    }
    constexpr uint64_t kSplitSeed = 0x7a2d5b1e9c3f4a60ull;
    for (size_t i = n; i > 1; --i) {
        const uint64_t r = zt::random_bits(kSplitSeed, static_cast<uint64_t>(zt::RandomStream::kDataVal), i - 1);
        std::swap(order[i - 1], order[static_cast<size_t>((static_cast<unsigned __int128>(r) * i) >> 64)]);
    }
    std::vector<uint8_t> is_val(n, 0);
    for (size_t k = 0; k < n_val; ++k) {
        is_val[order[k]] = 1;
    }
    for (size_t e = 0; e < n; ++e) {
        (is_val[e] != 0 ? val : train).append_from(all, e);
    }
}

/// Writes PREFIX_NNNNNN.bin example shards of at most shard_tokens tokens (an example
/// longer than that gets a shard of its own); returns the files written.
std::vector<std::string> write_example_shards(const Options& opt, const std::string& prefix,
                                              const zt::ExampleSet& set, bool force_u32) {
    std::vector<std::string> files;
    zt::ExampleSet shard;
    const auto flush = [&] {
        char name[64];
        std::snprintf(name, sizeof(name), "%s_%06zu.bin", prefix.c_str(), files.size());
        files.push_back((fs::path(opt.output) / name).string());
        zt::write_example_shard(files.back(), shard, force_u32);
        shard = zt::ExampleSet();
    };
    for (size_t e = 0; e < set.num_examples(); ++e) {
        if (shard.num_examples() > 0 &&
            shard.tokens.size() + set.length(e) > static_cast<size_t>(opt.shard_tokens)) {
            flush();
        }
        shard.append_from(set, e);
    }
    if (shard.num_examples() > 0) {
        flush();
    }
    return files;
}

void print_example_summary(const Options& opt, const zt::Tokenizer& tok, const JsonlInput& in,
                           std::optional<zt::ChatTemplate> tmpl, const zt::ExampleSet& train,
                           const zt::ExampleSet& val, const std::vector<std::string>& train_files,
                           const std::vector<std::string>& val_files) {
    std::cout << "zt-prepare: tokenizer " << tok.type() << " (vocab_size " << tok.vocab_size()
              << "), example shards (version " << zt::kShardVersionExamples << ")"
              << (tmpl ? zt::str(", chat template ", zt::chat_template_name(*tmpl)) : std::string()) << "\n";
    std::cout << "zt-prepare: " << train.num_examples() + val.num_examples() << " examples ("
              << train.num_examples() << " train, " << val.num_examples() << " val): "
              << in.by_layout[static_cast<int>(zt::JsonlLayout::kText)] << " text, "
              << in.by_layout[static_cast<int>(zt::JsonlLayout::kPrompt)] << " prompt/completion, "
              << in.by_layout[static_cast<int>(zt::JsonlLayout::kChat)] << " chat";
    if (!in.bad.empty()) {
        std::cout << "; " << in.bad.size() << " bad line(s) skipped";
    }
    if (in.blank_lines > 0) {
        std::cout << "; " << in.blank_lines << " blank line(s)";
    }
    std::cout << "\n";
    const auto describe = [&](const char* name, const zt::ExampleSet& set, const std::vector<std::string>& files) {
        std::cout << "zt-prepare: " << name << ": " << set.tokens.size() << " tokens (" << set.num_targets()
                  << " targets) in " << files.size() << " shard(s): " << describe_files(files) << "\n";
    };
    describe("train", train, train_files);
    describe("val", val, val_files);
    std::cout << "zt-prepare: wrote " << (fs::path(opt.output) / "tokenizer.json").string() << "\n";
}

/// zt-prepare for JSON Lines input: everything is read, checked and rendered before the
/// output folder is touched, so a bad line (without --skip-bad) leaves nothing behind.
int prepare_examples(const Options& opt, const zt::Tokenizer& tok, const std::vector<std::string>& files) {
    JsonlInput in;
    for (const std::string& f : files) {
        read_jsonl_file(f, forced_layout(opt), in);
    }
    std::optional<zt::ChatTemplate> tmpl;
    if (in.by_layout[static_cast<int>(zt::JsonlLayout::kChat)] > 0 || !opt.chat_template.empty()) {
        tmpl = choose_chat_template(opt);
    }
    const zt::ExampleSet all = render_examples(opt, tok, in, tmpl);
    report_bad_lines(opt, in.bad);
    ZT_INPUT_CHECK(all.num_examples() > 0, "--input: the ", files.size(),
                   " input file(s) hold no usable example");
    zt::ExampleSet train;
    zt::ExampleSet val;
    split_examples(all, opt.val_fraction, train, val);

    std::error_code ec;
    fs::create_directories(opt.output, ec);
    ZT_INPUT_CHECK(!ec, "--output: cannot create '", opt.output, "' (", ec.message(), ")");
    const bool force_u32 = tok.vocab_size() > 65536;
    const std::vector<std::string> train_files = write_example_shards(opt, "train", train, force_u32);
    const std::vector<std::string> val_files = write_example_shards(opt, "val", val, force_u32);
    std::set<std::string> written(train_files.begin(), train_files.end());
    written.insert(val_files.begin(), val_files.end());
    const size_t stale = remove_stale_shards(opt.output, written);
    tok.save(opt.output);
    print_example_summary(opt, tok, in, tmpl, train, val, train_files, val_files);
    if (stale > 0) {
        std::cout << "zt-prepare: removed " << stale << " stale shard(s) from an earlier run\n";
    }
    return zt::kExitOk;
}

int run(int argc, char** argv) {
    Options opt;
    const po::options_description desc = describe_options(opt);

    // No positional arguments: an empty description makes boost reject stray words
    // instead of silently ignoring them.
    const po::positional_options_description no_positionals;
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(no_positionals).run(),
              vm);
    if (vm.count("help") != 0) {
        print_usage(std::cout, desc);
        return zt::kExitOk;
    }
    po::notify(vm);
    if (vm.count("doc-separator") != 0) {
        opt.doc_separator = vm["doc-separator"].as<std::string>();
    }
    check_options(opt);

    const std::unique_ptr<zt::Tokenizer> tok = make_tokenizer(opt);
    SkipCounts skipped;
    const std::vector<std::string> files = collect_files(opt.inputs, skipped);
    if (is_jsonl_run(opt, files)) {
        return prepare_examples(opt, *tok, files);
    }
    ZT_INPUT_CHECK(opt.chat_template.empty() && !opt.skip_bad && opt.max_tokens == 0,
                   "--chat-template, --skip-bad and --max-tokens apply to JSON Lines input only "
                   "(--format jsonl, or files named *.jsonl)");
    const DocumentCounts counts = count_documents(files, opt);

    std::error_code ec;
    fs::create_directories(opt.output, ec);
    if (ec) {
        throw zt::InputError(
            zt::str("--output: cannot create '", opt.output, "' (", ec.message(), ")"));
    }

    const bool force_u32 = tok->vocab_size() > 65536;
    const size_t shard_tokens = static_cast<size_t>(opt.shard_tokens);
    ShardWriter train(opt.output, "train", shard_tokens, force_u32);
    ShardWriter val(opt.output, "val", shard_tokens, force_u32);
    write_documents(files, opt, *tok, counts, train, val);

    std::set<std::string> written(train.files().begin(), train.files().end());
    written.insert(val.files().begin(), val.files().end());
    const size_t stale = remove_stale_shards(opt.output, written);
    tok->save(opt.output);
    print_summary(opt, *tok, force_u32, files.size(), skipped, counts, train, val, stale);
    return zt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return zt::run_tool("zt-prepare", [&] { return run(argc, argv); }); }
