// Pre-tokenizers (the regex splits that run before BPE), by PCRE2.
//
// A tokenizer.json's Split step names its regex; GPT-2's encoder.py (and Hugging Face's
// ByteLevel pre-tokenizer with use_regex) splits with
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// and Llama 3 (tiktoken's cl100k family) with
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (Qwen2.5's is the same with \p{N} for \p{N}{1,3}). `tokenizers` runs them with Oniguruma;
// PCRE2 with PCRE2_UTF | PCRE2_UCP gives the same splits (leftmost-first alternation,
// look-ahead, Unicode case folding in (?i:...)). Where the two engines' Unicode data differ
// the splits can too: PCRE2 10.42 has Unicode 14 (the letters and numbers of 15 and 16 are
// unassigned there); its \s also matches U+180E (MONGOLIAN VOWEL SEPARATOR, \h in PCRE2, not
// White_Space); tests/interop/test_tokenizer_unicode.py lists them. PCRE2_MATCH_INVALID_UTF
// lets any byte string through: a byte that is not valid UTF-8 matches nothing, so it lies
// between matches.
// The JIT (when PCRE2 has one) and one match block per thread keep this off zt-prepare's
// profile: pcre2_match is called once per piece.
#include "ztrain/data/tokenizer.hpp"

#include <memory>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

const char* const detail::kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

// Llama 3's Split regex (tiktoken's cl100k), as it appears in its tokenizer.json.
const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

struct RegexSplit::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) {
        return str("PCRE2 error ", code);
    }
    return reinterpret_cast<const char*>(buffer);
}

/// One match block per thread, shared by every regex: only the whole match's offsets are
/// read, so one pair of offsets suffices (pcre2_match returns 0 for patterns with groups).
pcre2_match_data* thread_match_data() {
    thread_local const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
    if (!data) {
        throw Error("pre-tokenizer: out of memory for PCRE2's match data");
    }
    return data.get();
}

}  // namespace

RegexSplit::RegexSplit(const std::string& pattern, const std::string& where)
    : m_pattern(pattern), m_where(where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto compiled = std::make_shared<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset,
                                   nullptr);
    if (compiled->code == nullptr) {
        throw InputError(str(where, ": PCRE2 cannot compile the regex \"", pattern, "\": ",
                             pcre2_message(error), " (at offset ", offset, ")"));
    }
    // Without a JIT (PCRE2_ERROR_JIT_BADOPTION) pcre2_match interprets the pattern instead.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    m_compiled = std::move(compiled);
}

void RegexSplit::split_into(std::string_view text, std::vector<std::string_view>& pieces) const {
    pcre2_match_data* match = thread_match_data();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t emitted = 0;  // text[0, emitted) is in pieces
    size_t from = 0;     // where the next search starts
    while (from < text.size()) {
        const int rc = pcre2_match(m_compiled->code, subject, text.size(), from, 0, match, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }
        if (rc < 0) {
            throw InputError(str(m_where, ": the regex \"", m_pattern, "\" failed on the text at byte ",
                                 from, ": ", pcre2_message(rc)));
        }
        const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match);
        const size_t start = offsets[0];
        const size_t end = offsets[1];
        if (start > emitted) {
            pieces.push_back(text.substr(emitted, start - emitted));
            emitted = start;
        }
        if (end > start) {
            pieces.push_back(text.substr(start, end - start));
            emitted = end;
            from = end;
        } else if (start < text.size()) {
            // An empty match: search again one character on, as Oniguruma's iteration does.
            uint32_t cp = 0;
            from = start + detail::decode_utf8(text, start, cp);
        } else {
            break;  // an empty match at the end
        }
    }
    if (emitted < text.size()) {
        pieces.push_back(text.substr(emitted));
    }
}

namespace {

std::vector<std::string_view> split(const RegexSplit& regex, std::string_view text) {
    std::vector<std::string_view> pieces;
    regex.split_into(text, pieces);
    return pieces;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
    static const RegexSplit regex(detail::kGpt2Regex, "GPT-2's pre-tokenizer");
    return split(regex, text);
}

std::vector<std::string_view> llama3_pretokenize(std::string_view text) {
    static const RegexSplit regex(kLlama3Regex, "Llama 3's pre-tokenizer");
    return split(regex, text);
}

const RegexSplit& digits_split(bool individual_digits) {
    // Hugging Face's Digits: Rust's char::is_numeric, i.e. \p{N}; runs of the rest are the
    // stretches between matches.
    static const RegexSplit grouped("\\p{N}+", "the Digits pre-tokenizer");
    static const RegexSplit individual("\\p{N}", "the Digits pre-tokenizer");
    return individual_digits ? individual : grouped;
}

std::vector<std::string_view> digits_pretokenize(std::string_view text, bool individual_digits) {
    return split(digits_split(individual_digits), text);
}

namespace detail {

size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t b0 = byte(i);
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    }
    size_t len = 0;
    uint32_t min_cp = 0;
    if ((b0 & 0xE0) == 0xC0) {
        len = 2;
        cp = b0 & 0x1Fu;
        min_cp = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
        len = 3;
        cp = b0 & 0x0Fu;
        min_cp = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
        len = 4;
        cp = b0 & 0x07u;
        min_cp = 0x10000;
    } else {
        cp = kInvalidCodePoint;
        return 1;
    }
    if (i + len > s.size()) {
        cp = kInvalidCodePoint;
        return 1;
    }
    for (size_t k = 1; k < len; ++k) {
        const uint8_t b = byte(i + k);
        if ((b & 0xC0) != 0x80) {
            cp = kInvalidCodePoint;
            return 1;
        }
        cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        cp = kInvalidCodePoint;
        return 1;
    }
    return len;
}

}  // namespace detail

}  // namespace zt
