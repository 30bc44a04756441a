// libFuzzer target: the tokenizer files (GPT-2 vocab.json + merges.txt via
// zt::make_gpt2_tokenizer, a Hugging Face tokenizer.json via zt::make_hf_tokenizer, the
// tokenizer.json description via zt::load_tokenizer) and the GPT-2 and Llama 3
// pre-tokenizers over arbitrary bytes.
//
// Input layout: up to three parts separated by NUL bytes (none of these text formats holds
// a raw NUL): vocab.json \0 merges.txt \0 tokenizer.json. A missing merges part is an empty
// file; a missing description part makes tokenizer.json a copy of the first part. The first
// part is also read as a Hugging Face tokenizer.json (a description of type "hf" names it
// with "file": "vocab.json").
// All files go into the harness's scratch folder; the description may only name files in
// that folder (names without '/'), so the fuzzer cannot point it at /dev/zero.
//
// Expected rejections are zt::Error / zt::InputError; anything else is a finding, as is a
// violated property: the pre-tokenizers' pieces concatenate to their input, and a loaded
// tokenizer round-trips text it can encode (decode(encode(s)) == s), with every id
// < vocab_size.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace {

[[noreturn]] void violated(const char* what) {
    std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
    std::abort();
}

#define FUZZ_CHECK(cond) \
    do {                 \
        if (!(cond)) violated(#cond); \
    } while (0)

void check_pieces(std::string_view text, const std::vector<std::string_view>& pieces) {
    size_t at = 0;
    for (std::string_view p : pieces) {
        FUZZ_CHECK(!p.empty());
        FUZZ_CHECK(p.data() == text.data() + at);  // views into the text, in order
        at += p.size();
    }
    FUZZ_CHECK(at == text.size());
}

void check_pretokenize(std::string_view text) {
    check_pieces(text, zt::gpt2_pretokenize(text));
    check_pieces(text, zt::llama3_pretokenize(text));
    check_pieces(text, zt::digits_pretokenize(text, true));
}

/// Encodes and decodes `text` with a tokenizer that loaded.
void exercise(const zt::Tokenizer& tok, const std::string& text) {
    const int n = tok.vocab_size();
    FUZZ_CHECK(n > 0);
    FUZZ_CHECK(tok.eot() < static_cast<uint32_t>(n));
    FUZZ_CHECK(tok.type() == "byte" || tok.type() == "gpt2" || tok.type() == "hf");
    std::vector<uint32_t> ids;
    try {
        ids = tok.encode(text);
    } catch (const zt::InputError&) {
        return;  // a byte the vocabulary lacks
    }
    for (uint32_t id : ids) FUZZ_CHECK(id < static_cast<uint32_t>(n));
    FUZZ_CHECK(tok.decode(ids) == text);
    // Encoding is deterministic (the piece cache must not change the answer).
    FUZZ_CHECK(tok.encode(text) == ids);
    // Decoding any valid id works; an id >= vocab_size is an Error.
    std::vector<uint32_t> some;
    for (uint32_t i = 0; i < static_cast<uint32_t>(n) && i < 64; ++i) some.push_back(i);
    some.push_back(tok.eot());
    (void)tok.decode(some);
    bool threw = false;
    try {
        (void)tok.decode({static_cast<uint32_t>(n)});
    } catch (const zt::Error&) {
        threw = true;
    }
    FUZZ_CHECK(threw);
}

/// The description may name only files inside the scratch folder.
bool description_is_contained(const std::string& text) {
    nlohmann::json d;
    try {
        d = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
        return true;  // not JSON: load_tokenizer rejects it before opening anything else
    }
    if (!d.is_object()) return true;
    for (const char* key : {"vocab", "merges", "file"}) {
        if (d.contains(key) && d.at(key).is_string()) {
            const std::string name = d.at(key).get<std::string>();
            if (name.find('/') != std::string::npos) return false;
        }
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::scratch_dir();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string vocab_path = zt::fuzz::scratch_file("vocab.json");
    static const std::string merges_path = zt::fuzz::scratch_file("merges.txt");
    static const std::string desc_path = zt::fuzz::scratch_file("tokenizer.json");

    const std::string input(reinterpret_cast<const char*>(data), size);
    check_pretokenize(input);

    const size_t a = input.find('\0');
    const size_t b = a == std::string::npos ? std::string::npos : input.find('\0', a + 1);
    const std::string vocab = input.substr(0, a);
    const std::string merges = a == std::string::npos ? "" : input.substr(a + 1, b == std::string::npos ? b : b - a - 1);
    const std::string desc = b == std::string::npos ? vocab : input.substr(b + 1);
    zt::fuzz::write_file(vocab_path, vocab);
    zt::fuzz::write_file(merges_path, merges);
    zt::fuzz::write_file(desc_path, desc);

    // The text to encode: a fixed sentence in the tiny vocabulary's alphabet, and the
    // merges part (arbitrary bytes through the pre-tokenizer and BPE).
    static const std::string sentence = "hello world, 123 caf\xc3\xa9!\n\n  the end";
    const std::string sample = merges.substr(0, 256);

    try {
        const auto tok = zt::make_gpt2_tokenizer(vocab_path, merges_path);
        FUZZ_CHECK(tok->type() == "gpt2");
        exercise(*tok, sentence);
        exercise(*tok, sample);
    } catch (const zt::Error&) {
    }

    try {
        const auto tok = zt::make_hf_tokenizer(vocab_path);
        FUZZ_CHECK(tok->type() == "hf");
        exercise(*tok, sentence);
        exercise(*tok, sample);
    } catch (const zt::Error&) {
    }

    if (description_is_contained(desc)) {
        try {
            const auto tok = zt::load_tokenizer(desc_path);
            exercise(*tok, sentence);
            exercise(*tok, sample);
        } catch (const zt::Error&) {
        }
    }
    return 0;
}
