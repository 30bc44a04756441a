// Corpus preparation (prepare.hpp), JSON Lines: fine-tuning examples into example shards
// (examples.hpp). Every line is read, checked and rendered before anything is written.
#include <filesystem>
#include <utility>

#include "prepare_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/prepare.hpp"

namespace fs = std::filesystem;

namespace zt {

namespace {

JsonlLayout forced_layout(const PrepareOptions& opt) {
    return opt.format == "jsonl:text"     ? JsonlLayout::kText
           : opt.format == "jsonl:prompt" ? JsonlLayout::kPrompt
           : opt.format == "jsonl:chat"   ? JsonlLayout::kChat
                                          : JsonlLayout::kAuto;
}

/// A parsed line and where it came from.
struct SourcedRecord {
    JsonlRecord record;
    std::string file;
    size_t line = 0;
};

/// Every record of the input, and every bad line as "FILE:LINE: reason".
struct JsonlInput {
    std::vector<SourcedRecord> records;
    std::vector<std::string> bad;
    size_t blank_lines = 0;
    size_t by_layout[4] = {0, 0, 0, 0};  // indexed by JsonlLayout

    size_t count(JsonlLayout layout) const { return by_layout[static_cast<int>(layout)]; }
};

/// Parses one file. Without --format jsonl:LAYOUT, the first good line fixes the file's
/// layout, and a later line of another layout is bad.
void read_jsonl_file(const std::string& file, JsonlLayout forced, JsonlInput& in) {
    const std::string content = detail::read_prepare_input(file);
    JsonlLayout layout = forced;
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < content.size()) {
        size_t end = content.find('\n', pos);
        end = end == std::string::npos ? content.size() : end;
        const std::string_view line(content.data() + pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (detail::is_blank(line)) {
            ++in.blank_lines;
            continue;
        }
        std::string reason;
        std::optional<JsonlRecord> rec = parse_jsonl_line(line, layout, reason);
        if (!rec) {
            in.bad.push_back(str(file, ":", line_no, ": ", reason));
            continue;
        }
        layout = rec->layout;
        ++in.by_layout[static_cast<int>(layout)];
        in.records.push_back(SourcedRecord{std::move(*rec), file, line_no});
    }
}

/// The chat template for chat records: --chat-template, else the one tokenizer_config.json
/// beside the tokenizer.json names.
ChatTemplate choose_chat_template(const PrepareOptions& opt) {
    if (!opt.chat_template.empty()) {
        return parse_chat_template(opt.chat_template, "--chat-template");
    }
    if (detail::is_hf_tokenizer(opt)) {
        const std::string config = (fs::path(opt.tokenizer).parent_path() / "tokenizer_config.json").string();
        if (const std::optional<ChatTemplate> t = detect_chat_template(config)) {
            return *t;
        }
        throw InputError(str("--chat-template: the input has chat records (\"messages\") and ", config,
                             " has no chat_template recognisable as one of the supported templates: give "
                             "--chat-template llama3 or chatml"));
    }
    throw InputError(str("--chat-template: the input has chat records (\"messages\"): give --chat-template llama3 "
                         "or chatml (supported) with a tokenizer.json that holds its special tokens"));
}

/// Renders the records; examples over --max-tokens are bad lines.
ExampleSet render_examples(const PrepareOptions& opt, const Tokenizer& tok, JsonlInput& in,
                           std::optional<ChatTemplate> tmpl) {
    const ExampleRenderer renderer(tok, tmpl);
    ExampleSet all;
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;
    for (const SourcedRecord& r : in.records) {
        renderer.render(r.record, tokens, target);
        if (opt.max_tokens > 0 && tokens.size() > static_cast<size_t>(opt.max_tokens)) {
            in.bad.push_back(str(r.file, ":", r.line, ": an example of ", tokens.size(),
                                 " tokens, longer than --max-tokens ", opt.max_tokens));
            continue;
        }
        all.append(tokens, target);
    }
    return all;
}

/// Prints the bad lines (the first 20, then a count) and, without --skip-bad, stops.
void report_bad_lines(const PrepareOptions& opt, const std::vector<std::string>& bad, std::ostream& err) {
    if (bad.empty()) {
        return;
    }
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < bad.size() && i < kShown; ++i) {
        err << "zt-prepare: " << (opt.skip_bad ? "skipped: " : "bad line: ") << bad[i] << "\n";
    }
    if (bad.size() > kShown) {
        err << "zt-prepare: ... and " << bad.size() - kShown << " more bad line(s)\n";
    }
    ZT_INPUT_CHECK(opt.skip_bad, "--input: ", bad.size(),
                   " bad line(s) (listed above); nothing was written (--skip-bad skips them)");
}

void print_example_summary(std::ostream& out, const Tokenizer& tok, const JsonlInput& in,
                           std::optional<ChatTemplate> tmpl, const ExampleSet& train, const ExampleSet& val,
                           const std::vector<std::string>& train_files, const std::vector<std::string>& val_files) {
    out << "zt-prepare: tokenizer " << tok.type() << " (vocab_size " << tok.vocab_size()
        << "), example shards (version " << kShardVersionExamples << ")"
        << (tmpl ? str(", chat template ", chat_template_name(*tmpl)) : std::string()) << "\n";
    out << "zt-prepare: " << train.num_examples() + val.num_examples() << " examples (" << train.num_examples()
        << " train, " << val.num_examples() << " val): " << in.count(JsonlLayout::kText) << " text, "
        << in.count(JsonlLayout::kPrompt) << " prompt/completion, " << in.count(JsonlLayout::kChat) << " chat";
    if (!in.bad.empty()) {
        out << "; " << in.bad.size() << " bad line(s) skipped";
    }
    if (in.blank_lines > 0) {
        out << "; " << in.blank_lines << " blank line(s)";
    }
    out << "\n";
    const auto describe = [&](const char* name, const ExampleSet& set, const std::vector<std::string>& files) {
        out << "zt-prepare: " << name << ": " << set.tokens.size() << " tokens (" << set.num_targets()
            << " targets) in " << files.size() << " shard(s): " << detail::describe_files(files) << "\n";
    };
    describe("train", train, train_files);
    describe("val", val, val_files);
}

}  // namespace

void split_examples(const ExampleSet& all, double val_fraction, ExampleSet& train, ExampleSet& val) {
    const size_t n = all.num_examples();
    const size_t n_val = validation_count(val_fraction, n);
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) {
        order[i] = i;
    }
    constexpr uint64_t kSplitSeed = 0x7a2d5b1e9c3f4a60ull;
    for (size_t i = n; i > 1; --i) {
        const uint64_t r = random_bits(kSplitSeed, static_cast<uint64_t>(RandomStream::kDataVal), i - 1);
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

std::vector<std::string> write_example_shards(const std::string& dir, const std::string& prefix,
                                              const ExampleSet& set, size_t shard_tokens, bool force_u32) {
    std::vector<std::string> files;
    ExampleSet shard;
    const auto flush = [&] {
        files.push_back(detail::shard_path(dir, prefix, files.size()));
        write_example_shard(files.back(), shard, force_u32);
        shard = ExampleSet();
    };
    for (size_t e = 0; e < set.num_examples(); ++e) {
        if (shard.num_examples() > 0 && shard.tokens.size() + set.length(e) > shard_tokens) {
            flush();
        }
        shard.append_from(set, e);
    }
    if (shard.num_examples() > 0) {
        flush();
    }
    return files;
}

void detail::prepare_examples(const PrepareOptions& opt, const Tokenizer& tok, const std::vector<std::string>& files,
                              std::ostream& out, std::ostream& err) {
    JsonlInput in;
    for (const std::string& f : files) {
        read_jsonl_file(f, forced_layout(opt), in);
    }
    std::optional<ChatTemplate> tmpl;
    if (in.count(JsonlLayout::kChat) > 0 || !opt.chat_template.empty()) {
        tmpl = choose_chat_template(opt);
    }
    const ExampleSet all = render_examples(opt, tok, in, tmpl);
    report_bad_lines(opt, in.bad, err);
    ZT_INPUT_CHECK(all.num_examples() > 0, "--input: the ", files.size(), " input file(s) hold no usable example");
    ExampleSet train;
    ExampleSet val;
    split_examples(all, opt.val_fraction, train, val);

    create_output_folder(opt.output);
    const bool force_u32 = tok.vocab_size() > 65536;
    const auto shard_tokens = static_cast<size_t>(opt.shard_tokens);
    const std::vector<std::string> train_files =
        write_example_shards(opt.output, "train", train, shard_tokens, force_u32);
    const std::vector<std::string> val_files =
        write_example_shards(opt.output, "val", val, shard_tokens, force_u32);
    const size_t stale = finish_output(opt, tok, train_files, val_files);
    print_example_summary(out, tok, in, tmpl, train, val, train_files, val_files);
    print_tokenizer_written(out, opt);
    print_stale_shards(out, stale);
}

}  // namespace zt
