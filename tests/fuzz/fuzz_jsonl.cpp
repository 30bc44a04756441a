// libFuzzer target: the JSON Lines reader of zt-prepare --format jsonl (zt::parse_jsonl_line
// on every line of the input, auto-detected and forced to each layout), the renderer with
// both chat templates, and the example shard writer/reader on what was rendered.
//
// The input is a JSONL file: lines separated by '\n'. The tokenizer is
// tests/data/chat_tiny/tokenizer.json (every byte a token, plus both templates' special
// tokens), so a rendering decodes back to exactly the template's text.
//
// Expected rejections are a bad-line reason (parse_jsonl_line returns nothing) and
// zt::InputError from a tokenizer that cannot encode; anything else is a finding, as is a
// violated property: a parsed record has its layout's fields; a rendering has one target
// flag per token, a first token that is not a target and at least one target; chatml's
// rendering decodes to the template's text; the example shard reads back what was written.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace {

[[noreturn]] void violated(const char* what) {
    std::fprintf(stderr, "fuzz_jsonl: property violated: %s\n", what);
    std::abort();
}

#define FUZZ_CHECK(cond) \
    do {                 \
        if (!(cond)) violated(#cond); \
    } while (0)

const zt::Tokenizer& chat_tokenizer() {
    static const std::unique_ptr<zt::Tokenizer> tok =
        zt::make_hf_tokenizer(std::string(ZT_SOURCE_DIR) + "/tests/data/chat_tiny/tokenizer.json");
    return *tok;
}

std::string chatml_text(const zt::JsonlRecord& rec) {
    std::string out;
    for (const zt::ChatMessage& m : rec.messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
    return out;
}

void check_rendering(const std::vector<uint32_t>& tokens, const std::vector<uint8_t>& target) {
    FUZZ_CHECK(!tokens.empty());
    FUZZ_CHECK(tokens.size() == target.size());
    FUZZ_CHECK(target[0] == 0);
    bool any = false;
    for (uint8_t t : target) {
        FUZZ_CHECK(t <= 1);
        any = any || t == 1;
    }
    FUZZ_CHECK(any);
    for (uint32_t id : tokens) FUZZ_CHECK(id < static_cast<uint32_t>(chat_tokenizer().vocab_size()));
}

/// Renders a good record with every template, adding each rendering to `set`.
void render_all(const zt::JsonlRecord& rec, zt::ExampleSet& set) {
    const zt::Tokenizer& tok = chat_tokenizer();
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;
    for (const zt::ChatTemplate tmpl : {zt::ChatTemplate::kChatml, zt::ChatTemplate::kLlama3}) {
        const zt::ExampleRenderer r(tok, tmpl);
        r.render(rec, tokens, target);
        check_rendering(tokens, target);
        if (rec.layout == zt::JsonlLayout::kChat && tmpl == zt::ChatTemplate::kChatml) {
            FUZZ_CHECK(tok.decode(tokens) == chatml_text(rec));
        }
        set.append(tokens, target);
    }
}

void check_record(const zt::JsonlRecord& rec) {
    switch (rec.layout) {
        case zt::JsonlLayout::kText:
            FUZZ_CHECK(!rec.text.empty());
            break;
        case zt::JsonlLayout::kPrompt:
            FUZZ_CHECK(!rec.completion.empty());
            break;
        case zt::JsonlLayout::kChat:
            FUZZ_CHECK(!rec.messages.empty());
            break;
        case zt::JsonlLayout::kAuto:
            violated("a parsed record without a layout");
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::scratch_dir();
    (void)chat_tokenizer();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string shard_path = zt::fuzz::scratch_file("examples.bin");
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    zt::ExampleSet set;
    size_t pos = 0;
    while (pos <= input.size()) {
        size_t end = input.find('\n', pos);
        end = end == std::string_view::npos ? input.size() : end;
        const std::string_view line = input.substr(pos, end - pos);
        pos = end + 1;
        for (const zt::JsonlLayout layout : {zt::JsonlLayout::kAuto, zt::JsonlLayout::kText,
                                             zt::JsonlLayout::kPrompt, zt::JsonlLayout::kChat}) {
            std::string reason;
            const std::optional<zt::JsonlRecord> rec = zt::parse_jsonl_line(line, layout, reason);
            if (!rec) {
                FUZZ_CHECK(!reason.empty());
                continue;
            }
            FUZZ_CHECK(layout == zt::JsonlLayout::kAuto || rec->layout == layout);
            check_record(*rec);
            try {
                render_all(*rec, set);
            } catch (const zt::InputError&) {
            }
        }
    }
    if (set.num_examples() > 0) {
        zt::write_example_shard(shard_path, set);
        const zt::ExampleSet back = zt::read_example_shard(shard_path, chat_tokenizer().vocab_size());
        FUZZ_CHECK(back.tokens == set.tokens && back.target == set.target && back.starts == set.starts);
    }
    return 0;
}
