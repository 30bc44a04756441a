// Helpers shared by the data component's sources: the tokenizers, the examples' renderer
// and the corpus preparation (not part of the public API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zt::detail {

/// The code point decode_utf8 gives a byte that does not start a valid UTF-8 sequence.
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

/// Decodes one UTF-8 sequence at s[i]; returns its length and sets cp (kInvalidCodePoint
/// and length 1 for a byte that does not start a valid, shortest-form, non-surrogate
/// sequence).
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp);

/// GPT-2's regex (encoder.py), also that of Hugging Face's ByteLevel pre-tokenizer with
/// use_regex (pretokenize.cpp).
extern const char* const kGpt2Regex;

/// True when `s` is empty or only whitespace (space, tab, newline, CR, FF, VT).
bool is_blank(std::string_view s);

/// Reads a whole file; a missing or unreadable file is an InputError naming it and `what`
/// the file was expected to be.
std::string read_input_file(const std::string& path, const std::string& what);

/// Copies `from` to `to` (creating to's folder), overwriting; nothing happens when both
/// name the same file (saving into the folder a tokenizer was loaded from).
void copy_file_into(const std::string& from, const std::string& to);

/// Writes DIR/tokenizer.json (via a temporary file and rename). Creates DIR if needed.
void write_tokenizer_description(const std::string& dir, const nlohmann::json& description);

}  // namespace zt::detail
