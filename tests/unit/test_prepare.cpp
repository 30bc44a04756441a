// Corpus preparation (prepare.hpp, zt-prepare's library): input folders, stale shard
// removal, and prepare_corpus end to end for text and JSON Lines: document splitting, the
// one-pass validation split, the same shards for any thread count and part size,
// compressed input, messages, bad lines, the output untouched by a failed run. The
// executable's exit codes, console output, ranks and resume: tests/cli/test_prepare*.sh.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/prepare.hpp"
#include "ztrain/data/token_data.hpp"

namespace fs = std::filesystem;

namespace {

using zt::test::expect_input_error;
using zt::test::read_file;
using zt::test::ScratchDir;
using zt::test::write_file;
using Ids = std::vector<uint32_t>;

/// The byte tokenizer's ids of `text`, after its document separator (256).
Ids byte_document(const std::string& text) {
    Ids ids{256};
    for (unsigned char c : text) ids.push_back(c);
    return ids;
}

TEST(PreparedShardName, OnlyTrainOrValWithSixDigits) {
    EXPECT_TRUE(zt::is_prepared_shard_name("train_000000.bin"));
    EXPECT_TRUE(zt::is_prepared_shard_name("val_123456.bin"));
    for (const char* name : {"train_00000.bin", "train_0000000.bin", "train_00000a.bin", "test_000000.bin",
                             "train_000000.bin.tmp", "xtrain_000000.bin", "val_000000.dat"}) {
        EXPECT_FALSE(zt::is_prepared_shard_name(name)) << name;
    }
}

TEST(CollectInputFiles, FolderGivesSortedTextFilesAndCountsWhatItSkips) {
    ScratchDir dir("prepare-collect");
    const std::string folder = dir.file("docs");
    fs::create_directories(folder + "/sub");
    write_file(folder + "/b.txt", "b");
    write_file(folder + "/a.txt", "a");
    write_file(folder + "/c.bin", std::string("c\0d", 3));
    fs::create_symlink("a.txt", folder + "/link.txt");
    write_file(dir.file("single.txt"), "s");
    zt::SkippedInputs skipped;
    const std::vector<std::string> files = zt::collect_input_files({dir.file("single.txt"), folder}, skipped);
    EXPECT_EQ(files, (std::vector<std::string>{dir.file("single.txt"), folder + "/a.txt", folder + "/b.txt"}));
    EXPECT_EQ(skipped.binary, 1u);
    EXPECT_EQ(skipped.symlinks, 1u);
    EXPECT_EQ(skipped.other, 1u);
}

TEST(CollectInputFiles, MissingInputAndFolderWithoutTextAreInputErrors) {
    ScratchDir dir("prepare-collect-bad");
    zt::SkippedInputs skipped;
    expect_input_error([&] { zt::collect_input_files({dir.file("nope")}, skipped); },
                       {"--input: '", "nope': no such file or directory"});
    fs::create_directories(dir.file("bin"));
    write_file(dir.file("bin/x"), std::string("\0", 1));
    expect_input_error([&] { zt::collect_input_files({dir.file("bin")}, skipped); },
                       {"folder '", "/bin' holds no text files"});
}

TEST(RemoveStaleShards, RemovesOnlyUnwrittenShardNames) {
    ScratchDir dir("prepare-stale");
    for (const char* name : {"train_000000.bin", "train_000005.bin", "val_000001.bin", "other.bin", "train_1.bin"}) {
        write_file(dir.file(name), "x");
    }
    EXPECT_EQ(zt::remove_stale_shards(dir.path(), {dir.file("train_000000.bin")}), 2u);
    std::set<std::string> left;
    for (const fs::directory_entry& e : fs::directory_iterator(dir.path())) left.insert(e.path().filename().string());
    EXPECT_EQ(left, (std::set<std::string>{"train_000000.bin", "other.bin", "train_1.bin"}));
}

zt::PrepareOptions options(const std::vector<std::string>& inputs, const std::string& output) {
    zt::PrepareOptions opt;
    opt.inputs = inputs;
    opt.output = output;
    return opt;
}

TEST(PrepareCorpus, TextDocumentsIntoTrainAndValShards) {
    ScratchDir dir("prepare-text");
    write_file(dir.file("in.txt"), "first\n%\n \n%\nsecond\n");
    fs::create_directories(dir.file("out"));
    write_file(dir.file("out/val_000003.bin"), "stale");
    zt::PrepareOptions opt = options({dir.file("in.txt")}, dir.file("out"));
    opt.doc_separator = "%";
    opt.val_fraction = 0.5;
    std::ostringstream out;
    std::ostringstream err;
    zt::prepare_corpus(opt, out, err);
    EXPECT_EQ(zt::read_token_shard(dir.file("out/train_000000.bin"), 0), byte_document("first\n"));
    EXPECT_EQ(zt::read_token_shard(dir.file("out/val_000000.bin"), 0), byte_document("second\n"));
    EXPECT_FALSE(fs::exists(dir.file("out/val_000003.bin")));
    EXPECT_TRUE(fs::exists(dir.file("out/tokenizer.json")));
    EXPECT_NE(out.str().find("2 documents (1 train, 1 val); 1 blank document(s) skipped"), std::string::npos)
        << out.str();
    EXPECT_NE(out.str().find("removed 1 stale shard(s)"), std::string::npos) << out.str();
    EXPECT_EQ(err.str(), "");
}

TEST(PrepareCorpus, JsonlBadLineStopsBeforeWritingUnlessSkipped) {
    ScratchDir dir("prepare-jsonl");
    write_file(dir.file("in.jsonl"), "{\"text\": \"one\"}\n{\"text\": 2}\n\n{\"text\": \"three\"}\n");
    zt::PrepareOptions opt = options({dir.file("in.jsonl")}, dir.file("out"));
    opt.val_fraction = 0;
    std::ostringstream out;
    std::ostringstream err;
    expect_input_error([&] { zt::prepare_corpus(opt, out, err); },
                       {"--input: 1 bad line(s) (listed above); nothing was written"});
    EXPECT_NE(err.str().find("zt-prepare: bad line: " + dir.file("in.jsonl") + ":2: "), std::string::npos)
        << err.str();
    EXPECT_FALSE(fs::exists(dir.file("out")));

    opt.skip_bad = true;
    std::ostringstream out2;
    std::ostringstream err2;
    zt::prepare_corpus(opt, out2, err2);
    EXPECT_EQ(zt::read_example_shard(dir.file("out/train_000000.bin"), 0).num_examples(), 2u);
    EXPECT_NE(out2.str().find("2 examples (2 train, 0 val): 2 text, 0 prompt/completion, 0 chat; 1 bad line(s) "
                              "skipped; 1 blank line(s)"),
              std::string::npos)
        << out2.str();
    EXPECT_NE(err2.str().find("zt-prepare: skipped: "), std::string::npos) << err2.str();
}

TEST(PrepareCorpus, MaxTokensMakesALongExampleABadLine) {
    ScratchDir dir("prepare-max-tokens");
    write_file(dir.file("in.jsonl"), "{\"text\": \"short\"}\n{\"text\": \"a much longer text\"}\n");
    zt::PrepareOptions opt = options({dir.file("in.jsonl")}, dir.file("out"));
    opt.max_tokens = 10;
    std::ostringstream out;
    std::ostringstream err;
    expect_input_error([&] { zt::prepare_corpus(opt, out, err); }, {"1 bad line(s)"});
    EXPECT_NE(err.str().find(":2: an example of 20 tokens, longer than --max-tokens 10"), std::string::npos)
        << err.str();
}

/// Runs prepare_corpus; returns its standard output (its error output in `err_text`).
std::string prepare(const zt::PrepareOptions& opt, std::string* err_text = nullptr) {
    std::ostringstream out;
    std::ostringstream err;
    zt::prepare_corpus(opt, out, err);
    if (err_text != nullptr) *err_text = err.str();
    return out.str();
}

/// Every file of a folder, name and bytes, for comparing two outputs byte for byte.
std::string folder_bytes(const std::string& dir) {
    std::set<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    std::string all;
    for (const std::string& n : names) all += n + ":" + read_file(dir + "/" + n) + "\n";
    return all;
}

/// `n` documents of varied length separated by "%" lines.
std::string numbered_documents(size_t n) {
    std::string text;
    for (size_t d = 0; d < n; ++d) {
        text += "document " + std::to_string(d) + ":";
        for (size_t w = 0; w < d % 7; ++w) text += " hello world" + std::string(w, '!');
        text += "\n%\n";
    }
    return text;
}

TEST(PrepareCorpus, SeparatorLinesSplitCrlfToleratedBlankOnesCounted) {
    ScratchDir dir("prepare-split");
    // A CRLF separator line separates; "%x" and " %" do not; the empty run after the last
    // separator and the whitespace-only one are blank.
    write_file(dir.file("in.txt"), "one\r\n%\r\ntwo\n%x\n %\n%\n  \n%\nthree\n%\n");
    zt::PrepareOptions opt = options({dir.file("in.txt")}, dir.file("out"));
    opt.doc_separator = "%";
    opt.val_fraction = 0;
    const std::string out = prepare(opt);
    Ids want = byte_document("one\r\n");
    for (const char* doc : {"two\n%x\n %\n", "three\n"}) {
        const Ids ids = byte_document(doc);
        want.insert(want.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(zt::read_token_shard(dir.file("out/train_000000.bin"), 0), want);
    EXPECT_NE(out.find("3 documents (3 train, 0 val); 2 blank document(s) skipped"), std::string::npos) << out;

    // Without a separator the whole file is one document.
    opt.doc_separator.reset();
    opt.output = dir.file("whole");
    prepare(opt);
    EXPECT_EQ(zt::read_token_shard(dir.file("whole/train_000000.bin"), 0),
              byte_document("one\r\n%\r\ntwo\n%x\n %\n%\n  \n%\nthree\n%\n"));
}

TEST(PrepareCorpus, ValidationSplitIsAFixedHashOfEachDocumentsPosition) {
    ScratchDir dir("prepare-val");
    std::string text;
    for (int d = 0; d < 20; ++d) text += "d" + std::to_string(d) + "\n%\n";
    write_file(dir.file("in.txt"), text);
    zt::PrepareOptions opt = options({dir.file("in.txt")}, dir.file("out"));
    opt.doc_separator = "%";
    opt.val_fraction = 0.3;
    const std::string out = prepare(opt);
    // The documents the hash of (file 0, offset) puts in val; a change here changes every
    // prepared corpus's split.
    const auto docs = [](std::initializer_list<int> numbers) {
        Ids ids;
        for (int d : numbers) {
            const Ids doc = byte_document("d" + std::to_string(d) + "\n");
            ids.insert(ids.end(), doc.begin(), doc.end());
        }
        return ids;
    };
    EXPECT_EQ(zt::read_token_shard(dir.file("out/val_000000.bin"), 0), docs({6, 10, 13, 14, 17, 19}));
    EXPECT_NE(out.find("20 documents (14 train, 6 val); 1 blank document(s) skipped"), std::string::npos)
        << out;

    // Two documents the hash leaves in train: the last one is val all the same.
    write_file(dir.file("two.txt"), "a\n%\nb\n");
    opt = options({dir.file("two.txt")}, dir.file("two"));
    opt.doc_separator = "%";
    opt.val_fraction = 0.01;
    EXPECT_NE(prepare(opt).find("2 documents (1 train, 1 val)"), std::string::npos);
    EXPECT_EQ(zt::read_token_shard(dir.file("two/val_000000.bin"), 0), byte_document("b\n"));
}

/// The content of a gzip file, through zlib.
std::string gunzip(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    std::string text;
    if (f == nullptr) return text;
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    gzclose(f);
    return text;
}

TEST(PrepareCorpus, SameShardsForAnyThreadCountBatchAndPartSize) {
    ScratchDir dir("prepare-threads");
    write_file(dir.file("a.txt"), numbered_documents(300));
    write_file(dir.file("b.txt"), numbered_documents(50));
    zt::PrepareOptions opt = options({dir.file("a.txt"), dir.file("b.txt")}, dir.file("one"));
    // GPT-2's tokenizer.json: a real byte-level BPE (with its cache shared by the threads).
    opt.tokenizer = dir.file("tokenizer.json");
    write_file(opt.tokenizer, gunzip(std::string(ZT_SOURCE_DIR) + "/tests/data/hf/gpt2_tokenizer.json.gz"));
    opt.doc_separator = "%";
    opt.val_fraction = 0.2;
    opt.shard_tokens = 500;
    opt.threads = 1;
    const std::string out_one = prepare(opt);
    opt.output = dir.file("three");
    opt.threads = 3;
    opt.batch_bytes = 100;
    opt.part_bytes = 700;
    const std::string out_three = prepare(opt);
    const std::string one = folder_bytes(dir.file("one"));
    EXPECT_TRUE(one == folder_bytes(dir.file("three"))) << "1 thread, whole files vs 3 threads, 700-byte parts";
    EXPECT_NE(one.find("train_000003.bin"), std::string::npos) << "expected several shards";
    EXPECT_NE(one.find("val_000000.bin"), std::string::npos);
    EXPECT_FALSE(fs::exists(dir.file("three.zt-prepare-partial"))) << "the work folder is left behind";
}

/// `text` gzip-compressed as two members (cat a.gz b.gz), through zlib.
void write_gzip(const std::string& path, const std::string& text) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const size_t half = text.size() / 2;
    gzwrite(f, text.data(), static_cast<unsigned>(half));
    gzclose(f);
    f = gzopen(path.c_str(), "ab");
    gzwrite(f, text.data() + half, static_cast<unsigned>(text.size() - half));
    gzclose(f);
}

void write_zstd(const std::string& path, const std::string& text) {
    std::string packed(ZSTD_compressBound(text.size()), '\0');
    const size_t n = ZSTD_compress(packed.data(), packed.size(), text.data(), text.size(), 3);
    ASSERT_EQ(ZSTD_isError(n), 0u);
    packed.resize(n);
    write_file(path, packed);
}

TEST(PrepareCorpus, CompressedInputGivesTheSameShardsAsPlain) {
    ScratchDir dir("prepare-compressed");
    const std::string text = numbered_documents(200);
    write_file(dir.file("plain.txt"), text);
    write_gzip(dir.file("packed.gz"), text);
    write_zstd(dir.file("packed.zst"), text);
    zt::PrepareOptions opt = options({dir.file("plain.txt")}, dir.file("plain"));
    opt.doc_separator = "%";
    opt.shard_tokens = 1000;
    opt.part_bytes = 500;  // the plain file is cut, the compressed ones are whole parts
    prepare(opt);
    const std::string plain = folder_bytes(dir.file("plain"));
    for (const char* name : {"packed.gz", "packed.zst"}) {
        opt.inputs = {dir.file(name)};
        opt.output = dir.file(std::string("out_") + name);
        prepare(opt);
        EXPECT_TRUE(folder_bytes(opt.output) == plain) << name << " gives other shards than the plain file";
    }
    write_file(dir.file("broken.gz"), read_file(dir.file("packed.gz")).substr(0, 40));
    opt.inputs = {dir.file("broken.gz")};
    opt.output = dir.file("broken");
    expect_input_error([&] { prepare(opt); }, {"broken.gz': gzip: the file ends inside a compressed stream"});
    EXPECT_FALSE(fs::exists(dir.file("broken")));
}

TEST(PrepareCorpus, JsonlSameExamplesAndBadLinesForAnyPartSize) {
    ScratchDir dir("prepare-jsonl-parts");
    std::string lines;
    for (int i = 0; i < 120; ++i) {
        lines += i % 37 == 5 ? "not json\n" : "{\"prompt\": \"q" + std::to_string(i) + "\", \"completion\": \" a\"}\n";
    }
    write_gzip(dir.file("in.jsonl.gz"), lines);
    write_file(dir.file("in.jsonl"), lines);
    zt::PrepareOptions opt = options({dir.file("in.jsonl.gz")}, dir.file("whole"));
    opt.skip_bad = true;
    opt.shard_tokens = 200;
    std::string err_whole;
    const std::string out_whole = prepare(opt, &err_whole);
    opt.inputs = {dir.file("in.jsonl")};
    opt.output = dir.file("parts");
    opt.part_bytes = 300;
    opt.threads = 2;
    opt.batch_bytes = 50;
    std::string err_parts;
    prepare(opt, &err_parts);
    EXPECT_TRUE(folder_bytes(dir.file("whole")) == folder_bytes(dir.file("parts")))
        << "a whole .jsonl.gz and 300-byte parts of the same lines give other shards";
    EXPECT_NE(err_parts.find("in.jsonl:80: not valid JSON"), std::string::npos) << err_parts;
    EXPECT_NE(out_whole.find("116 examples"), std::string::npos) << out_whole;
}

TEST(PrepareCorpus, ProgressLineSaysBytesRecordsTokensRateAndEta) {
    ScratchDir dir("prepare-progress");
    write_file(dir.file("in.txt"), numbered_documents(40));
    zt::PrepareOptions opt = options({dir.file("in.txt")}, dir.file("out"));
    opt.doc_separator = "%";
    opt.batch_bytes = 200;
    std::string err;
    prepare(opt, &err);
    EXPECT_EQ(err, "") << "a quick run prints no progress line (one every 5 s)";
    opt.progress_seconds = 0;  // a line after every batch
    opt.output = dir.file("out2");
    prepare(opt, &err);
    const size_t at = err.find("zt-prepare: ");
    ASSERT_NE(at, std::string::npos) << err;
    for (const char* part : {" MB, ", " records, ", " tokens, ", " MB/s, ETA "}) {
        EXPECT_NE(err.find(part), std::string::npos) << part << " missing in: " << err;
    }
}

TEST(PrepareCorpus, AFailedRunLeavesTheOutputUntouched) {
    ScratchDir dir("prepare-untouched");
    write_file(dir.file("good.txt"), "good text");
    zt::PrepareOptions opt = options({dir.file("good.txt")}, dir.file("out"));
    prepare(opt);
    const std::string before = folder_bytes(dir.file("out"));
    write_file(dir.file("bad.txt"), std::string("text\0more", 9));
    opt.inputs = {dir.file("bad.txt")};
    expect_input_error([&] { prepare(opt); }, {"bad.txt' contains NUL bytes"});
    EXPECT_EQ(folder_bytes(dir.file("out")), before);
    EXPECT_FALSE(fs::exists(dir.file("out.zt-prepare-partial")));
}

TEST(PrepareCorpus, BadOptionsAreInputErrorsNamingTheOption) {
    ScratchDir dir("prepare-options");
    write_file(dir.file("in.txt"), "text");
    std::ostringstream out;
    std::ostringstream err;
    const auto rejects = [&](zt::PrepareOptions opt, const std::string& part) {
        expect_input_error([&] { zt::prepare_corpus(opt, out, err); }, {part});
    };
    const zt::PrepareOptions good = options({dir.file("in.txt")}, dir.file("out"));
    zt::PrepareOptions opt = good;
    opt.val_fraction = 1.0;
    rejects(opt, "--val-fraction: 1 is outside [0, 1)");
    opt = good;
    opt.format = "csv";
    rejects(opt, "--format: 'csv' is not text, jsonl");
    opt = good;
    opt.skip_bad = true;
    rejects(opt, "--chat-template, --skip-bad and --max-tokens apply to JSON Lines input only");
    opt = good;
    opt.inputs.push_back(dir.file("other.jsonl"));
    write_file(opt.inputs.back(), "{\"text\": \"x\"}\n");
    rejects(opt, "--input: 1 of 2 input files are named *.jsonl");
    opt = good;
    opt.output = dir.file("in.txt");
    rejects(opt, "exists and is not a folder");
    EXPECT_FALSE(fs::exists(dir.file("out")));
}

}  // namespace
