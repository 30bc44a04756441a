// Corpus preparation (prepare.hpp, zt-prepare's library): document splitting, the
// validation count and the examples' fixed-seed split, input folders, token and example
// shard writing, stale shard removal, and prepare_corpus end to end for text and JSON Lines
// (messages, bad lines, nothing written on a bad line). The executable's exit codes and
// console output: tests/cli/test_prepare*.sh and bench/ab_prepare.sh.
#include <gtest/gtest.h>

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
using zt::test::ScratchDir;
using zt::test::write_file;
using Ids = std::vector<uint32_t>;

std::vector<std::string> split(const std::string& content, const std::optional<std::string>& sep,
                               size_t& blank) {
    std::vector<std::string> out;
    for (std::string_view d : zt::split_documents(content, sep, blank)) out.emplace_back(d);
    return out;
}

/// The byte tokenizer's ids of `text`, after its document separator (256).
Ids byte_document(const std::string& text) {
    Ids ids{256};
    for (unsigned char c : text) ids.push_back(c);
    return ids;
}

TEST(SplitDocuments, WithoutSeparatorTheWholeFileIsOneDocument) {
    size_t blank = 0;
    EXPECT_EQ(split("a\n%\nb\n", std::nullopt, blank), std::vector<std::string>{"a\n%\nb\n"});
    EXPECT_EQ(blank, 0u);
    EXPECT_TRUE(split(" \t\r\n", std::nullopt, blank).empty());
    EXPECT_EQ(blank, 1u);
}

TEST(SplitDocuments, SeparatorLinesSplitCrlfToleratedBlankOnesCounted) {
    size_t blank = 0;
    // A CRLF separator line separates; "%x" and " %" do not; the empty run after the last
    // separator and the whitespace-only one are blank.
    const std::string content = "one\r\n%\r\ntwo\n%x\n %\n%\n  \n%\nthree\n%\n";
    EXPECT_EQ(split(content, std::string("%"), blank),
              (std::vector<std::string>{"one\r\n", "two\n%x\n %\n", "three\n"}));
    EXPECT_EQ(blank, 2u);
}

TEST(ValidationCount, FloorAtLeastOneNeverAll) {
    EXPECT_EQ(zt::validation_count(0.0, 10), 0u);
    EXPECT_EQ(zt::validation_count(0.5, 1), 0u);   // one document stays in train
    EXPECT_EQ(zt::validation_count(0.05, 2), 1u);  // floor(0.1) = 0, raised to one
    EXPECT_EQ(zt::validation_count(0.3, 10), 3u);
    EXPECT_EQ(zt::validation_count(0.29, 10), 2u);  // floor
    EXPECT_EQ(zt::validation_count(0.99, 10), 9u);  // never all
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

TEST(TokenShardWriter, FixedSizeShardsTheLastShorter) {
    ScratchDir dir("prepare-writer");
    zt::TokenShardWriter w(dir.path(), "train", 3, false);
    w.append(Ids{1, 2, 3, 4, 5});
    w.append(6);
    w.append(7);
    w.finish();
    EXPECT_EQ(w.total(), 7u);
    ASSERT_EQ(w.files(), (std::vector<std::string>{dir.file("train_000000.bin"), dir.file("train_000001.bin"),
                                                   dir.file("train_000002.bin")}));
    EXPECT_EQ(zt::read_token_shard(w.files()[0], 0), (Ids{1, 2, 3}));
    EXPECT_EQ(zt::read_token_shard(w.files()[2], 0), (Ids{7}));
    EXPECT_EQ(zt::read_shard_version(w.files()[0]), zt::kShardVersionU16);

    zt::TokenShardWriter wide(dir.path(), "val", 10, true);
    wide.append(Ids{1, 2});
    wide.finish();
    EXPECT_EQ(zt::read_shard_version(dir.file("val_000000.bin")), zt::kShardVersionU32);
}

/// n examples; example e is {e, 100 + e} with the second token a target.
zt::ExampleSet numbered_examples(size_t n) {
    zt::ExampleSet set;
    for (uint32_t e = 0; e < n; ++e) set.append(Ids{e, 100 + e}, {0, 1});
    return set;
}

/// The example numbers (first tokens) of a set of numbered_examples.
Ids example_numbers(const zt::ExampleSet& set) {
    Ids out;
    for (size_t e = 0; e < set.num_examples(); ++e) out.push_back(set.tokens[set.starts[e]]);
    return out;
}

TEST(SplitExamples, FixedSeedChoiceBothKeepInputOrder) {
    zt::ExampleSet train;
    zt::ExampleSet val;
    zt::split_examples(numbered_examples(10), 0.3, train, val);
    // The choice zt-prepare has always made for 10 examples at 0.3 (it puts questions 2, 3
    // and 10 of tests/cli/test_prepare_jsonl.sh's qa.jsonl in val); a change here changes
    // every prepared fine-tuning corpus.
    EXPECT_EQ(example_numbers(val), (Ids{1, 2, 9}));
    EXPECT_EQ(example_numbers(train), (Ids{0, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(train.num_targets() + val.num_targets(), 10u);

    zt::ExampleSet none_train;
    zt::ExampleSet none_val;
    zt::split_examples(numbered_examples(1), 0.5, none_train, none_val);
    EXPECT_EQ(none_val.num_examples(), 0u);
    EXPECT_EQ(none_train.num_examples(), 1u);
}

TEST(WriteExampleShards, AtMostShardTokensAndNeverSplitsAnExample) {
    ScratchDir dir("prepare-examples");
    zt::ExampleSet set;
    for (size_t len : {3, 3, 5, 2, 8}) set.append(Ids(len, 7), std::vector<uint8_t>(len, 0));
    const std::vector<std::string> files = zt::write_example_shards(dir.path(), "val", set, 6, false);
    ASSERT_EQ(files.size(), 4u);  // {3, 3}, {5}, {2}, {8}: the 8 alone, over the limit
    EXPECT_EQ(files[0], dir.file("val_000000.bin"));
    const std::vector<size_t> want_tokens{6, 5, 2, 8};
    for (size_t i = 0; i < files.size(); ++i) {
        EXPECT_EQ(zt::read_example_shard(files[i], 0).tokens.size(), want_tokens[i]) << files[i];
    }
    EXPECT_TRUE(zt::write_example_shards(dir.path(), "train", zt::ExampleSet(), 6, false).empty());
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
