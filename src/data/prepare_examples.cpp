// Corpus preparation (prepare.hpp), JSON Lines: fine-tuning examples parsed, rendered and
// routed to train or val; the bad lines and the summary.
#include <filesystem>
#include <utility>

#include "prepare_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/prepare.hpp"

namespace fs = std::filesystem;

namespace zt::detail {

JsonlLayout forced_layout(const PrepareOptions& opt) {
    return opt.format == "jsonl:text"     ? JsonlLayout::kText
           : opt.format == "jsonl:prompt" ? JsonlLayout::kPrompt
           : opt.format == "jsonl:chat"   ? JsonlLayout::kChat
                                          : JsonlLayout::kAuto;
}

namespace {

/// The chat template for chat records: --chat-template, else the one tokenizer_config.json
/// beside the tokenizer.json names; the InputError's message when there is none.
std::optional<ChatTemplate> choose_chat_template(const PrepareOptions& opt, std::string& error) {
    if (!opt.chat_template.empty()) {
        return parse_chat_template(opt.chat_template, "--chat-template");
    }
    if (is_hf_tokenizer(opt)) {
        const std::string config = (fs::path(opt.tokenizer).parent_path() / "tokenizer_config.json").string();
        if (const std::optional<ChatTemplate> t = detect_chat_template(config)) {
            return t;
        }
        error = str("--chat-template: the input has chat records (\"messages\") and ", config,
                    " has no chat_template recognisable as one of the supported templates: give "
                    "--chat-template llama3 or chatml");
        return std::nullopt;
    }
    error = "--chat-template: the input has chat records (\"messages\"): give --chat-template llama3 "
            "or chatml (supported) with a tokenizer.json that holds its special tokens";
    return std::nullopt;
}

}  // namespace

bool take_layout_from(std::string_view line, uint64_t offset, RecordContext& ctx) {
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (is_blank(line)) return false;
    std::string reason;
    const std::optional<JsonlRecord> rec = parse_jsonl_line(line, JsonlLayout::kAuto, reason);
    if (!rec) return false;
    ctx.layout = rec->layout;
    ctx.layout_from = offset + 1;
    return true;
}

void find_file_layout(const std::string& path, RecordContext& ctx) {
    LineReader lines(path, 0, UINT64_MAX, false);
    InputLine line;
    while (lines.next(line)) {
        if (take_layout_from(line.text, line.offset, ctx)) return;
    }
}

ExampleRenderers make_example_renderers(const PrepareOptions& opt, const Tokenizer& tok) {
    ExampleRenderers r;
    r.chat_template = choose_chat_template(opt, r.chat_error);
    // Without --chat-template, a template found beside the tokenizer is checked (its special
    // tokens) only when a chat record needs it.
    r.plain = std::make_unique<ExampleRenderer>(
        tok, opt.chat_template.empty() ? std::nullopt : r.chat_template);
    if (r.chat_template) {
        try {
            r.chat = std::make_unique<ExampleRenderer>(tok, r.chat_template);
        } catch (const InputError& e) {
            r.chat_error = e.what();
        }
    }
    return r;
}

void tokenize_examples(const std::vector<InputRecord>& records, const RecordContext& ctx, BatchResult& out) {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;
    std::string reason;
    for (const InputRecord& r : records) {
        std::string_view line = r.text;
        if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
        if (is_blank(line)) {
            ++out.blank;
            continue;
        }
        const JsonlLayout expected = r.offset < ctx.layout_from ? JsonlLayout::kAuto : ctx.layout;
        const std::optional<JsonlRecord> rec = parse_jsonl_line(line, expected, reason);
        if (!rec) {
            out.bad.emplace_back(r.line, reason);
            continue;
        }
        ++out.by_layout[static_cast<int>(rec->layout)];
        const bool chat = rec->layout == JsonlLayout::kChat;
        if (chat && ctx.chat_renderer == nullptr) throw InputError(ctx.chat_error);
        (chat ? ctx.chat_renderer : ctx.renderer)->render(*rec, tokens, target);
        const long long max_tokens = ctx.opt->max_tokens;
        if (max_tokens > 0 && tokens.size() > static_cast<size_t>(max_tokens)) {
            out.bad.emplace_back(r.line, str("an example of ", tokens.size(), " tokens, longer than --max-tokens ",
                                             max_tokens));
            continue;
        }
        SplitTokens& s = out.split[goes_to_val(ctx.opt->val_fraction, ctx.file, r.offset) ? 1 : 0];
        s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
        s.target.insert(s.target.end(), target.begin(), target.end());
        s.lengths.push_back(tokens.size());
    }
}

void report_bad_lines(const PrepareOptions& opt, const std::vector<std::string>& files,
                      const std::vector<InputPart>& parts, const std::vector<PartSummary>& done, std::ostream& err) {
    constexpr size_t kShown = 20;
    size_t total = 0;
    size_t shown = 0;
    std::vector<uint64_t> lines_before(files.size(), 0);  // lines of the file in earlier parts
    for (size_t p = 0; p < parts.size(); ++p) {
        const size_t f = parts[p].file;
        for (const auto& [line, reason] : done[p].bad) {
            if (shown == kShown) break;
            err << "zt-prepare: " << (opt.skip_bad ? "skipped: " : "bad line: ") << files[f] << ":"
                << lines_before[f] + line << ": " << reason << "\n";
            ++shown;
        }
        lines_before[f] += done[p].lines;
        total += done[p].bad_count;
    }
    if (total == 0) return;
    if (total > shown) {
        err << "zt-prepare: ... and " << total - shown << " more bad line(s)\n";
    }
    ZT_INPUT_CHECK(opt.skip_bad, "--input: ", total,
                   " bad line(s) (listed above); nothing was written (--skip-bad skips them)");
}

void print_example_summary(std::ostream& out, const PrepareOptions& opt, const Tokenizer& tok,
                           const PartSummary& total, const std::vector<SplitShards>& shards) {
    std::string error;
    const bool has_chat = total.by_layout[static_cast<int>(JsonlLayout::kChat)] > 0;
    const std::optional<ChatTemplate> tmpl =
        has_chat || !opt.chat_template.empty() ? choose_chat_template(opt, error) : std::nullopt;
    out << "zt-prepare: tokenizer " << tok.type() << " (vocab_size " << tok.vocab_size()
        << "), example shards (version " << kShardVersionExamples << ")"
        << (tmpl ? str(", chat template ", chat_template_name(*tmpl)) : std::string()) << "\n";
    const auto count = [&](JsonlLayout l) { return total.by_layout[static_cast<int>(l)]; };
    out << "zt-prepare: " << shards[0].records + shards[1].records << " examples (" << shards[0].records
        << " train, " << shards[1].records << " val): " << count(JsonlLayout::kText) << " text, " << count(JsonlLayout::kPrompt)
        << " prompt/completion, " << count(JsonlLayout::kChat) << " chat";
    if (total.bad_count > 0) {
        out << "; " << total.bad_count << " bad line(s) skipped";
    }
    if (total.blank > 0) {
        out << "; " << total.blank << " blank line(s)";
    }
    out << "\n";
    const char* names[2] = {"train", "val"};
    for (int s = 0; s < 2; ++s) {
        out << "zt-prepare: " << names[s] << ": " << shards[s].tokens << " tokens (" << shards[s].targets
            << " targets) in " << shards[s].files.size() << " shard(s): " << describe_files(shards[s].files) << "\n";
    }
}

}  // namespace zt::detail
