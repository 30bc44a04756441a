// Tokenizers: the byte tokenizer, GPT-2's pre-tokenizer, GPT-2 BPE on a hand-made vocabulary
// (tests/data/bpe_tiny), malformed vocab/merges files, and tokenizer.json save/load.
//
// The pre-tokenizer expectations were checked against GPT-2's own regex (Python `regex`
// module); the BPE expectations are derived by hand below.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/tokenizer.hpp"

namespace {

using zt::test::ScratchDir;
using zt::test::read_file;
using zt::test::write_file;
using Ids = std::vector<uint32_t>;

const std::string kTinyDir = std::string(ZT_SOURCE_DIR) + "/tests/data/bpe_tiny";

using zt::test::expect_input_error;

std::vector<std::string> pieces(const std::string& text) {
    std::vector<std::string> out;
    for (std::string_view p : zt::gpt2_pretokenize(text)) {
        out.emplace_back(p);
    }
    return out;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
    std::string s(n, '\0');
    for (char& c : s) {
        c = static_cast<char>(rng() & 0xFF);
    }
    return s;
}

/// Random valid UTF-8 drawn from ASCII, Latin-1, CJK and emoji, with spaces and newlines.
std::string random_utf8(std::mt19937& rng, size_t n) {
    static const std::vector<std::string> alphabet = {"a",  "Z",  "7", " ", " ",     "\n",
                                                      "\t", "'",  "!", ",", "é",     "ß",
                                                      "Ж",  "中", "٣", "😀", "\u00a0"};
    std::string s;
    for (size_t i = 0; i < n; ++i) {
        s += alphabet[rng() % alphabet.size()];
    }
    return s;
}

// ---------------------------------------------------------------------------------------
// Byte tokenizer
// ---------------------------------------------------------------------------------------

TEST(ByteTokenizer, AllBytesRoundTrip) {
    auto tok = zt::make_byte_tokenizer();
    EXPECT_EQ(tok->type(), "byte");
    EXPECT_EQ(tok->vocab_size(), 257);
    EXPECT_EQ(tok->eot(), 256u);
    std::string all;
    for (int b = 0; b < 256; ++b) {
        all.push_back(static_cast<char>(b));
    }
    const Ids ids = tok->encode(all);
    ASSERT_EQ(ids.size(), 256u);
    for (uint32_t b = 0; b < 256; ++b) {
        EXPECT_EQ(ids[b], b);
    }
    EXPECT_EQ(tok->decode(ids), all);
}

TEST(ByteTokenizer, RandomTextRoundTrips) {
    auto tok = zt::make_byte_tokenizer();
    std::mt19937 rng(1);
    for (int i = 0; i < 50; ++i) {
        const std::string a = random_bytes(rng, rng() % 200);
        EXPECT_EQ(tok->decode(tok->encode(a)), a);
        const std::string u = random_utf8(rng, rng() % 100);
        EXPECT_EQ(tok->encode(u).size(), u.size());
        EXPECT_EQ(tok->decode(tok->encode(u)), u);
    }
}

TEST(ByteTokenizer, EotDecodesAsTextAndOutOfRangeThrows) {
    auto tok = zt::make_byte_tokenizer();
    EXPECT_EQ(tok->decode({'h', 'i', 256, 'o'}), "hi<|endoftext|>o");
    EXPECT_THROW(tok->decode({257}), zt::Error);
}

TEST(ByteTokenizer, SaveAndLoad) {
    ScratchDir dir("tok");
    zt::make_byte_tokenizer()->save(dir.path());
    for (const std::string& path : {dir.file("tokenizer.json"), dir.path()}) {
        auto tok = zt::load_tokenizer(path);
        EXPECT_EQ(tok->type(), "byte");
        EXPECT_EQ(tok->vocab_size(), 257);
        EXPECT_EQ(tok->eot(), 256u);
    }
}

// ---------------------------------------------------------------------------------------
// GPT-2 pre-tokenizer (expected pieces are what GPT-2's regex gives)
// ---------------------------------------------------------------------------------------

using Pieces = std::vector<std::string>;

TEST(Gpt2Pretokenize, Contractions) {
    EXPECT_EQ(pieces("don't"), (Pieces{"don", "'t"}));
    EXPECT_EQ(pieces("I'll've"), (Pieces{"I", "'ll", "'ve"}));
    EXPECT_EQ(pieces("it's 2024's"), (Pieces{"it", "'s", " 2024", "'s"}));
    // Only lower-case contractions are special; otherwise ' is punctuation.
    EXPECT_EQ(pieces("DON'T"), (Pieces{"DON", "'", "T"}));
    EXPECT_EQ(pieces(" 's"), (Pieces{" '", "s"}));
}

TEST(Gpt2Pretokenize, LettersNumbersPunctuation) {
    EXPECT_EQ(pieces("abc123 456"), (Pieces{"abc", "123", " 456"}));
    EXPECT_EQ(pieces("Hi!!! ...ok?"), (Pieces{"Hi", "!!!", " ...", "ok", "?"}));
    EXPECT_EQ(pieces("hello, world!"), (Pieces{"hello", ",", " world", "!"}));
}

TEST(Gpt2Pretokenize, Whitespace) {
    // Of several spaces before a word, the last one prefixes the word (the (?!\S) rule).
    EXPECT_EQ(pieces("a  b"), (Pieces{"a", " ", " b"}));
    EXPECT_EQ(pieces("a   b"), (Pieces{"a", "  ", " b"}));
    EXPECT_EQ(pieces("hello\n\nworld"), (Pieces{"hello", "\n", "\n", "world"}));
    EXPECT_EQ(pieces("x  "), (Pieces{"x", "  "}));
    EXPECT_EQ(pieces("\tb"), (Pieces{"\t", "b"}));
    EXPECT_EQ(pieces(""), Pieces{});
}

TEST(Gpt2Pretokenize, NonAscii) {
    EXPECT_EQ(pieces("café ß"), (Pieces{"café", " ß"}));
    EXPECT_EQ(pieces("中文 text"), (Pieces{"中文", " text"}));
    EXPECT_EQ(pieces("٣4 ²"), (Pieces{"٣4", " ²"}));              // \p{N}: Nd and No
    EXPECT_EQ(pieces("a\u00a0b"), (Pieces{"a", "\u00a0", "b"}));  // NBSP is \s
    EXPECT_EQ(pieces("a \u00a0b"), (Pieces{"a", " ", "\u00a0", "b"}));
    EXPECT_EQ(pieces("e\u0301"), (Pieces{"e", "\u0301"}));  // a mark is not \p{L}
    // Invalid UTF-8 bytes match nothing (PCRE2_MATCH_INVALID_UTF): they lie between the
    // matches, each stretch of them one piece, and a space before one stands alone.
    EXPECT_EQ(pieces("\xff\xfe"
                     "ab \xc3"),
              (Pieces{"\xff\xfe", "ab", " ", "\xc3"}));
}

TEST(Gpt2Pretokenize, PiecesConcatenateToText) {
    std::mt19937 rng(5);
    for (int i = 0; i < 200; ++i) {
        const std::string s = i % 2 ? random_utf8(rng, rng() % 60) : random_bytes(rng, rng() % 60);
        std::string joined;
        for (const std::string& p : pieces(s)) {
            EXPECT_FALSE(p.empty());
            joined += p;
        }
        EXPECT_EQ(joined, s);
    }
}

// ---------------------------------------------------------------------------------------
// GPT-2 BPE on tests/data/bpe_tiny
//
// Ids (see vocab.json): ! 0, ' 1, , 2, 1 3, 2 4, 3 5, a 6, b 7, c 8, d 9, e 10, f 11, h 12,
// l 13, n 14, o 15, r 16, t 17, w 18, © 19, Ã 20, Ċ(\n) 21, Ġ(space) 22, he 23, ll 24,
// hell 25, hello 26, Ġw 27, or 28, Ġwor 29, Ġworl 30, Ġworld 31, el 32, on 33, don 34,
// 't 35, 12 36, 123 37, Ã© 38, <|endoftext|> 39.
// Merge ranks (merges.txt order): 0 h e, 1 l l, 2 he ll, 3 hell o, 4 Ġ w, 5 o r,
// 6 Ġw or, 7 Ġwor l, 8 Ġworl d, 9 e l, 10 o n, 11 d on, 12 ' t, 13 1 2, 14 12 3, 15 Ã ©.
// ---------------------------------------------------------------------------------------

std::unique_ptr<zt::Tokenizer> tiny() {
    return zt::make_gpt2_tokenizer(kTinyDir + "/vocab.json", kTinyDir + "/merges.txt");
}

TEST(Gpt2Bpe, LoadsTinyVocabulary) {
    auto tok = tiny();
    EXPECT_EQ(tok->type(), "gpt2");
    EXPECT_EQ(tok->vocab_size(), 40);
    EXPECT_EQ(tok->eot(), 39u);
    EXPECT_EQ(tok->decode({39}), "<|endoftext|>");
}

TEST(Gpt2Bpe, HandDerivedEncodings) {
    auto tok = tiny();
    // "hello world" -> pieces "hello", " world".
    //   hello: pairs (h,e)0 (e,l)9 (l,l)1 (l,o)- -> h+e -> [he l l o]; then (l,l)1 -> [he ll o];
    //          (he,ll)2 -> [hell o]; (hell,o)3 -> [hello] = 26.
    //   " world" = Ġ w o r l d: (Ġ,w)4 -> [Ġw o r l d]; (o,r)5 -> [Ġw or l d];
    //          (Ġw,or)6, (Ġwor,l)7, (Ġworl,d)8 -> [Ġworld] = 31.
    EXPECT_EQ(tok->encode("hello world"), (Ids{26, 31}));
    // Rank order, not left to right: in "ell", (l,l) rank 1 beats (e,l) rank 9 -> [e ll].
    EXPECT_EQ(tok->encode("ell"), (Ids{10, 24}));
    // All occurrences of the best pair merge left to right without overlap: lll -> [ll l].
    EXPECT_EQ(tok->encode("lll"), (Ids{24, 13}));
    // " hello": no merge joins Ġ and h, so the space stays a token: [Ġ hello].
    EXPECT_EQ(tok->encode(" hello"), (Ids{22, 26}));
    // "don't" -> "don" + "'t": d o n -> (o,n)10 -> [d on] -> (d,on)11 -> [don]; ' t -> 't.
    EXPECT_EQ(tok->encode("don't"), (Ids{34, 35}));
    // Digits: 1 2 3 -> (1,2)13 -> [12 3] -> (12,3)14 -> [123]; "1231" -> [123 1].
    EXPECT_EQ(tok->encode("123"), (Ids{37}));
    EXPECT_EQ(tok->encode("1231"), (Ids{37, 3}));
    // "a  b" -> pieces "a", " ", " b" -> [a] [Ġ] [Ġ b] (no Ġ b merge).
    EXPECT_EQ(tok->encode("a  b"), (Ids{6, 22, 22, 7}));
    // "hello, world!" -> hello , Ġworld !
    EXPECT_EQ(tok->encode("hello, world!"), (Ids{26, 2, 31, 0}));
    // "café": é is the bytes C3 A9 -> symbols Ã © -> (Ã,©)15 -> Ã© = 38: [c a f Ã©].
    EXPECT_EQ(tok->encode("café"), (Ids{8, 6, 11, 38}));
    // "hello\n\nworld" -> pieces hello, \n, \n, world; "world" has no leading Ġ so only
    // (o,r)5 applies: [w or l d].
    EXPECT_EQ(tok->encode("hello\n\nworld"), (Ids{26, 21, 21, 18, 28, 13, 9}));
    EXPECT_TRUE(tok->encode("").empty());
}

TEST(Gpt2Bpe, DecodeInvertsEncode) {
    auto tok = tiny();
    for (const std::string s : {"hello world", "ell", "lll", "don't", "1231", "a  b",
                                "hello, world!", "café", "hello\n\nworld", "he'll do ten!"}) {
        EXPECT_EQ(tok->decode(tok->encode(s)), s) << s;
    }
    EXPECT_THROW(tok->decode({40}), zt::Error);
}

TEST(Gpt2Bpe, ByteWithoutTokenIsAnError) {
    auto tok = tiny();
    // 'x' (0x78) is not in the tiny vocabulary.
    try {
        tok->encode("hex");
        ADD_FAILURE() << "expected zt::Error";
    } catch (const zt::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("vocab.json"), std::string::npos) << msg;
        EXPECT_NE(msg.find("0x78"), std::string::npos) << msg;
    }
}

TEST(Gpt2Bpe, FullByteVocabularyRoundTripsAnyBytes) {
    // A vocabulary with all 256 byte tokens (in GPT-2's alphabet) plus a few merges.
    ScratchDir dir("bpe");
    std::string vocab = "{";
    auto symbol = [](int b) {
        // GPT-2's byte-to-unicode: printable Latin-1 maps to itself, the rest to 256+n.
        static std::vector<uint32_t> table = [] {
            std::vector<uint32_t> t(256);
            uint32_t next = 256;
            for (uint32_t c = 0; c < 256; ++c) {
                const bool keep = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
                t[c] = keep ? c : next++;
            }
            return t;
        }();
        char buf[16];
        std::snprintf(buf, sizeof(buf), "\\u%04x", table[static_cast<size_t>(b)]);
        return std::string(buf);
    };
    for (int b = 0; b < 256; ++b) {
        vocab += "\"" + symbol(b) + "\": " + std::to_string(b) + ", ";
    }
    vocab += "\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"<|endoftext|>\": 259}";
    write_file(dir.file("vocab.json"), vocab);
    write_file(dir.file("merges.txt"), "#version: 0.2\nĠ t\nh e\nĠt he\n");
    auto tok = zt::make_gpt2_tokenizer(dir.file("vocab.json"), dir.file("merges.txt"));
    EXPECT_EQ(tok->vocab_size(), 260);
    EXPECT_EQ(tok->encode(" the"), (Ids{258}));
    EXPECT_EQ(tok->encode("the"), (Ids{'t', 257}));
    std::mt19937 rng(3);
    for (int i = 0; i < 100; ++i) {
        const std::string a = random_bytes(rng, rng() % 100);  // mostly invalid UTF-8
        EXPECT_EQ(tok->decode(tok->encode(a)), a);
        const std::string u = random_utf8(rng, rng() % 100) + " the the";
        EXPECT_EQ(tok->decode(tok->encode(u)), u);
    }
}

TEST(Gpt2Bpe, SaveAndLoadDescription) {
    ScratchDir dir("bpe");
    tiny()->save(dir.path());
    for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt"}) {
        EXPECT_TRUE(std::filesystem::exists(dir.file(name))) << name;
    }
    auto tok = zt::load_tokenizer(dir.file("tokenizer.json"));
    EXPECT_EQ(tok->type(), "gpt2");
    EXPECT_EQ(tok->vocab_size(), 40);
    EXPECT_EQ(tok->eot(), 39u);
    EXPECT_EQ(tok->encode("hello world"), (Ids{26, 31}));
    // Saving back into the folder it was loaded from must not clobber the files.
    tok->save(dir.path());
    EXPECT_EQ(zt::load_tokenizer(dir.path())->encode("don't"), (Ids{34, 35}));
}

// OpenAI's release names the same two files encoder.json (the vocabulary) and vocab.bpe
// (the merges, with its "#version" line): loaded under those names they encode the same,
// and messages name the files as given.
TEST(Gpt2Bpe, OpenAiFileNames) {
    ScratchDir dir("bpe_openai");
    write_file(dir.file("encoder.json"), read_file(kTinyDir + "/vocab.json"));
    write_file(dir.file("vocab.bpe"), read_file(kTinyDir + "/merges.txt"));
    auto tok = zt::make_gpt2_tokenizer(dir.file("encoder.json"), dir.file("vocab.bpe"));
    EXPECT_EQ(tok->type(), "gpt2");
    EXPECT_EQ(tok->vocab_size(), 40);
    EXPECT_EQ(tok->eot(), 39u);
    // The hand-derived encodings above (merge ranks come from vocab.bpe's line order).
    EXPECT_EQ(tok->encode("hello world"), (Ids{26, 31}));
    EXPECT_EQ(tok->encode("ell"), (Ids{10, 24}));
    EXPECT_EQ(tok->encode("don't"), (Ids{34, 35}));
    EXPECT_EQ(tok->encode("café"), (Ids{8, 6, 11, 38}));
    EXPECT_EQ(tok->decode(tok->encode("he'll do ten!")), "he'll do ten!");
    try {
        tok->encode("hex");
        ADD_FAILURE() << "expected zt::Error";
    } catch (const zt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("encoder.json"), std::string::npos) << e.what();
    }
    // zt-prepare's description of it loads back with the same encodings.
    ScratchDir out("bpe_openai_desc");
    tok->save(out.path());
    EXPECT_EQ(zt::load_tokenizer(out.path())->encode("hello, world!"), (Ids{26, 2, 31, 0}));
    // A malformed vocab.bpe is rejected naming it and the line.
    write_file(dir.file("vocab.bpe"), "#version: 0.2\nh e\nhe\n");
    try {
        zt::make_gpt2_tokenizer(dir.file("encoder.json"), dir.file("vocab.bpe"));
        ADD_FAILURE() << "expected zt::InputError";
    } catch (const zt::InputError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(dir.file("vocab.bpe") + ":3"), std::string::npos) << msg;
        EXPECT_NE(msg.find("two tokens"), std::string::npos) << msg;
    }
}

// ---------------------------------------------------------------------------------------
// Malformed files
// ---------------------------------------------------------------------------------------

class MalformedBpe : public ::testing::Test {
  protected:
    void SetUp() override {
        write_file(vocab(), R"({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3})");
        write_file(merges(), "#version: 0.2\na b\n");
    }
    std::string vocab() const { return m_dir.file("vocab.json"); }
    std::string merges() const { return m_dir.file("merges.txt"); }
    void load() const { zt::make_gpt2_tokenizer(vocab(), merges()); }
    ScratchDir m_dir{"badbpe"};
};

TEST_F(MalformedBpe, ValidBaselineLoads) {
    EXPECT_NO_THROW(load());
}

TEST_F(MalformedBpe, VocabNotJson) {
    write_file(vocab(), "{ this is not json");
    expect_input_error([&] { load(); }, {vocab(), "not valid JSON"});
    write_file(vocab(), "[1, 2]");
    expect_input_error([&] { load(); }, {vocab(), "JSON object"});
}

TEST_F(MalformedBpe, VocabNonIntegerId) {
    write_file(vocab(), R"({"a": "zero", "<|endoftext|>": 1})");
    expect_input_error([&] { load(); }, {vocab(), "'a'", "not an integer"});
    write_file(vocab(), R"({"a": 0.5, "<|endoftext|>": 1})");
    expect_input_error([&] { load(); }, {vocab(), "not an integer"});
}

TEST_F(MalformedBpe, VocabDuplicateOrOutOfRangeId) {
    write_file(vocab(), R"({"a": 0, "b": 0, "<|endoftext|>": 1})");
    expect_input_error([&] { load(); }, {vocab(), "id 0 is used by both"});
    write_file(vocab(), R"({"a": 0, "b": 7, "<|endoftext|>": 1})");
    expect_input_error([&] { load(); }, {vocab(), "id 7", "out of range"});
    write_file(vocab(), R"({"a": 0, "b": -1, "<|endoftext|>": 1})");
    expect_input_error([&] { load(); }, {vocab(), "out of range"});
}

TEST_F(MalformedBpe, VocabWithoutEndOfText) {
    write_file(vocab(), R"({"a": 0, "b": 1, "ab": 2})");
    expect_input_error([&] { load(); }, {vocab(), "<|endoftext|>"});
}

TEST_F(MalformedBpe, MissingFiles) {
    std::filesystem::remove(merges());
    expect_input_error([&] { load(); }, {merges(), "no such file"});
    std::filesystem::remove(vocab());
    expect_input_error([&] { load(); }, {vocab(), "no such file"});
}

TEST_F(MalformedBpe, MergesLineWithoutTwoParts) {
    write_file(merges(), "#version: 0.2\na b\na b ab\n");
    expect_input_error([&] { load(); }, {merges() + ":3", "two tokens"});
    write_file(merges(), "a b\nab\n");
    expect_input_error([&] { load(); }, {merges() + ":2", "two tokens"});
    write_file(merges(), " a\n");
    expect_input_error([&] { load(); }, {merges() + ":1"});
}

TEST_F(MalformedBpe, MergesPartOrResultNotInVocab) {
    write_file(merges(), "#version: 0.2\na z\n");
    expect_input_error([&] { load(); }, {merges() + ":2", "'z' is not in", vocab()});
    write_file(merges(), "#version: 0.2\na b\nb a\n");
    expect_input_error([&] { load(); }, {merges() + ":3", "makes 'ba'", vocab()});
}

TEST(TokenizerDescription, RejectsBadDescriptions) {
    ScratchDir dir("desc");
    const std::string path = dir.file("tokenizer.json");
    expect_input_error([&] { zt::load_tokenizer(path); }, {path, "no such file"});
    write_file(path, "not json");
    expect_input_error([&] { zt::load_tokenizer(path); }, {path, "not valid JSON"});
    write_file(path, R"({"vocab_size": 257})");
    expect_input_error([&] { zt::load_tokenizer(path); }, {path, "\"type\""});
    write_file(path, R"({"type": "sentencepiece"})");
    expect_input_error([&] { zt::load_tokenizer(path); },
                       {path, "unknown tokenizer type 'sentencepiece'"});
    write_file(path, R"({"type": "byte", "vocab_size": 300})");
    expect_input_error([&] { zt::load_tokenizer(path); }, {path, "\"vocab_size\" is 300"});
    write_file(path, R"({"type": "gpt2", "vocab": "vocab.json"})");
    expect_input_error([&] { zt::load_tokenizer(path); }, {path, "\"merges\""});
    // Relative gpt2 file names resolve against the description's folder.
    write_file(path, R"({"type": "gpt2", "vocab": "v.json", "merges": "m.txt"})");
    expect_input_error([&] { zt::load_tokenizer(path); }, {dir.file("v.json"), "no such file"});
}

// ---------------------------------------------------------------------------------------
// The tokenizer of a model to run (zt-generate, zt-eval)
// ---------------------------------------------------------------------------------------

TEST(FindModelTokenizer, LooksInTheGivenFileThenTheModelsDirectoryThenTheRunsFiles) {
    ScratchDir dir("find_tok");
    zt::make_byte_tokenizer()->save(dir.path());
    // --tokenizer: a description, or its directory.
    EXPECT_EQ(zt::find_model_tokenizer({dir.path(), kTinyDir, "", "", "m"})->type(), "byte");
    // A Hugging Face directory with vocab.json + merges.txt only.
    EXPECT_EQ(zt::find_model_tokenizer({"", kTinyDir, "", "", "m"})->type(), "gpt2");
    // A checkpoint's run: data.tokenizer first, then the tokenizer.json beside data.train.
    EXPECT_EQ(zt::find_model_tokenizer({"", "", dir.file("tokenizer.json"), "", "m"})->type(), "byte");
    EXPECT_EQ(zt::find_model_tokenizer({"", "", dir.file("gone.json"), dir.file("train_*.bin"), "m"})->type(),
              "byte");
    expect_input_error([&] { zt::find_model_tokenizer({dir.file("nope"), "", "", "", "m"}); },
                       {"--tokenizer: '", "nope' does not exist"});
    expect_input_error([&] { zt::find_model_tokenizer({"", dir.file("empty_hf"), "", "", "m"}); },
                       {"empty_hf: holds no tokenizer.json nor vocab.json + merges.txt"});
    expect_input_error(
        [&] { zt::find_model_tokenizer({"", "", dir.file("gone.json"), "/no/such/train_*.bin", "ckpt"}); },
        {"ckpt: no tokenizer found (tried ", "gone.json /no/such/tokenizer.json", "give --tokenizer F"});
}

}  // namespace
