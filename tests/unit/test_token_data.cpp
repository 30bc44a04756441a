// Token shards, shard globs, the windowed dataset and the batch sampler.
//
// Covers: u16/u32 round trips, every header/size/token validation as an InputError naming
// the file, glob expansion, window counting at shard boundaries, and the sampler's
// determinism (pure function of seed and sample index, each window once per epoch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"

namespace {

using zt::test::read_file;
using zt::test::ScratchDir;
using zt::test::write_file;

using zt::test::expect_input_error;

/// A shard file built byte by byte, so tests can corrupt any field.
std::string raw_shard(int32_t magic, int32_t version, int32_t count,
                      const std::vector<uint16_t>& tokens) {
    std::vector<int32_t> header(zt::kShardHeaderInts, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    std::string out(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
    out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
    return out;
}

int32_t header_word(const std::string& path, int i) {
    const std::string bytes = read_file(path);
    int32_t v = 0;
    std::memcpy(&v, bytes.data() + static_cast<size_t>(i) * sizeof(int32_t), sizeof(v));
    return v;
}

std::vector<uint32_t> iota_tokens(size_t n, uint32_t start = 0) {
    std::vector<uint32_t> t(n);
    std::iota(t.begin(), t.end(), start);
    return t;
}

TEST(TokenShard, RoundTripU16) {
    ScratchDir dir("shard");
    const std::string path = dir.file("a.bin");
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 5000; ++i) {
        tokens.push_back((i * 7919u) % 65536u);
    }
    tokens.push_back(65535);
    zt::write_token_shard(path, tokens);
    EXPECT_EQ(read_file(path).size(), 1024 + 2 * tokens.size());
    EXPECT_EQ(header_word(path, 0), zt::kShardMagic);
    EXPECT_EQ(header_word(path, 1), zt::kShardVersionU16);
    EXPECT_EQ(header_word(path, 2), static_cast<int32_t>(tokens.size()));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(zt::read_token_shard(path, 65536), tokens);
    EXPECT_EQ(zt::read_token_shard(path, 0), tokens);  // 0 = no vocabulary check
}

TEST(TokenShard, RoundTripU32) {
    ScratchDir dir("shard");
    const std::vector<uint32_t> big = {0, 1, 65535, 65536, 100000, 4000000000u};
    zt::write_token_shard(dir.file("big.bin"), big);
    EXPECT_EQ(header_word(dir.file("big.bin"), 1), zt::kShardVersionU32);
    EXPECT_EQ(read_file(dir.file("big.bin")).size(), 1024 + 4 * big.size());
    EXPECT_EQ(zt::read_token_shard(dir.file("big.bin"), 0), big);

    // force_u32 writes version 2 even when every token would fit 16 bits.
    const std::vector<uint32_t> small = {1, 2, 3};
    zt::write_token_shard(dir.file("forced.bin"), small, /*force_u32=*/true);
    EXPECT_EQ(header_word(dir.file("forced.bin"), 1), zt::kShardVersionU32);
    EXPECT_EQ(zt::read_token_shard(dir.file("forced.bin"), 4), small);
}

TEST(TokenShard, EmptyShardIsValid) {
    ScratchDir dir("shard");
    zt::write_token_shard(dir.file("e.bin"), {});
    EXPECT_EQ(read_file(dir.file("e.bin")).size(), 1024u);
    EXPECT_TRUE(zt::read_token_shard(dir.file("e.bin"), 10).empty());
}

TEST(TokenShard, OverwriteReplacesFile) {
    ScratchDir dir("shard");
    zt::write_token_shard(dir.file("s.bin"), iota_tokens(100));
    zt::write_token_shard(dir.file("s.bin"), iota_tokens(3, 7));
    EXPECT_EQ(zt::read_token_shard(dir.file("s.bin"), 0), iota_tokens(3, 7));
}

TEST(TokenShard, RejectsBadMagic) {
    ScratchDir dir("shard");
    const std::string path = dir.file("train_000.bin");
    write_file(path, raw_shard(1234, 1, 2, {1, 2}));
    expect_input_error([&] { zt::read_token_shard(path, 0); },
                       {path, "bad magic 1234", "expected 20240520"});
}

TEST(TokenShard, RejectsBadVersion) {
    ScratchDir dir("shard");
    const std::string path = dir.file("v.bin");
    write_file(path, raw_shard(zt::kShardMagic, 4, 2, {1, 2}));
    expect_input_error([&] { zt::read_token_shard(path, 0); }, {path, "unsupported version 4"});
    // Version 3 is an example shard (examples.hpp): named as such, not as a token stream.
    write_file(path, raw_shard(zt::kShardMagic, 3, 2, {1, 2}));
    expect_input_error([&] { zt::read_token_shard(path, 0); },
                       {path, "an example shard (version 3", "not a token stream"});
    write_file(path, raw_shard(zt::kShardMagic, 0, 2, {1, 2}));
    expect_input_error([&] { zt::read_token_shard(path, 0); }, {path, "version 0"});
}

TEST(TokenShard, RejectsTruncatedFile) {
    ScratchDir dir("shard");
    const std::string path = dir.file("t.bin");
    write_file(path, raw_shard(zt::kShardMagic, 1, 10, {1, 2, 3, 4, 5}));
    expect_input_error([&] { zt::read_token_shard(path, 0); }, {path, "truncated", "10 tokens"});
    // Shorter than the header itself.
    write_file(path, std::string(100, 'x'));
    expect_input_error([&] { zt::read_token_shard(path, 0); },
                       {path, "100 bytes", "1024-byte header"});
}

TEST(TokenShard, RejectsTrailingBytes) {
    ScratchDir dir("shard");
    const std::string path = dir.file("t.bin");
    write_file(path, raw_shard(zt::kShardMagic, 1, 5, {1, 2, 3, 4, 5, 6}));
    expect_input_error([&] { zt::read_token_shard(path, 0); },
                       {path, "2 trailing bytes", "5 tokens"});
    // One odd byte too many, too.
    write_file(path, raw_shard(zt::kShardMagic, 1, 5, {1, 2, 3, 4, 5}) + "x");
    expect_input_error([&] { zt::read_token_shard(path, 0); }, {path, "1 trailing bytes"});
}

TEST(TokenShard, RejectsHostileCountWithoutAllocating) {
    ScratchDir dir("shard");
    const std::string path = dir.file("h.bin");
    // A count of 2^31-1 must be rejected from the file size, not by trying to allocate.
    write_file(path, raw_shard(zt::kShardMagic, 2, 0x7FFFFFFF, {1, 2}));
    expect_input_error([&] { zt::read_token_shard(path, 0); }, {path, "truncated"});
    write_file(path, raw_shard(zt::kShardMagic, 1, -5, {}));
    expect_input_error([&] { zt::read_token_shard(path, 0); }, {path, "negative token count -5"});
}

TEST(TokenShard, RejectsTokenOutsideVocabulary) {
    ScratchDir dir("shard");
    const std::string path = dir.file("o.bin");
    zt::write_token_shard(path, {1, 2, 300, 4});
    expect_input_error([&] { zt::read_token_shard(path, 257); },
                       {path, "token 300 at position 2", "vocab_size 257"});
    EXPECT_EQ(zt::read_token_shard(path, 301).size(), 4u);
}

TEST(TokenShard, RejectsEmptyMissingAndFolder) {
    ScratchDir dir("shard");
    const std::string empty = dir.file("empty.bin");
    write_file(empty, "");
    expect_input_error([&] { zt::read_token_shard(empty, 0); }, {empty, "empty file"});
    const std::string missing = dir.file("missing.bin");
    expect_input_error([&] { zt::read_token_shard(missing, 0); }, {missing, "no such file"});
    expect_input_error([&] { zt::read_token_shard(dir.path(), 0); },
                       {dir.path(), "is a directory"});
}

TEST(ShardGlob, ExpandsSortedAndRejectsNoMatch) {
    ScratchDir dir("glob");
    for (const char* name : {"train_002.bin", "train_000.bin", "train_001.bin", "val_000.bin"}) {
        zt::write_token_shard(dir.file(name), {1});
    }
    const std::vector<std::string> files =
        zt::expand_shard_glob(dir.file("train_*.bin"), "data.train");
    ASSERT_EQ(files.size(), 3u);
    EXPECT_EQ(files[0], dir.file("train_000.bin"));
    EXPECT_EQ(files[1], dir.file("train_001.bin"));
    EXPECT_EQ(files[2], dir.file("train_002.bin"));
    // A plain name without wildcards matches itself when it exists.
    EXPECT_EQ(zt::expand_shard_glob(dir.file("val_000.bin"), "data.val"),
              std::vector<std::string>{dir.file("val_000.bin")});

    const std::string pattern = dir.file("test_*.bin");
    expect_input_error([&] { zt::expand_shard_glob(pattern, "data.train"); },
                       {"data.train: no file matches '" + pattern + "'"});
    expect_input_error([&] { zt::expand_shard_glob(dir.file("val_009.bin"), "data.val"); },
                       {"data.val", "val_009.bin"});
    expect_input_error([&] { zt::expand_shard_glob("", "data.val"); }, {"data.val"});
}

TEST(TokenDataset, CountsWindowsPerShard) {
    ScratchDir dir("ds");
    // seq_len 3: a shard of n tokens holds (n - 1) / 3 windows of 4 tokens at stride 3.
    zt::write_token_shard(dir.file("s_0.bin"), iota_tokens(10, 0));   // 3 windows
    zt::write_token_shard(dir.file("s_1.bin"), iota_tokens(4, 100));  // 1 window
    zt::write_token_shard(dir.file("s_2.bin"), iota_tokens(3, 200));  // 0 windows
    zt::TokenDataset data(dir.file("s_*.bin"), "data.train", 1000, 3);
    EXPECT_EQ(data.files().size(), 3u);
    EXPECT_EQ(data.num_tokens(), 17u);
    ASSERT_EQ(data.num_windows(), 4u);
    EXPECT_EQ(data.seq_len(), 3);

    int32_t in[3];
    int32_t tg[3];
    const auto check = [&](size_t w, std::vector<int32_t> exp_in, std::vector<int32_t> exp_tg) {
        data.window(w, in, tg);
        EXPECT_EQ(std::vector<int32_t>(in, in + 3), exp_in) << "window " << w;
        EXPECT_EQ(std::vector<int32_t>(tg, tg + 3), exp_tg) << "window " << w;
    };
    check(0, {0, 1, 2}, {1, 2, 3});
    check(1, {3, 4, 5}, {4, 5, 6});  // shares token 3 with window 0's last target
    check(2, {6, 7, 8}, {7, 8, 9});
    check(3, {100, 101, 102}, {101, 102, 103});  // never crosses from s_0 into s_1
}

TEST(TokenDataset, WindowsNeverCrossShards) {
    ScratchDir dir("ds");
    // 5 + 5 tokens would hold 3 windows of 4 if concatenated, but 1 per shard here.
    zt::write_token_shard(dir.file("a_0.bin"), iota_tokens(5));
    zt::write_token_shard(dir.file("a_1.bin"), iota_tokens(5, 10));
    zt::TokenDataset data(dir.file("a_*.bin"), "data.train", 0, 3);
    EXPECT_EQ(data.num_windows(), 2u);
}

TEST(TokenDataset, ZeroWindowsIsAnInputError) {
    ScratchDir dir("ds");
    zt::write_token_shard(dir.file("v.bin"), iota_tokens(64));
    expect_input_error([&] { zt::TokenDataset(dir.file("v.bin"), "data.val", 1000, 64); },
                       {"data.val", "64 tokens", "seq_len+1 = 65"});
    // Validation errors from the shards propagate with the config key, then the file name.
    expect_input_error([&] { zt::TokenDataset(dir.file("v.bin"), "data.val", 10, 4); },
                       {"data.val: " + dir.file("v.bin") + ": token 10 at position 10", "vocab_size 10"});
    // Also for one file of several a glob matched: the key first, then that file.
    zt::write_token_shard(dir.file("t_0.bin"), iota_tokens(64));
    const std::string bad = dir.file("t_1.bin");
    write_file(bad, raw_shard(1234, 1, 2, {1, 2}));
    expect_input_error([&] { zt::TokenDataset(dir.file("t_*.bin"), "data.train", 1000, 4); },
                       {"data.train: " + bad + ": bad magic 1234", "expected 20240520"});
}

class SamplerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        // 37 windows (a prime, so no accidental structure) of seq_len 4.
        zt::write_token_shard(m_dir.file("d.bin"), iota_tokens(37 * 4 + 1));
        m_data = std::make_unique<zt::TokenDataset>(m_dir.file("d.bin"), "data.train", 0, 4);
        ASSERT_EQ(m_data->num_windows(), 37u);
    }
    std::vector<size_t> order(uint64_t seed, bool shuffle, uint64_t first, uint64_t count) const {
        zt::BatchSampler s(*m_data, seed, shuffle);
        std::vector<size_t> out;
        for (uint64_t g = first; g < first + count; ++g) {
            out.push_back(s.window_of(g));
        }
        return out;
    }
    ScratchDir m_dir{"sampler"};
    std::unique_ptr<zt::TokenDataset> m_data;
};

TEST_F(SamplerTest, SameSeedSameOrder) {
    EXPECT_EQ(order(42, true, 0, 200), order(42, true, 0, 200));
    // A pure function of g: asking out of order (another epoch first) changes nothing.
    zt::BatchSampler s(*m_data, 42, true);
    const std::vector<size_t> seq = order(42, true, 0, 200);
    for (uint64_t g : {150u, 3u, 80u, 3u, 199u, 0u, 37u, 36u}) {
        EXPECT_EQ(s.window_of(g), seq[g]) << "g=" << g;
    }
}

TEST_F(SamplerTest, DifferentSeedsDiffer) {
    EXPECT_NE(order(42, true, 0, 37), order(43, true, 0, 37));
    // Consecutive epochs use different permutations too.
    EXPECT_NE(order(42, true, 0, 37), order(42, true, 37, 37));
}

TEST_F(SamplerTest, EveryWindowOncePerEpoch) {
    for (uint64_t seed : {0ull, 1ull, 1234567ull}) {
        for (uint64_t epoch = 0; epoch < 4; ++epoch) {
            std::vector<size_t> seen = order(seed, true, epoch * 37, 37);
            std::sort(seen.begin(), seen.end());
            std::vector<size_t> all(37);
            std::iota(all.begin(), all.end(), 0u);
            EXPECT_EQ(seen, all) << "seed " << seed << " epoch " << epoch;
        }
    }
}

TEST_F(SamplerTest, NoShuffleIsIdentity) {
    const std::vector<size_t> got = order(42, false, 30, 20);
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], (30 + i) % 37);
    }
}

TEST_F(SamplerTest, FillMatchesWindows) {
    zt::BatchSampler s(*m_data, 7, true);
    const int count = 12;
    const uint64_t first = 30;  // crosses the epoch boundary at 37
    std::vector<int32_t> in(static_cast<size_t>(count) * 4);
    std::vector<int32_t> tg(in.size());
    s.fill(first, count, in.data(), tg.data());
    for (int j = 0; j < count; ++j) {
        int32_t win[4];
        int32_t wtg[4];
        m_data->window(s.window_of(first + static_cast<uint64_t>(j)), win, wtg);
        for (int t = 0; t < 4; ++t) {
            EXPECT_EQ(in[static_cast<size_t>(j * 4 + t)], win[t]);
            EXPECT_EQ(tg[static_cast<size_t>(j * 4 + t)], wtg[t]);
            EXPECT_EQ(tg[static_cast<size_t>(j * 4 + t)], in[static_cast<size_t>(j * 4 + t)] + 1);
        }
    }
}

TEST(Sampler, SingleWindowDataset) {
    ScratchDir dir("sampler1");
    zt::write_token_shard(dir.file("one.bin"), iota_tokens(5));
    zt::TokenDataset data(dir.file("one.bin"), "data.val", 0, 4);
    zt::BatchSampler s(data, 1, true);
    EXPECT_EQ(s.window_of(0), 0u);
    EXPECT_EQ(s.window_of(1000), 0u);
    EXPECT_EQ(s.window_of(UINT64_MAX), 0u);
}

}  // namespace
