// Blends of pretraining corpora (data/blend.hpp) and their checkpoint cursor
// (train/blend_cursor.hpp).
//
// Covers: the weighted list's parsing (normalisation, every bad weight named), the
// proportions of 10,000 windows drawn (and of every 100 consecutive ones), each corpus's own
// epochs, one corpus = the single-corpus order exactly, and the cursor: a resume with the
// same weights takes the checkpoint's origin, one with other weights continues each corpus
// where it stopped.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/train/blend_cursor.hpp"

namespace {

using zt::test::expect_input_error;
using zt::test::ScratchDir;

constexpr int kSeqLen = 4;

/// Corpus c's shard: tokens 1000 c, 1000 c + 1, ... (n of them), so a window's first token
/// names its corpus (token / 1000) and its window ((token % 1000) / seq_len).
void write_corpus(const ScratchDir& dir, int c, size_t n) {
    std::vector<uint32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(1000 * c + static_cast<int>(i));
    zt::write_token_shard(dir.file("c" + std::to_string(c) + ".bin"), tokens);
}

std::string corpus_list(const ScratchDir& dir, const std::vector<std::string>& weights) {
    std::string out;
    for (size_t c = 0; c < weights.size(); ++c) {
        out += (c ? ", " : "") + dir.file("c" + std::to_string(c) + ".bin") + ":" + weights[c];
    }
    return out;
}

/// The first input token of each of `n` samples from global sample `first`.
std::vector<int32_t> first_tokens(const zt::BlendSampler& s, uint64_t first, int n) {
    std::vector<int32_t> in(static_cast<size_t>(n) * kSeqLen), tg(in.size()), out;
    s.fill(first, n, in.data(), tg.data());
    for (int j = 0; j < n; ++j) out.push_back(in[static_cast<size_t>(j) * kSeqLen]);
    return out;
}

TEST(CorpusList, APlainGlobIsOneUnweightedCorpus) {
    const zt::CorpusList l = zt::parse_corpus_list("data/train_*.bin", "data.train");
    ASSERT_EQ(l.corpora.size(), 1u);
    EXPECT_FALSE(l.weighted);
    EXPECT_EQ(l.corpora[0].pattern, "data/train_*.bin");
    EXPECT_EQ(l.corpora[0].weight, 1.0);
}

TEST(CorpusList, WeightsAreReadAndNormalisedWithANote) {
    const zt::CorpusList a = zt::parse_corpus_list("web/*.bin:0.7, code/*.bin:0.2,math/*.bin:0.1", "data.train");
    ASSERT_EQ(a.corpora.size(), 3u);
    EXPECT_TRUE(a.weighted);
    EXPECT_EQ(a.corpora[1].pattern, "code/*.bin");
    EXPECT_NEAR(a.corpora[0].weight, 0.7, 1e-15);
    EXPECT_EQ(a.note, "") << "weights summing to 1 need no note";
    const zt::CorpusList b = zt::parse_corpus_list("web/*.bin:2, code/*.bin:1, math/*.bin:1", "data.train");
    EXPECT_NEAR(b.corpora[0].weight, 0.5, 1e-15);
    EXPECT_NEAR(b.corpora[2].weight, 0.25, 1e-15);
    EXPECT_NE(b.note.find("data.train: the weights sum to 4, not 1: normalised to web/*.bin:0.5"), std::string::npos)
        << b.note;
}

TEST(CorpusList, EveryBadWeightIsNamed) {
    const auto parse = [](const std::string& text) { return [text] { zt::parse_corpus_list(text, "data.train"); }; };
    expect_input_error(parse("a/*.bin:0.8, b/*.bin:-0.2"), {"data.train: weight -0.2 of corpus 'b/*.bin' is negative"});
    expect_input_error(parse("a/*.bin:0.5, b/*.bin:0.5x"), {"data.train: weight '0.5x' of corpus 'b/*.bin' is not a number"});
    expect_input_error(parse("a/*.bin:0.5, b/*.bin:nan"), {"weight 'nan' of corpus 'b/*.bin' is not a number"});
    expect_input_error(parse("a/*.bin:1, b/*.bin:0"), {"weight 0 of corpus 'b/*.bin' is 0: it would never be drawn"});
    expect_input_error(parse("a/*.bin:1, b/*.bin"), {"corpus 'b/*.bin' has no weight"});
    expect_input_error(parse("a/*.bin:1, , b/*.bin:1"), {"an empty corpus in the list"});
    expect_input_error(parse("a/*.bin:1, a/*.bin:2"), {"corpus 'a/*.bin' is listed twice"});
    expect_input_error(parse("a/*.bin:oops"), {"weight 'oops' of corpus 'a/*.bin' is not a number"});
}

TEST(CorpusList, FirstPatternSkipsTheWeight) {
    EXPECT_EQ(zt::first_corpus_pattern("web/t_*.bin:0.7, code/t_*.bin:0.3"), "web/t_*.bin");
    EXPECT_EQ(zt::first_corpus_pattern("data/train_*.bin"), "data/train_*.bin");
}

TEST(BlendSchedule, TenThousandWindowsComeInTheWeightsProportions) {
    const std::vector<double> w{0.7, 0.2, 0.1};
    const zt::BlendSchedule s(w, 1337);
    std::vector<uint64_t> tally(3, 0);
    for (uint64_t i = 0; i < 10000; ++i) {
        const zt::BlendSchedule::Draw d = s.draw(i);
        // The k-th draw of a corpus is its draw k: no window skipped or taken twice.
        ASSERT_EQ(d.index, tally[d.corpus]) << "sample " << i;
        ++tally[d.corpus];
        if ((i + 1) % 100 == 0) {
            ASSERT_EQ(s.counts(i + 1), tally) << "counts after " << i + 1;
        }
    }
    for (size_t c = 0; c < 3; ++c) {
        // Random draws would be within ~3 sigma = 3 sqrt(n w (1 - w)) (41 for 0.7); the
        // interleaving is within the number of corpora.
        EXPECT_NEAR(static_cast<double>(tally[c]), 10000 * w[c], 3.0) << "corpus " << c;
    }
    // Every global batch of 100 is mixed in the same proportions.
    for (uint64_t b = 0; b < 100; ++b) {
        const std::vector<uint64_t> lo = s.counts(b * 100), hi = s.counts(b * 100 + 100);
        for (size_t c = 0; c < 3; ++c) EXPECT_NEAR(static_cast<double>(hi[c] - lo[c]), 100 * w[c], 3.0);
    }
}

TEST(BlendSampler, WindowsFollowTheWeightsAndEachCorpusItsOwnEpochs) {
    ScratchDir dir("blend");
    const std::vector<size_t> sizes{401, 161, 81};  // 100, 40, 20 windows
    for (int c = 0; c < 3; ++c) write_corpus(dir, c, sizes[static_cast<size_t>(c)]);
    const zt::TokenCorpora corpora(zt::parse_corpus_list(corpus_list(dir, {"0.7", "0.2", "0.1"}), "data.train"),
                                   "data.train", 0, kSeqLen);
    const zt::BlendSampler s(corpora, 7, true);
    const std::vector<int32_t> firsts = first_tokens(s, 0, 10000);
    std::vector<std::vector<int32_t>> seen(3);
    for (int32_t t : firsts) seen[static_cast<size_t>(t / 1000)].push_back((t % 1000) / kSeqLen);
    EXPECT_NEAR(static_cast<double>(seen[0].size()), 7000, 3.0);
    EXPECT_NEAR(static_cast<double>(seen[1].size()), 2000, 3.0);
    EXPECT_NEAR(static_cast<double>(seen[2].size()), 1000, 3.0);
    for (size_t c = 0; c < 3; ++c) {
        const size_t n = corpora.dataset(c).num_windows();
        // Each epoch of a corpus visits each of its windows once.
        for (size_t e = 0; (e + 1) * n <= seen[c].size(); ++e) {
            const std::set<int32_t> epoch(seen[c].begin() + static_cast<long>(e * n),
                                          seen[c].begin() + static_cast<long>((e + 1) * n));
            ASSERT_EQ(epoch.size(), n) << "corpus " << c << " epoch " << e;
        }
    }
}

TEST(BlendSampler, OneCorpusIsTheSingleCorpusOrder) {
    ScratchDir dir("blend1");
    write_corpus(dir, 0, 401);
    for (const std::string& spec : {dir.file("c0.bin"), dir.file("c0.bin") + ":1"}) {
        const zt::TokenCorpora corpora(zt::parse_corpus_list(spec, "data.train"), "data.train", 0, kSeqLen);
        const zt::BlendSampler blend(corpora, 1337, true);
        const zt::BatchSampler single(corpora.dataset(0), 1337, true);
        for (uint64_t g = 0; g < 1000; ++g) {
            ASSERT_EQ(first_tokens(blend, g, 1)[0], static_cast<int32_t>(single.window_of(g) * kSeqLen))
                << spec << ", sample " << g;
        }
    }
}

/// A checkpoint at `samples_seen` of `sampler`, as the saver records it.
zt::CheckpointRecord checkpoint_of(const zt::TokenCorpora& corpora, const zt::BlendSampler& sampler,
                                   uint64_t samples_seen) {
    zt::CheckpointRecord r;
    r.progress.samples_seen = samples_seen;
    r.blend = zt::blend_record(corpora, sampler, samples_seen);
    return r;
}

TEST(BlendCursor, SameWeightsResumeExactlyOtherWeightsContinueEachCorpus) {
    ScratchDir dir("blendcur");
    write_corpus(dir, 0, 401);
    write_corpus(dir, 1, 161);
    const zt::TokenCorpora was(zt::parse_corpus_list(corpus_list(dir, {"0.7", "0.3"}), "data.train"), "data.train", 0,
                               kSeqLen);
    const zt::BlendSampler before(was, 5, true);
    const zt::CheckpointRecord ckpt = checkpoint_of(was, before, 300);
    ASSERT_TRUE(ckpt.blend.is_object());
    EXPECT_EQ(ckpt.blend["corpora"][0]["drawn"].get<uint64_t>() + ckpt.blend["corpora"][1]["drawn"].get<uint64_t>(),
              300u);

    zt::BlendSampler same(was, 5, true);
    EXPECT_EQ(zt::resume_blend(ckpt, was, same), "");
    EXPECT_EQ(first_tokens(same, 300, 200), first_tokens(before, 300, 200)) << "a resume continues exactly";

    const zt::TokenCorpora now(zt::parse_corpus_list(corpus_list(dir, {"0.2", "0.8"}), "data.train"), "data.train", 0,
                               kSeqLen);
    zt::BlendSampler other(now, 5, true);
    const std::string note = zt::resume_blend(ckpt, now, other);
    EXPECT_NE(note.find("the blend differs from the checkpoint's"), std::string::npos) << note;
    EXPECT_EQ(other.cursor().origin, 300u);
    // Corpus 0 goes on with its draw number drawn_0(300), in its own order.
    const uint64_t drawn0 = ckpt.blend["corpora"][0]["drawn"].get<uint64_t>();
    const zt::BatchSampler order0(was.dataset(0), zt::corpus_seed(5, 0), true);
    uint64_t k = drawn0;
    for (int32_t t : first_tokens(other, 300, 500)) {
        if (t / 1000 == 0) {
            ASSERT_EQ(t, static_cast<int32_t>(order0.window_of(k) * kSeqLen)) << "draw " << k;
            ++k;
        }
    }
    EXPECT_NEAR(static_cast<double>(k - drawn0), 100, 2.0) << "0.2 of 500 samples";
    // Its checkpoints now record the new origin, and a resume from them is exact.
    const zt::CheckpointRecord later = checkpoint_of(now, other, 800);
    zt::BlendSampler again(now, 5, true);
    EXPECT_EQ(zt::resume_blend(later, now, again), "");
    EXPECT_EQ(first_tokens(again, 800, 100), first_tokens(other, 800, 100));
}

TEST(BlendCursor, OneCorpusWithoutWeightsHasNoRecord) {
    ScratchDir dir("blendnone");
    write_corpus(dir, 0, 401);
    const zt::TokenCorpora one(zt::parse_corpus_list(dir.file("c0.bin"), "data.train"), "data.train", 0, kSeqLen);
    const zt::BlendSampler s(one, 1, true);
    EXPECT_TRUE(zt::blend_record(one, s, 40).is_null());
    EXPECT_TRUE(zt::tokens_by_corpus(one, s, 40).empty());
}

}  // namespace
