// Unicode NFC normalization for a tokenizer.json's {"type": "NFC"} normalizer (Qwen2.5),
// by utf8proc (canonical decomposition, ordering and composition, UAX #15).
// utf8proc 2.8 has Unicode 15's data; Hugging Face's `tokenizers` normalizes with older data
// (its crate unicode-normalization-alignments), so for the combining marks assigned since
// then (109 of them, listed in tests/interop/test_tokenizer_unicode.py, which checks every
// other code point against `tokenizers`) the two can order or compose differently. Bytes
// that are not valid UTF-8 pass through unchanged and block composition across them
// (`tokenizers` only sees valid strings).
#include <algorithm>
#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "tokenizer_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace zt {

namespace {

/// The NFC of `text`, which must be valid UTF-8; false when utf8proc finds it is not.
bool append_nfc(std::string_view text, std::string& out) {
    if (text.empty()) {
        return true;
    }
    utf8proc_uint8_t* normalized = nullptr;
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &normalized,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(normalized, &std::free);
    if (length == UTF8PROC_ERROR_INVALIDUTF8) {
        return false;
    }
    if (length < 0) {
        throw Error(str("NFC normalization failed: ", utf8proc_errmsg(length)));
    }
    out.append(reinterpret_cast<const char*>(normalized), static_cast<size_t>(length));
    return true;
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
    // Below U+0300 every character is a starter that composes with nothing before it, and
    // its UTF-8 lead byte is below 0xCC: such text is already NFC.
    if (std::none_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) >= 0xCC; })) {
        return std::string(text);
    }
    std::string out;
    out.reserve(text.size());
    if (append_nfc(text, out)) {
        return out;
    }
    // Invalid UTF-8 somewhere: normalize each valid stretch, copy the invalid bytes as they are.
    out.clear();
    size_t run = 0;  // start of the current valid stretch
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const size_t len = detail::decode_utf8(text, i, cp);
        if (cp == detail::kInvalidCodePoint) {
            append_nfc(text.substr(run, i - run), out);
            out.push_back(text[i]);
            run = i + 1;
        }
        i += len;
    }
    append_nfc(text.substr(run), out);
    return out;
}

}  // namespace zt
