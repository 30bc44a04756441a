// Reading multiple-choice task files (choice_task.hpp): JSON Lines and llm.c's binary format.
#include "ztrain/data/choice_task.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "ztrain/core/comma_list.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace {

constexpr int32_t kEvalMagic = 20240522;  // llm.c's write_evalfile
constexpr uint16_t kStartExample = 0xFFFF;

std::string json_text(const nlohmann::json& j, const char* field, const std::string& where) {
    ZT_INPUT_CHECK(j.contains(field) && j[field].is_string(), where, ": field '", field, "' missing or not a string");
    return j[field].get<std::string>();
}

/// lm-evaluation-harness's hellaswag context when its parts are there, else `ctx`.
std::string example_context(const nlohmann::json& j, const std::string& where) {
    if (j.contains("activity_label") && j.contains("ctx_a") && j.contains("ctx_b")) {
        std::string ctx_b = json_text(j, "ctx_b", where);
        // Python's str.capitalize(): first character upper, the rest lower (ASCII here).
        for (size_t i = 0; i < ctx_b.size(); ++i) {
            const unsigned char c = static_cast<unsigned char>(ctx_b[i]);
            ctx_b[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
        }
        return hellaswag_preprocess(json_text(j, "activity_label", where) + ": " + json_text(j, "ctx_a", where) + " " +
                                    ctx_b);
    }
    return json_text(j, "ctx", where);
}

int example_label(const nlohmann::json& j, size_t n_endings, const std::string& where) {
    ZT_INPUT_CHECK(j.contains("label"), where, ": field 'label' missing");
    const nlohmann::json& l = j["label"];
    long label = -1;
    if (l.is_number_integer()) {
        label = l.get<long>();
    } else if (l.is_string() && !l.get<std::string>().empty() && l.get<std::string>().size() < 9 &&
               l.get<std::string>().find_first_not_of("0123456789") == std::string::npos) {
        label = std::stol(l.get<std::string>());
    }
    ZT_INPUT_CHECK(label >= 0 && label < static_cast<long>(n_endings), where, ": label ", l.dump(),
                   " is not an index into the ", n_endings, " endings");
    return static_cast<int>(label);
}

ChoiceExample json_example(const std::string& line, const Tokenizer& tok, const std::string& where) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(where, ": not valid JSON (", e.what(), ")"));
    }
    ZT_INPUT_CHECK(j.is_object(), where, ": not a JSON object");
    ZT_INPUT_CHECK(j.contains("endings") && j["endings"].is_array() && j["endings"].size() >= 2, where,
                   ": field 'endings' missing or not an array of two or more strings");
    const bool harness = j.contains("activity_label") && j.contains("ctx_a") && j.contains("ctx_b");
    ChoiceExample ex;
    // lm-evaluation-harness's _encode_pair: the context's trailing spaces move to the
    // continuation (" " + ending), the pair is encoded whole, and the continuation's tokens
    // are those after the context's own.
    std::string context = example_context(j, where);
    const size_t kept = context.find_last_not_of(' ') + 1;  // npos + 1 == 0: all spaces
    const std::string moved = context.substr(kept);
    context.resize(kept);
    ex.context = tok.encode(context);
    for (const nlohmann::json& e : j["endings"]) {
        ZT_INPUT_CHECK(e.is_string(), where, ": an ending is not a string");
        const std::string ending = harness ? hellaswag_preprocess(e.get<std::string>()) : e.get<std::string>();
        const std::vector<uint32_t> whole = tok.encode(context + moved + " " + ending);
        const size_t cut = std::min(ex.context.size(), whole.size());
        ex.endings.emplace_back(whole.begin() + static_cast<long>(cut), whole.end());
        ZT_INPUT_CHECK(!ex.endings.back().empty(), where, ": an ending encodes to no tokens");
        // acc_norm's divisor: the harness takes len(choice), the ending without the space.
        ex.ending_chars.push_back(utf8_length(ending));
    }
    ex.label = example_label(j, ex.endings.size(), where);
    return ex;
}

std::vector<ChoiceExample> read_jsonl(const std::string& path, const Tokenizer& tok) {
    std::ifstream in(path);
    ZT_INPUT_CHECK(in, "eval task file '", path, "': cannot read it");
    std::vector<ChoiceExample> out;
    std::string line;
    for (long n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        out.push_back(json_example(line, tok, str("eval task file '", path, "' line ", n)));
    }
    return out;
}

/// llm.c's eval format: 256 int32 header (magic, version 1, examples, longest example bytes),
/// then per example uint16 words: 65535, bytes, index, label, endings, then the context and
/// each ending as a count and that many tokens.
std::vector<ChoiceExample> read_llmc(const std::string& path, const std::vector<char>& bytes, const Tokenizer& tok) {
    ZT_INPUT_CHECK(bytes.size() >= 1024, "eval task file '", path, "': shorter than llm.c's 1024-byte header");
    int32_t header[256];
    std::memcpy(header, bytes.data(), sizeof(header));
    ZT_INPUT_CHECK(header[1] == 1, "eval task file '", path, "': llm.c eval format version ", header[1],
                   " (expected 1)");
    const size_t n_words = (bytes.size() - 1024) / 2;
    std::vector<uint16_t> w(n_words);
    std::memcpy(w.data(), bytes.data() + 1024, n_words * 2);
    size_t pos = 0;
    auto next = [&](long ex) -> uint16_t {
        ZT_INPUT_CHECK(pos < w.size(), "eval task file '", path, "' example ", ex, ": the file ends inside it");
        return w[pos++];
    };
    auto tokens = [&](long ex) {
        std::vector<uint32_t> t(next(ex));
        for (uint32_t& x : t) x = next(ex);
        return t;
    };
    std::vector<ChoiceExample> out;
    for (long ex = 0; ex < header[2]; ++ex) {
        ZT_INPUT_CHECK(next(ex) == kStartExample, "eval task file '", path, "' example ", ex,
                       ": no start-of-example word (65535)");
        next(ex);  // its byte count
        next(ex);  // its index
        ChoiceExample e;
        e.label = next(ex);
        const int n_endings = next(ex);
        ZT_INPUT_CHECK(n_endings >= 2 && e.label < n_endings, "eval task file '", path, "' example ", ex, ": label ",
                       e.label, " with ", n_endings, " endings");
        e.context = tokens(ex);
        for (int k = 0; k < n_endings; ++k) {
            e.endings.push_back(tokens(ex));
            ZT_INPUT_CHECK(!e.endings.back().empty(), "eval task file '", path, "' example ", ex, ": an empty ending");
            for (uint32_t t : e.endings.back())
                ZT_INPUT_CHECK(t < static_cast<uint32_t>(tok.vocab_size()), "eval task file '", path, "' example ",
                               ex, ": token ", t, " outside the tokenizer's ", tok.vocab_size());
            // The ending's characters without the leading space llm.c encodes with it (the
            // harness's len(choice)).
            const std::string text = tok.decode(e.endings.back());
            e.ending_chars.push_back(utf8_length(text) - (!text.empty() && text[0] == ' ' ? 1 : 0));
        }
        out.push_back(std::move(e));
    }
    return out;
}

}  // namespace

std::string hellaswag_preprocess(const std::string& text) {
    const size_t b = text.find_first_not_of(" \t\r\n");
    const size_t e = text.find_last_not_of(" \t\r\n");
    std::string s = b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
    std::string t;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s.compare(i, 8, " [title]") == 0) {
            t += ". ";
            i += 7;
        } else {
            t += s[i];
        }
    }
    std::string u;  // re.sub("\\[.*?\\]", "", t)
    for (size_t i = 0; i < t.size(); ++i) {
        const size_t close = t[i] == '[' ? t.find(']', i) : std::string::npos;
        if (close != std::string::npos) {
            i = close;
        } else {
            u += t[i];
        }
    }
    std::string v;  // .replace("  ", " "): non-overlapping, left to right
    for (size_t i = 0; i < u.size(); ++i) {
        v += u[i];
        if (u[i] == ' ' && i + 1 < u.size() && u[i + 1] == ' ') ++i;
    }
    return v;
}

int utf8_length(const std::string& text) {
    int n = 0;
    for (unsigned char c : text) n += (c & 0xC0) != 0x80;
    return n;
}

ChoiceTask read_choice_task(const std::string& path, const Tokenizer& tokenizer) {
    ZT_INPUT_CHECK(std::filesystem::is_regular_file(path), "eval task file '", path, "': no such file");
    std::ifstream in(path, std::ios::binary);
    ZT_INPUT_CHECK(in, "eval task file '", path, "': cannot read it");
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int32_t magic = 0;
    if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
    ChoiceTask task;
    task.file = path;
    task.name = std::filesystem::path(path).stem().string();
    task.examples = magic == kEvalMagic ? read_llmc(path, bytes, tokenizer) : read_jsonl(path, tokenizer);
    ZT_INPUT_CHECK(!task.examples.empty(), "eval task file '", path, "': no examples");
    return task;
}

std::vector<ChoiceTask> read_choice_tasks(const std::string& list, const Tokenizer& tokenizer) {
    std::vector<ChoiceTask> tasks;
    for (const std::string& file : split_comma_list(list)) tasks.push_back(read_choice_task(file, tokenizer));
    return tasks;
}

}  // namespace zt
