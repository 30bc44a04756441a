// The JSON Lines reader (one record per line, three layouts), the built-in chat templates
// and the renderer that turns records into tokens with a target mask (examples.hpp).
//
// Templates, as their Hugging Face chat_template strings render a conversation (no
// generation prompt, since every conversation here is complete):
//   llama3: <|begin_of_text|> then per message
//           <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//           (CONTENT with surrounding whitespace trimmed, as Llama 3's template's Jinja
//           `trim` does: Python's str.strip(), Unicode spaces included);
//   chatml: per message <|im_start|>ROLE\nCONTENT<|im_end|>\n (SmolLM2, Qwen; a model's own
//           default system message, if its template adds one, is not added).
// Each piece between special tokens is tokenized on its own, so the mask boundary is exact:
// the targets are an assistant message's CONTENT tokens and its end-of-turn token.
// A generation prompt (zt-generate --chat) is the messages then the assistant's header
// (llama3: <|start_header_id|>assistant<|end_header_id|>\n\n; chatml: <|im_start|>assistant\n).
// Deliberately does not: run Jinja templates, or support tool calls or other roles.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/examples.hpp"

namespace zt {

namespace {

using nlohmann::json;

using detail::is_blank;

/// Python's str.isspace(), which Jinja's `trim` (Llama 3's template) strips: ASCII
/// whitespace, U+001C..U+001F, NEL, no-break and ideographic spaces, line separators ...
bool is_python_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/// `s` without leading and trailing whitespace, as Jinja's `trim` (Python's str.strip()).
std::string trimmed(const std::string& s) {
    size_t first = std::string::npos;
    size_t end = 0;
    for (size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        const size_t len = detail::decode_utf8(s, i, cp);
        if (!is_python_space(cp)) {
            first = std::min(first, i);
            end = i + len;
        }
        i += len;
    }
    return first == std::string::npos ? std::string() : s.substr(first, end - first);
}

/// nlohmann's parse message without its exception id, and with "line 1, column N" (a
/// line is parsed on its own, so the line number is the caller's) as "column N".
std::string short_parse_error(const std::string& what) {
    std::string msg = what;
    if (msg.rfind("[json.exception.", 0) == 0 && msg.find("] ") != std::string::npos) {
        msg = msg.substr(msg.find("] ") + 2);
    }
    const std::string at_line = "parse error at line 1, ";
    if (msg.rfind(at_line, 0) == 0) {
        msg = msg.substr(at_line.size());
    }
    return msg;
}

/// The layout a record's keys say, or kAuto with `reason` set when they say none or two.
JsonlLayout layout_of(const json& j, std::string& reason) {
    const bool text = j.contains("text");
    const bool prompt = j.contains("prompt") || j.contains("completion");
    const bool chat = j.contains("messages");
    if (int{text} + int{prompt} + int{chat} == 1) {
        return text ? JsonlLayout::kText : prompt ? JsonlLayout::kPrompt : JsonlLayout::kChat;
    }
    reason = int{text} + int{prompt} + int{chat} == 0
                 ? "none of the keys \"text\", \"prompt\"/\"completion\" or \"messages\""
                 : "keys of more than one layout (\"text\", \"prompt\"/\"completion\", "
                   "\"messages\": expected exactly one)";
    return JsonlLayout::kAuto;
}

/// j[key] as a string; nothing (and `reason`) when missing or not a string.
std::optional<std::string> string_field(const json& j, const std::string& key, const std::string& where,
                                        std::string& reason) {
    if (!j.contains(key)) {
        reason = str("missing key \"", where, key, "\"");
        return std::nullopt;
    }
    const json& v = j.at(key);
    if (!v.is_string()) {
        reason = str(where, key, ": expected a string, found ", v.type_name());
        return std::nullopt;
    }
    return v.get<std::string>();
}

bool read_messages(const json& j, JsonlRecord& rec, std::string& reason) {
    const json& list = j.at("messages");
    if (!list.is_array() || list.empty()) {
        reason = str("messages: expected a non-empty array, found ",
                     list.is_array() ? "an empty array" : list.type_name());
        return false;
    }
    bool has_assistant = false;
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string where = str("messages[", i, "].");
        if (!list[i].is_object()) {
            reason = str("messages[", i, "]: expected an object, found ", list[i].type_name());
            return false;
        }
        const auto role = string_field(list[i], "role", where, reason);
        const auto content = role ? string_field(list[i], "content", where, reason) : std::nullopt;
        if (!role || !content) {
            return false;
        }
        if (*role != "system" && *role != "user" && *role != "assistant") {
            reason = str(where, "role: unknown role \"", *role, "\" (expected system, user or assistant)");
            return false;
        }
        if (*role == "assistant" && is_blank(*content)) {
            reason = str(where, "content: empty assistant message (nothing to train on)");
            return false;
        }
        has_assistant = has_assistant || *role == "assistant";
        rec.messages.push_back(ChatMessage{*role, *content});
    }
    if (!has_assistant) {
        reason = "messages: no assistant message (nothing to train on)";
        return false;
    }
    return true;
}

bool read_fields(const json& j, JsonlRecord& rec, std::string& reason) {
    switch (rec.layout) {
        case JsonlLayout::kText: {
            const auto text = string_field(j, "text", "", reason);
            if (text && is_blank(*text)) {
                reason = "text: empty text";
            }
            rec.text = text.value_or("");
            return text && !is_blank(*text);
        }
        case JsonlLayout::kPrompt: {
            const auto prompt = string_field(j, "prompt", "", reason);
            const auto completion = prompt ? string_field(j, "completion", "", reason) : std::nullopt;
            if (completion && completion->empty()) {
                reason = "completion: empty completion (nothing to train on)";
            }
            rec.prompt = prompt.value_or("");
            rec.completion = completion.value_or("");
            return completion && !completion->empty();
        }
        case JsonlLayout::kChat:
            return read_messages(j, rec, reason);
        case JsonlLayout::kAuto:
            break;
    }
    return false;
}

}  // namespace

const char* layout_name(JsonlLayout layout) {
    switch (layout) {
        case JsonlLayout::kText:
            return "text";
        case JsonlLayout::kPrompt:
            return "prompt/completion";
        case JsonlLayout::kChat:
            return "chat";
        case JsonlLayout::kAuto:
            break;
    }
    return "auto";
}

std::optional<JsonlRecord> parse_jsonl_line(std::string_view line, JsonlLayout expected, std::string& reason) {
    // JSON text is UTF-8 (RFC 8259); the parser passes other bytes inside strings through.
    for (size_t i = 0; i < line.size();) {
        uint32_t cp = 0;
        const size_t len = detail::decode_utf8(line, i, cp);
        if (cp == detail::kInvalidCodePoint) {
            char byte[8];
            std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(line[i])));
            reason = str("not valid UTF-8 (byte ", byte, " at column ", i + 1, ")");
            return std::nullopt;
        }
        i += len;
    }
    json j;
    try {
        j = json::parse(line.begin(), line.end());
    } catch (const json::exception& e) {
        reason = str("not valid JSON (", short_parse_error(e.what()), ")");
        return std::nullopt;
    }
    if (!j.is_object()) {
        reason = str("expected a JSON object, found ", j.type_name());
        return std::nullopt;
    }
    JsonlRecord rec;
    rec.layout = layout_of(j, reason);
    if (rec.layout == JsonlLayout::kAuto) {
        return std::nullopt;
    }
    if (expected != JsonlLayout::kAuto && rec.layout != expected) {
        reason = str("a ", layout_name(rec.layout), " record, expected the ", layout_name(expected),
                     " layout (--format, or the file's first good line)");
        return std::nullopt;
    }
    if (!read_fields(j, rec, reason)) {
        return std::nullopt;
    }
    return rec;
}

ChatTemplate parse_chat_template(const std::string& name, const std::string& key) {
    if (name == "llama3") {
        return ChatTemplate::kLlama3;
    }
    if (name == "chatml") {
        return ChatTemplate::kChatml;
    }
    throw InputError(str(key, ": unknown chat template '", name, "' (supported: llama3, chatml)"));
}

const char* chat_template_name(ChatTemplate tmpl) {
    return tmpl == ChatTemplate::kLlama3 ? "llama3" : "chatml";
}

std::optional<ChatTemplate> detect_chat_template(const std::string& tokenizer_config_path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(tokenizer_config_path, ec)) {
        return std::nullopt;
    }
    const std::string text = detail::read_input_file(tokenizer_config_path, "a tokenizer_config.json");
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        throw InputError(str(tokenizer_config_path, ": not valid JSON (", e.what(), ")"));
    }
    if (!j.is_object() || !j.contains("chat_template")) {
        return std::nullopt;
    }
    // A string, or (newer files) a list of {"name", "template"} with the default first.
    std::string tmpl;
    const json& t = j.at("chat_template");
    if (t.is_string()) {
        tmpl = t.get<std::string>();
    } else if (t.is_array()) {
        for (const json& item : t) {
            if (item.is_object() && item.value("name", json()) == "default" &&
                item.value("template", json()).is_string()) {
                tmpl = item.at("template").get<std::string>();
            }
        }
    }
    const auto has = [&](const char* s) { return tmpl.find(s) != std::string::npos; };
    if (has("<|start_header_id|>") && has("<|eot_id|>")) {
        return ChatTemplate::kLlama3;
    }
    if (has("<|im_start|>") && has("<|im_end|>")) {
        return ChatTemplate::kChatml;
    }
    return std::nullopt;
}

ExampleRenderer::ExampleRenderer(const Tokenizer& tok, std::optional<ChatTemplate> tmpl)
    : m_tok(tok), m_template(tmpl) {
    if (!tmpl) {
        return;
    }
    const auto need = [&](const char* text) {
        const std::optional<uint32_t> id = tok.special_token(text);
        if (!id) {
            throw InputError(str("chat template ", chat_template_name(*tmpl), ": the tokenizer (",
                                 tok.type(), ", vocab_size ", tok.vocab_size(),
                                 ") has no special token '", text,
                                 "' (use a tokenizer.json whose added_tokens hold it, or "
                                 "another --chat-template)"));
        }
        return *id;
    };
    if (*tmpl == ChatTemplate::kLlama3) {
        m_begin = need("<|begin_of_text|>");
        m_header_start = need("<|start_header_id|>");
        m_header_end = need("<|end_header_id|>");
        m_end_of_turn = need("<|eot_id|>");
    } else {
        m_header_start = need("<|im_start|>");
        m_end_of_turn = need("<|im_end|>");
    }
}

void ExampleRenderer::render(const JsonlRecord& record, std::vector<uint32_t>& tokens,
                             std::vector<uint8_t>& target) const {
    tokens.clear();
    target.clear();
    const auto add = [&](const std::vector<uint32_t>& ids, uint8_t is_target) {
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        target.insert(target.end(), ids.size(), is_target);
    };
    switch (record.layout) {
        case JsonlLayout::kText:
            add({m_tok.eot()}, 0);
            add(m_tok.encode(record.text), 1);
            add({m_tok.end_of_text()}, 1);
            return;
        case JsonlLayout::kPrompt:
            add({m_tok.eot()}, 0);
            add(m_tok.encode(record.prompt), 0);
            add(m_tok.encode(record.completion), 1);
            add({m_tok.end_of_text()}, 1);
            return;
        case JsonlLayout::kChat:
            render_chat(record, tokens, target);
            return;
        case JsonlLayout::kAuto:
            break;
    }
    ZT_REQUIRE(false, "a record without a layout");
}

void ExampleRenderer::render_chat(const JsonlRecord& record, std::vector<uint32_t>& tokens,
                                  std::vector<uint8_t>& target) const {
    ZT_REQUIRE(m_template.has_value(), "a chat record needs a chat template");
    const auto add = [&](const std::vector<uint32_t>& ids, uint8_t is_target) {
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        target.insert(target.end(), ids.size(), is_target);
    };
    const bool llama3 = *m_template == ChatTemplate::kLlama3;
    if (llama3) {
        add({m_begin}, 0);
    }
    for (const ChatMessage& m : record.messages) {
        const uint8_t is_target = m.role == "assistant" ? 1 : 0;
        add({m_header_start}, 0);
        if (llama3) {
            add(m_tok.encode(m.role), 0);
            add({m_header_end}, 0);
            add(m_tok.encode("\n\n"), 0);
            add(m_tok.encode(trimmed(m.content)), is_target);
            add({m_end_of_turn}, is_target);
        } else {
            add(m_tok.encode(m.role + "\n"), 0);
            add(m_tok.encode(m.content), is_target);
            add({m_end_of_turn}, is_target);
            add(m_tok.encode("\n"), 0);
        }
    }
}

std::vector<uint32_t> ExampleRenderer::render_generation_prompt(const std::vector<ChatMessage>& messages) const {
    ZT_REQUIRE(m_template.has_value(), "a generation prompt needs a chat template");
    JsonlRecord record;
    record.layout = JsonlLayout::kChat;
    record.messages = messages;
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> target;
    render_chat(record, tokens, target);
    const auto add = [&](const std::vector<uint32_t>& ids) { tokens.insert(tokens.end(), ids.begin(), ids.end()); };
    add({m_header_start});
    if (*m_template == ChatTemplate::kLlama3) {
        add(m_tok.encode("assistant"));
        add({m_header_end});
        add(m_tok.encode("\n\n"));
    } else {
        add(m_tok.encode("assistant\n"));
    }
    return tokens;
}

uint32_t ExampleRenderer::end_of_turn() const {
    ZT_REQUIRE(m_template.has_value(), "no chat template, so no end-of-turn token");
    return m_end_of_turn;
}

}  // namespace zt
