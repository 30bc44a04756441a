// Fine-tuning examples (examples.hpp): the example shard (version 3) round trip and every
// validation, the JSON Lines reader's layouts and bad-line reasons, the chat templates'
// exact tokens and target masks, and template detection from tokenizer_config.json.
//
// Fixture: tests/data/chat_tiny/tokenizer.json, a byte-level tokenizer without merges (a
// token id is a byte) holding the special tokens of both templates (README.md there).
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace {

using zt::test::expect_input_error;
using zt::test::read_file;
using zt::test::ScratchDir;
using zt::test::write_file;
using Ids = std::vector<uint32_t>;
using Mask = std::vector<uint8_t>;

const std::string kChatDir = std::string(ZT_SOURCE_DIR) + "/tests/data/chat_tiny";

// chat_tiny's special tokens.
constexpr uint32_t kBegin = 256;
constexpr uint32_t kEnd = 257;
constexpr uint32_t kHeaderStart = 258;
constexpr uint32_t kHeaderEnd = 259;
constexpr uint32_t kEotId = 260;
constexpr uint32_t kImStart = 261;
constexpr uint32_t kImEnd = 262;

std::unique_ptr<zt::Tokenizer> chat_tokenizer() { return zt::make_hf_tokenizer(kChatDir + "/tokenizer.json"); }

Ids bytes(const std::string& s) {
    Ids out;
    for (char c : s) {
        out.push_back(static_cast<uint8_t>(c));
    }
    return out;
}

/// Concatenation of token runs and the matching mask runs.
struct Expected {
    Ids tokens;
    Mask target;
    Expected& add(const Ids& ids, uint8_t t) {
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        target.insert(target.end(), ids.size(), t);
        return *this;
    }
};

zt::ExampleSet sample_set() {
    zt::ExampleSet set;
    set.append({5, 6, 7}, {0, 1, 1});
    set.append({8, 9}, {0, 1});
    set.append({10, 11, 12, 13}, {0, 0, 1, 0});
    return set;
}

// ---------------------------------------------------------------------------------------
// Example shards
// ---------------------------------------------------------------------------------------

TEST(ExampleShard, RoundTripsU16AndU32) {
    ScratchDir dir("examples");
    const zt::ExampleSet set = sample_set();
    for (const bool u32 : {false, true}) {
        const std::string path = dir.file(u32 ? "u32.bin" : "u16.bin");
        zt::write_example_shard(path, set, u32);
        EXPECT_EQ(zt::read_shard_version(path), zt::kShardVersionExamples);
        const zt::ExampleSet back = zt::read_example_shard(path, 14);
        EXPECT_EQ(back.tokens, set.tokens);
        EXPECT_EQ(back.target, set.target);
        EXPECT_EQ(back.starts, set.starts);
        EXPECT_EQ(back.num_examples(), 3u);
        EXPECT_EQ(back.num_targets(), 4u);
        // header + tokens + one target byte each + (examples + 1) uint32 starts
        EXPECT_EQ(read_file(path).size(), 1024u + 9u * (u32 ? 4u : 2u) + 9u + 4u * 4u);
    }
}

/// Writes the sample set, lets `damage` edit the bytes, and expects the reader to name the
/// file and every part of `parts`.
template <typename F>
void expect_damaged(const std::string& tag, F&& damage, const std::vector<std::string>& parts, int vocab = 0) {
    ScratchDir dir("examples_bad");
    const std::string path = dir.file(tag + ".bin");
    zt::write_example_shard(path, sample_set());
    std::string bytes = read_file(path);
    damage(bytes);
    write_file(path, bytes);
    std::vector<std::string> all = parts;
    all.push_back(path);
    SCOPED_TRACE(tag);
    expect_input_error([&] { zt::read_example_shard(path, vocab); }, all);
}

void put_u32(std::string& bytes, size_t at, uint32_t v) { std::memcpy(&bytes[at], &v, 4); }

TEST(ExampleShard, RejectsDamage) {
    const size_t targets_at = 1024 + 9 * 2;
    const size_t starts_at = targets_at + 9;
    expect_damaged("trunc", [](std::string& b) { b.resize(b.size() - 3); }, {"truncated or trailing"});
    expect_damaged("trail", [](std::string& b) { b += "xy"; }, {"truncated or trailing"});
    expect_damaged("flag", [&](std::string& b) { b[targets_at + 2] = 2; }, {"target flag 2 at position 2"});
    expect_damaged("first", [&](std::string& b) { b[targets_at + 3] = 1; },
                   {"first token of example 1 is marked as a target"});
    expect_damaged("order", [&](std::string& b) { put_u32(b, starts_at + 8, 2); },
                   {"example 1 starts at 3 and ends at 2"});
    expect_damaged("ends", [&](std::string& b) { put_u32(b, starts_at + 12, 8); }, {"expected 0 to the token count 9"});
    expect_damaged("width", [](std::string& b) { put_u32(b, 16, 3); }, {"bad token width 3"});
    expect_damaged("count", [](std::string& b) { put_u32(b, 12, 0); }, {"bad counts"});
    expect_damaged("vocab", [](std::string&) {}, {"token 12 at position 7 is out of range", "vocab_size 12"}, 12);
}

TEST(ExampleShard, VersionsDoNotMix) {
    ScratchDir dir("examples_mix");
    zt::write_token_shard(dir.file("tokens.bin"), {1, 2, 3});
    expect_input_error([&] { zt::read_example_shard(dir.file("tokens.bin"), 0); },
                       {"version 1 is a token stream", "zt-prepare --format jsonl"});
    zt::write_example_shard(dir.file("ex.bin"), sample_set());
    expect_input_error([&] { zt::read_token_shard(dir.file("ex.bin"), 0); },
                       {"an example shard (version 3", "not a token stream"});
}

// ---------------------------------------------------------------------------------------
// JSON Lines records
// ---------------------------------------------------------------------------------------

std::string bad_reason(const std::string& line, zt::JsonlLayout expected = zt::JsonlLayout::kAuto) {
    std::string reason;
    EXPECT_FALSE(zt::parse_jsonl_line(line, expected, reason).has_value()) << line;
    return reason;
}

TEST(JsonlLine, ReadsTheThreeLayouts) {
    std::string reason;
    auto text = zt::parse_jsonl_line(R"({"text": "hi", "id": 7})", zt::JsonlLayout::kAuto, reason);
    ASSERT_TRUE(text.has_value()) << reason;
    EXPECT_EQ(text->layout, zt::JsonlLayout::kText);
    EXPECT_EQ(text->text, "hi");
    auto pc = zt::parse_jsonl_line(R"({"prompt": "", "completion": "x"})", zt::JsonlLayout::kPrompt, reason);
    ASSERT_TRUE(pc.has_value()) << reason;
    EXPECT_EQ(pc->completion, "x");
    auto chat = zt::parse_jsonl_line(
        R"({"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "q"},)"
        R"( {"role": "assistant", "content": "a"}]})",
        zt::JsonlLayout::kAuto, reason);
    ASSERT_TRUE(chat.has_value()) << reason;
    ASSERT_EQ(chat->messages.size(), 3u);
    EXPECT_EQ(chat->messages[2].role, "assistant");
    EXPECT_EQ(chat->messages[1].content, "q");
}

TEST(JsonlLine, NamesTheReasonOfABadLine) {
    const auto has = [](const std::string& reason, const std::string& part) {
        EXPECT_NE(reason.find(part), std::string::npos) << "reason '" << reason << "' lacks '" << part << "'";
    };
    has(bad_reason(R"({"text": "a")"), "not valid JSON");
    has(bad_reason("[1, 2]"), "expected a JSON object, found array");
    has(bad_reason(R"({"id": 1})"), "none of the keys");
    has(bad_reason(R"({"text": "a", "messages": []})"), "more than one layout");
    has(bad_reason(R"({"text": 5})"), "text: expected a string, found number");
    has(bad_reason(R"({"text": " \n"})"), "empty text");
    has(bad_reason(R"({"prompt": "p"})"), "missing key \"completion\"");
    has(bad_reason(R"({"prompt": "p", "completion": ""})"), "empty completion");
    has(bad_reason(R"({"completion": "c"})"), "missing key \"prompt\"");
    has(bad_reason(R"({"messages": {}})"), "messages: expected a non-empty array, found object");
    has(bad_reason(R"({"messages": [7]})"), "messages[0]: expected an object, found number");
    has(bad_reason(R"({"messages": [{"role": "tool", "content": "x"}]})"),
        "messages[0].role: unknown role \"tool\" (expected system, user or assistant)");
    has(bad_reason(R"({"messages": [{"role": "user"}]})"), "missing key \"messages[0].content\"");
    has(bad_reason(R"({"messages": [{"role": "user", "content": 1}]})"), "messages[0].content: expected a string");
    has(bad_reason(R"({"messages": [{"role": "user", "content": "q"}]})"), "no assistant message");
    has(bad_reason(R"({"messages": [{"role": "assistant", "content": ""}]})"), "empty assistant message");
    has(bad_reason(R"({"text": "a"})", zt::JsonlLayout::kChat), "a text record, expected the chat layout");
    has(bad_reason("{\"text\": \"\xff\"}"), "not valid UTF-8 (byte 0xFF at column 11)");
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

zt::JsonlRecord record(const std::string& line) {
    std::string reason;
    auto rec = zt::parse_jsonl_line(line, zt::JsonlLayout::kAuto, reason);
    EXPECT_TRUE(rec.has_value()) << reason;
    return rec.value_or(zt::JsonlRecord{});
}

void expect_rendering(const zt::ExampleRenderer& r, const std::string& line, const Expected& want) {
    Ids tokens;
    Mask target;
    r.render(record(line), tokens, target);
    EXPECT_EQ(tokens, want.tokens) << line;
    EXPECT_EQ(target, want.target) << line;
}

TEST(ExampleRenderer, TextAndPromptCompletion) {
    const auto byte_tok = zt::make_byte_tokenizer();
    const zt::ExampleRenderer r(*byte_tok, std::nullopt);
    expect_rendering(r, R"({"text": "ab"})", Expected().add({256}, 0).add(bytes("ab"), 1).add({256}, 1));
    // Only the completion (and the end-of-text after it) are targets.
    expect_rendering(r, R"({"prompt": "Q?", "completion": " A"})",
                     Expected().add({256}, 0).add(bytes("Q?"), 0).add(bytes(" A"), 1).add({256}, 1));
    // A tokenizer.json with a BOS starts with it and ends with its end-of-text token.
    const auto hf = chat_tokenizer();
    const zt::ExampleRenderer rh(*hf, std::nullopt);
    expect_rendering(rh, R"({"prompt": "Q", "completion": "A"})",
                     Expected().add({kBegin}, 0).add(bytes("Q"), 0).add(bytes("A"), 1).add({kEnd}, 1));
}

const char* const kConversation =
    R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},)"
    R"( {"role": "assistant", "content": " A "}, {"role": "user", "content": "V"},)"
    R"( {"role": "assistant", "content": "B"}]})";

TEST(ExampleRenderer, ChatmlMarksAssistantTurnsAndTheirEnd) {
    const auto tok = chat_tokenizer();
    const zt::ExampleRenderer r(*tok, zt::ChatTemplate::kChatml);
    Expected want;
    const auto turn = [&](const std::string& role, const std::string& content, uint8_t t) {
        want.add({kImStart}, 0).add(bytes(role + "\n"), 0).add(bytes(content), t).add({kImEnd}, t).add(bytes("\n"), 0);
    };
    turn("system", "S", 0);
    turn("user", "U", 0);
    turn("assistant", " A ", 1);
    turn("user", "V", 0);
    turn("assistant", "B", 1);
    expect_rendering(r, kConversation, want);
}

TEST(ExampleRenderer, Llama3TrimsContentLikeItsTemplate) {
    const auto tok = chat_tokenizer();
    const zt::ExampleRenderer r(*tok, zt::ChatTemplate::kLlama3);
    Expected want;
    want.add({kBegin}, 0);
    const auto turn = [&](const std::string& role, const std::string& content, uint8_t t) {
        want.add({kHeaderStart}, 0).add(bytes(role), 0).add({kHeaderEnd}, 0).add(bytes("\n\n"), 0);
        want.add(bytes(content), t).add({kEotId}, t);
    };
    turn("system", "S", 0);
    turn("user", "U", 0);
    turn("assistant", "A", 1);
    turn("user", "V", 0);
    turn("assistant", "B", 1);
    expect_rendering(r, kConversation, want);
}

TEST(ExampleRenderer, Llama3TrimsUnicodeSpacesAsJinjaDoes) {
    // Jinja's trim is Python's str.strip(): no-break, ideographic and other Unicode spaces too.
    const auto tok = chat_tokenizer();
    const zt::ExampleRenderer r(*tok, zt::ChatTemplate::kLlama3);
    const std::string line = "{\"messages\": [{\"role\": \"assistant\", \"content\": "
                             "\"\\u3000\\u00a0 A\\u2028B\\u0085\\u001c\"}]}";
    expect_rendering(r, line,
                     Expected()
                         .add({kBegin, kHeaderStart}, 0)
                         .add(bytes("assistant"), 0)
                         .add({kHeaderEnd}, 0)
                         .add(bytes("\n\n"), 0)
                         .add(bytes("A\u2028B"), 1)
                         .add({kEotId}, 1));
}

TEST(ExampleRenderer, GenerationPromptEndsWithTheAssistantHeader) {
    const auto tok = chat_tokenizer();
    const std::vector<zt::ChatMessage> msgs{{"system", "S"}, {"user", " U\n"}};
    const zt::ExampleRenderer chatml(*tok, zt::ChatTemplate::kChatml);
    Expected want;
    want.add({kImStart}, 0).add(bytes("system\nS"), 0).add({kImEnd}, 0).add(bytes("\n"), 0);
    want.add({kImStart}, 0).add(bytes("user\n U\n"), 0).add({kImEnd}, 0).add(bytes("\n"), 0);
    want.add({kImStart}, 0).add(bytes("assistant\n"), 0);
    EXPECT_EQ(chatml.render_generation_prompt(msgs), want.tokens);
    EXPECT_EQ(chatml.end_of_turn(), kImEnd);
    const zt::ExampleRenderer llama3(*tok, zt::ChatTemplate::kLlama3);
    Expected want3;
    want3.add({kBegin, kHeaderStart}, 0).add(bytes("system"), 0).add({kHeaderEnd}, 0).add(bytes("\n\nS"), 0);
    want3.add({kEotId, kHeaderStart}, 0).add(bytes("user"), 0).add({kHeaderEnd}, 0).add(bytes("\n\nU"), 0);
    want3.add({kEotId, kHeaderStart}, 0).add(bytes("assistant"), 0).add({kHeaderEnd}, 0).add(bytes("\n\n"), 0);
    EXPECT_EQ(llama3.render_generation_prompt(msgs), want3.tokens);
    EXPECT_EQ(llama3.end_of_turn(), kEotId);
}

TEST(ExampleRenderer, TemplateTokensMustExist) {
    const auto byte_tok = zt::make_byte_tokenizer();
    expect_input_error([&] { zt::ExampleRenderer r(*byte_tok, zt::ChatTemplate::kChatml); },
                       {"chat template chatml", "no special token '<|im_start|>'"});
    expect_input_error([&] { zt::ExampleRenderer r(*byte_tok, zt::ChatTemplate::kLlama3); },
                       {"chat template llama3", "no special token '<|begin_of_text|>'"});
    expect_input_error([] { zt::parse_chat_template("zephyr", "--chat-template"); },
                       {"--chat-template: unknown chat template 'zephyr'", "llama3, chatml"});
}

TEST(ChatTemplate, DetectedFromTokenizerConfig) {
    EXPECT_EQ(zt::detect_chat_template(kChatDir + "/tokenizer_config.json"), zt::ChatTemplate::kChatml);
    ScratchDir dir("chat_config");
    const std::string path = dir.file("tokenizer_config.json");
    EXPECT_EQ(zt::detect_chat_template(path), std::nullopt);  // no file
    write_file(path, R"({"chat_template": "{{ '<|start_header_id|>' + m + '<|end_header_id|>' }}<|eot_id|>"})");
    EXPECT_EQ(zt::detect_chat_template(path), zt::ChatTemplate::kLlama3);
    write_file(path, R"({"chat_template": [{"name": "default", "template": "<|im_start|><|im_end|>"}]})");
    EXPECT_EQ(zt::detect_chat_template(path), zt::ChatTemplate::kChatml);
    write_file(path, R"({"chat_template": "[INST] {{ m }} [/INST]"})");
    EXPECT_EQ(zt::detect_chat_template(path), std::nullopt);
    write_file(path, "{");
    expect_input_error([&] { zt::detect_chat_template(path); }, {path, "not valid JSON"});
}

TEST(Tokenizer, EndOfTextAndSpecialTokens) {
    const auto byte_tok = zt::make_byte_tokenizer();
    EXPECT_EQ(byte_tok->end_of_text(), 256u);
    EXPECT_EQ(byte_tok->special_token("<|endoftext|>"), 256u);
    EXPECT_EQ(byte_tok->special_token("<|im_start|>"), std::nullopt);
    const auto hf = chat_tokenizer();
    EXPECT_EQ(hf->eot(), kBegin);
    EXPECT_EQ(hf->end_of_text(), kEnd);
    EXPECT_EQ(hf->special_token("<|im_end|>"), kImEnd);
    // Special tokens in the text are split out as themselves (Hugging Face's behaviour).
    EXPECT_EQ(hf->encode("a<|eot_id|>"), (Ids{'a', kEotId}));
}

// ---------------------------------------------------------------------------------------
// Example datasets and rows (data.packing, data.overlong)
// ---------------------------------------------------------------------------------------

/// An example of `n` tokens whose ids start at `first` (first, first+1, ...); every token
/// but the first is a target unless `prompt` > 0 (then tokens 1..prompt are not).
void add_example(zt::ExampleSet& set, uint32_t first, size_t n, size_t prompt = 0) {
    Ids tokens(n);
    Mask target(n, 1);
    for (size_t i = 0; i < n; ++i) tokens[i] = first + static_cast<uint32_t>(i);
    target[0] = 0;
    for (size_t i = 1; i <= prompt && i < n; ++i) target[i] = 0;
    set.append(tokens, target);
}

/// Examples of 6, 5, 4 and 3 tokens (5, 4, 3, 2 positions), ids from 10, 20, 30, 40.
std::string write_four(const ScratchDir& dir) {
    zt::ExampleSet set;
    add_example(set, 10, 6);
    add_example(set, 20, 5, 2);
    add_example(set, 30, 4);
    add_example(set, 40, 3);
    const std::string path = dir.file("train_000000.bin");
    zt::write_example_shard(path, set);
    return path;
}

TEST(ExampleRows, PackIsFirstFitInArrivalOrder) {
    ScratchDir dir("rows_pack");
    const zt::ExampleDataset data(write_four(dir), "data.train", 64, 8, zt::Overlong::kError);
    const zt::ExampleRows rows(data, zt::Packing::kPack, 1, false);
    // Row 0 takes examples 0 (5 positions) and 2 (3): full; row 1 takes 1 (4) and 3 (2).
    ASSERT_EQ(rows.rows_in_epoch(0), 2u);
    EXPECT_EQ(rows.row(0, 0), (std::vector<uint32_t>{0, 2}));
    EXPECT_EQ(rows.row(0, 1), (std::vector<uint32_t>{1, 3}));
    zt::RowBatch b;
    rows.fill(0, 2, b);
    ASSERT_EQ(b.T, 8);
    using V = std::vector<int32_t>;
    const auto slice = [&](const V& v, int r) { return V(v.begin() + r * 8, v.begin() + r * 8 + 8); };
    EXPECT_EQ(slice(b.inputs, 0), (V{10, 11, 12, 13, 14, 30, 31, 32}));
    EXPECT_EQ(slice(b.targets, 0), (V{11, 12, 13, 14, 15, 31, 32, 33}));
    EXPECT_EQ(slice(b.positions, 0), (V{0, 1, 2, 3, 4, 0, 1, 2}));
    EXPECT_EQ(slice(b.segment_start, 0), (V{0, 0, 0, 0, 0, 5, 5, 5}));
    // Row 1: example 1's tokens 1 and 2 are prompt (not targets), then example 3, then 2
    // padding positions that attend only to themselves.
    EXPECT_EQ(slice(b.inputs, 1), (V{20, 21, 22, 23, 40, 41, 0, 0}));
    EXPECT_EQ(slice(b.targets, 1), (V{-1, -1, 23, 24, 41, 42, -1, -1}));
    EXPECT_EQ(slice(b.positions, 1), (V{0, 1, 2, 3, 0, 1, 0, 0}));
    EXPECT_EQ(slice(b.segment_start, 1), (V{0, 0, 0, 0, 4, 4, 6, 7}));
    EXPECT_EQ(b.num_targets, 12u);
    EXPECT_EQ(b.num_tokens, 14u);
}

TEST(ExampleRows, PadIsOneExamplePerRowPaddedToTheLongest) {
    ScratchDir dir("rows_pad");
    const zt::ExampleDataset data(write_four(dir), "data.train", 64, 8, zt::Overlong::kError);
    const zt::ExampleRows rows(data, zt::Packing::kPad, 1, false);
    EXPECT_EQ(rows.rows_in_epoch(0), 4u);
    zt::RowBatch b;
    rows.fill(2, 2, b);  // examples 2 (3 positions) and 3 (2): T = 3, not seq_len
    EXPECT_EQ(b.T, 3);
    EXPECT_EQ(b.inputs, (std::vector<int32_t>{30, 31, 32, 40, 41, 0}));
    EXPECT_EQ(b.targets, (std::vector<int32_t>{31, 32, 33, 41, 42, -1}));
    EXPECT_EQ(b.segment_start, (std::vector<int32_t>{0, 0, 0, 0, 0, 2}));
    rows.fill(3, 2, b);  // example 3, then epoch 1's first row (example 0 unshuffled): T = 5
    EXPECT_EQ(b.T, 5);
    EXPECT_EQ(b.inputs[5], 10);
}

TEST(ExampleRows, CompactedPadLaysAMicroBatchIntoTheFewestPositions) {
    ScratchDir dir("rows_pad_compact");
    const zt::ExampleDataset data(write_four(dir), "data.train", 64, 8, zt::Overlong::kError);
    const zt::ExampleRows rows(data, zt::Packing::kPad, 1, false, /*compact_padding=*/true);
    EXPECT_EQ(rows.rows_in_epoch(0), 4u);  // global rows are still one example each
    zt::RowBatch b;
    // 5, 4, 3 and 2 positions (plain padding: 4 x 5 = 20): one row cannot hold 14 of
    // seq_len 8; two rows of 7 can, {0, 3} and {1, 2}, with no padding at all.
    rows.fill(0, 4, b);
    ASSERT_EQ(b.rows, 2);
    ASSERT_EQ(b.T, 7);
    EXPECT_TRUE(b.segmented);
    using V = std::vector<int32_t>;
    EXPECT_EQ(b.inputs, (V{10, 11, 12, 13, 14, 40, 41, 20, 21, 22, 23, 30, 31, 32}));
    EXPECT_EQ(b.targets, (V{11, 12, 13, 14, 15, 41, 42, -1, -1, 23, 24, 31, 32, 33}));
    EXPECT_EQ(b.positions, (V{0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 0, 1, 2}));
    EXPECT_EQ(b.segment_start, (V{0, 0, 0, 0, 0, 5, 5, 0, 0, 0, 0, 4, 4, 4}));
    // Each token's example in the micro-batch (LoRA's dropout draws by it).
    EXPECT_EQ(b.sample, (V{0, 0, 0, 0, 0, 3, 3, 1, 1, 1, 1, 2, 2, 2}));
    EXPECT_EQ(b.num_targets, 12u);
    EXPECT_EQ(b.num_tokens, 14u);
    // 5 and 4 positions do not fit one row of 8: plain padding's layout, unsegmented.
    rows.fill(0, 2, b);
    EXPECT_EQ(b.rows, 2);
    EXPECT_EQ(b.T, 5);
    EXPECT_FALSE(b.segmented);
    EXPECT_EQ(b.inputs, (V{10, 11, 12, 13, 14, 20, 21, 22, 23, 0}));
    EXPECT_EQ(b.segment_start, (V{0, 0, 0, 0, 0, 0, 0, 0, 0, 4}));
    EXPECT_EQ(b.sample, (V{0, 0, 0, 0, 0, 1, 1, 1, 1, 3}));  // padding: 2 examples + its row 1
    // Plain padding names no samples: rows are the samples.
    const zt::ExampleRows plain(data, zt::Packing::kPad, 1, false);
    plain.fill(0, 4, b);
    EXPECT_TRUE(b.sample.empty());
}

TEST(CompactLayout, FewestPositionsThenShortestRows) {
    std::vector<size_t> row_of(3);
    // 6 + 2 + 2 at seq_len 10: one row of 10 (10 positions) beats 6 + 2 + 2 padded (18) and
    // two rows of 6 (12).
    EXPECT_EQ(zt::compact_layout({6, 2, 2}, 10, row_of), (std::pair<size_t, size_t>{1, 10}));
    EXPECT_EQ(row_of, (std::vector<size_t>{0, 0, 0}));
    // seq_len 9: two rows of 6, the longest alone.
    EXPECT_EQ(zt::compact_layout({6, 2, 2}, 9, row_of), (std::pair<size_t, size_t>{2, 6}));
    EXPECT_EQ(row_of, (std::vector<size_t>{0, 1, 1}));
    // Equal lengths gain nothing: one per row (two rows of 8 would be 16 positions, not 12).
    EXPECT_EQ(zt::compact_layout({4, 4, 4}, 8, row_of), (std::pair<size_t, size_t>{3, 4}));
    EXPECT_EQ(row_of, (std::vector<size_t>{0, 1, 2}));
    std::vector<size_t> one(1);
    EXPECT_EQ(zt::compact_layout({3}, 8, one), (std::pair<size_t, size_t>{1, 3}));
}

TEST(ExampleRows, EveryEpochVisitsEveryExampleOnceWhateverTheWorldSize) {
    ScratchDir dir("rows_epochs");
    zt::ExampleSet set;
    for (uint32_t e = 0; e < 37; ++e) add_example(set, e, 2 + (e * 7) % 13);
    zt::write_example_shard(dir.file("train_000000.bin"), set);
    const zt::ExampleDataset data(dir.file("train_000000.bin"), "data.train", 64, 16, zt::Overlong::kError);
    for (const zt::Packing p : {zt::Packing::kPack, zt::Packing::kPad}) {
        const zt::ExampleRows rows(data, p, 42, true);
        const zt::ExampleRows other(data, p, 42, true);  // another rank's copy
        for (uint64_t epoch = 0; epoch < 3; ++epoch) {
            std::vector<int> seen(37, 0);
            for (size_t r = 0; r < rows.rows_in_epoch(epoch); ++r) {
                for (uint32_t e : rows.row(epoch, r)) ++seen[e];
            }
            EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 37) << "epoch " << epoch;
        }
        // Global rows read in different chunks (ranks, micro-batches) give the same rows.
        const uint64_t total = rows.rows_in_epoch(0) + rows.rows_in_epoch(1) + 3;
        zt::RowBatch all;
        rows.fill(0, static_cast<int>(total), all);
        zt::RowBatch one;
        for (uint64_t g = total; g-- > 0;) {  // backwards: evicts the cached epoch each time
            other.fill(g, 1, one);
            const size_t T = static_cast<size_t>(one.T);
            for (size_t t = 0; t < T; ++t) {
                ASSERT_EQ(one.inputs[t], all.inputs[g * static_cast<size_t>(all.T) + t]) << "row " << g;
            }
        }
        EXPECT_EQ(rows.locate(rows.rows_in_epoch(0)), (std::pair<uint64_t, size_t>{1, 0}));
    }
}

TEST(ExampleDataset, OverlongErrorTruncateDrop) {
    ScratchDir dir("overlong");
    zt::ExampleSet set;
    add_example(set, 1, 4);
    add_example(set, 1, 12);     // 11 positions > seq_len 8
    add_example(set, 1, 12, 9);  // overlong, and its targets start after position 9
    const std::string path = dir.file("train_000000.bin");
    zt::write_example_shard(path, set);
    expect_input_error([&] { zt::ExampleDataset d(path, "data.train", 64, 8, zt::Overlong::kError); },
                       {"data.train: example 1 has 12 tokens, more than seq_len + 1 = 9", "data.overlong"});
    const zt::ExampleDataset cut(path, "data.train", 64, 8, zt::Overlong::kTruncate);
    EXPECT_EQ(cut.examples().num_examples(), 2u);  // the third lost every target
    EXPECT_EQ(cut.truncated(), 2u);
    EXPECT_EQ(cut.without_targets(), 1u);
    EXPECT_EQ(cut.examples().length(1), 9u);
    const zt::ExampleDataset drop(path, "data.train", 64, 8, zt::Overlong::kDrop);
    EXPECT_EQ(drop.examples().num_examples(), 1u);
    EXPECT_EQ(drop.dropped(), 2u);
    expect_input_error([&] { zt::ExampleDataset d(path, "data.val", 64, 2, zt::Overlong::kDrop); },
                       {"data.val: ", "holds no example to train on", "3 longer than seq_len + 1 = 3 dropped"});
}

}  // namespace
