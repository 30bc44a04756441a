// Multiple-choice tasks (HellaSwag-style): a context and candidate endings, one of them
// right. Read from HellaSwag's JSON Lines layout (tokenized here with the run's tokenizer)
// or from llm.c's binary eval format (already GPT-2 tokens). Scoring is train/'s
// (choice_eval.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

class Tokenizer;

struct ChoiceExample {
    std::vector<uint32_t> context;
    std::vector<std::vector<uint32_t>> endings;  ///< each ending's tokens, after the context's
    /// Each ending's length in characters (Unicode code points), without the space put
    /// before it: the divisor of acc_norm, as lm-evaluation-harness takes len(choice).
    std::vector<int> ending_chars;
    int label = 0;
};

struct ChoiceTask {
    std::string name;  ///< the file's stem: "hellaswag_val" for .../hellaswag_val.jsonl
    std::string file;
    std::vector<ChoiceExample> examples;
};

/// Reads a task file: llm.c's binary eval format when it starts with its magic (20240522),
/// else JSON Lines, one example per line with `ctx` (or `activity_label`, `ctx_a`, `ctx_b`,
/// joined and cleaned as lm-evaluation-harness's hellaswag task does), `endings` (two or
/// more strings) and `label` (an index into endings, a number or a string of digits).
/// Tokenized as lm-evaluation-harness does: context + " " + ending encoded whole, the
/// ending's tokens those after the context's (a context's trailing spaces move to the
/// ending). Throws InputError naming the
/// file and line (or example) on a missing file, malformed JSON, a missing or wrong field,
/// or an empty task.
ChoiceTask read_choice_task(const std::string& path, const Tokenizer& tokenizer);

/// Every file of a comma-separated list (eval.tasks, zt-eval --tasks), read as above.
std::vector<ChoiceTask> read_choice_tasks(const std::string& list, const Tokenizer& tokenizer);

/// lm-evaluation-harness's hellaswag `preprocess`: trims, " [title]" -> ". ", drops
/// bracketed tags, "  " -> " ".
std::string hellaswag_preprocess(const std::string& text);

/// Characters of UTF-8 text (code points; invalid bytes count one each).
int utf8_length(const std::string& text);

}  // namespace zt
