// Multiple-choice evaluation: the three scoring rules on hand-made numbers and logits, the
// rows (context + ending, left truncation, targets on the ending only), the task readers
// (JSON Lines, llm.c's binary format, bad files), padding that leaves scores unchanged, and a
// repeated ending that ties exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/choice_eval.hpp"

namespace zt {
namespace {

const std::string kTinyTask = std::string(ZT_SOURCE_DIR) + "/inputs/tasks/tiny_choice.jsonl";

// Three endings where each rule picks a different one:
//   loglik  tokens chars   loglik/chars  loglik/tokens
//   -10     5      10      -1.0          -2.0   <- acc_token
//   -12     3      40      -0.3  <- norm -4.0
//   -9      1      3       -3.0          -9.0   (acc: the largest loglik)
const std::vector<EndingScore> kDisagreeing = {{-10, 5, 10}, {-12, 3, 40}, {-9, 1, 3}};

TEST(ChoiceScoring, EachRulePicksItsOwnEnding) {
    for (int label = 0; label < 3; ++label) {
        ChoiceCounts c;
        score_example(kDisagreeing, label, c);
        EXPECT_EQ(c.n, 1);
        EXPECT_EQ(c.acc, label == 2 ? 1 : 0) << label;
        EXPECT_EQ(c.acc_norm, label == 1 ? 1 : 0) << label;
        EXPECT_EQ(c.acc_token, label == 0 ? 1 : 0) << label;
    }
}

TEST(ChoiceScoring, TiesGoToTheFirstEnding) {
    const std::vector<EndingScore> tie = {{-4, 2, 8}, {-4, 2, 8}};
    ChoiceCounts first, second;
    score_example(tie, 0, first);
    score_example(tie, 1, second);
    EXPECT_EQ(first.acc + first.acc_norm + first.acc_token, 3);
    EXPECT_EQ(second.acc + second.acc_norm + second.acc_token, 0);
}

ChoiceExample example(std::vector<uint32_t> ctx, std::vector<std::vector<uint32_t>> endings, int label) {
    ChoiceExample ex;
    ex.context = std::move(ctx);
    ex.endings = std::move(endings);
    for (const auto& e : ex.endings) ex.ending_chars.push_back(static_cast<int>(e.size()) + 1);
    ex.label = label;
    return ex;
}

TEST(ChoiceRows, TargetsCoverTheEndingOnly) {
    const ChoiceExample ex = example({1, 2, 3}, {{4, 5}, {6}}, 0);
    const ChoiceRow r = choice_row(ex, 0, 16, 9);
    EXPECT_EQ(r.inputs, (std::vector<int32_t>{1, 2, 3, 4}));
    EXPECT_EQ(r.targets, (std::vector<int32_t>{-1, -1, 4, 5}));
    EXPECT_EQ(r.scored, 2);
}

TEST(ChoiceRows, LongExamplesLoseContextFromTheLeft) {
    const ChoiceExample ex = example({1, 2, 3, 4, 5, 6}, {{7, 8}}, 0);
    const ChoiceRow r = choice_row(ex, 0, 4, 9);  // at most seq_len + 1 = 5 tokens: 4 5 6 7 8
    EXPECT_EQ(r.inputs, (std::vector<int32_t>{4, 5, 6, 7}));
    EXPECT_EQ(r.targets, (std::vector<int32_t>{-1, -1, 7, 8}));
    // An ending longer than the window keeps its last tokens, each predicted by the one before.
    const ChoiceRow l = choice_row(example({1}, {{2, 3, 4, 5, 6}}, 0), 0, 3, 9);
    EXPECT_EQ(l.inputs, (std::vector<int32_t>{3, 4, 5}));
    EXPECT_EQ(l.targets, (std::vector<int32_t>{4, 5, 6}));
}

TEST(ChoiceRows, AnEmptyContextStartsFromBos) {
    const ChoiceRow r = choice_row(example({}, {{4, 5}}, 0), 0, 8, 9);
    EXPECT_EQ(r.inputs, (std::vector<int32_t>{9, 4}));
    EXPECT_EQ(r.targets, (std::vector<int32_t>{4, 5}));
}

// Hand-made logits through the backend's cross-entropy: the summed log-likelihood of the
// ending's tokens is the float64 log-softmax of the logits at the ending's positions.
TEST(ChoiceScoring, LoglikFromHandMadeLogits) {
    const int V = 5;
    const int Vp = 8;
    const ChoiceExample ex = example({0, 1}, {{2, 3}, {4, 4}}, 1);
    auto backend = make_cpu_backend(1);
    std::vector<EndingScore> scores;
    for (int k = 0; k < 2; ++k) {
        const ChoiceRow row = choice_row(ex, k, 8, 0);
        const int T = static_cast<int>(row.inputs.size());
        std::vector<float> logits(static_cast<size_t>(T) * Vp, 0.f);
        double expected = 0;
        for (int t = 0; t < T; ++t) {
            for (int v = 0; v < V; ++v) logits[static_cast<size_t>(t * Vp + v)] = 0.5f * static_cast<float>((t * 3 + v * (k + 2)) % 7) - 1.f;
            if (row.targets[static_cast<size_t>(t)] < 0) continue;
            double z = 0;
            for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits[static_cast<size_t>(t * Vp + v)]));
            expected += static_cast<double>(logits[static_cast<size_t>(t * Vp + row.targets[static_cast<size_t>(t)])]) - std::log(z);
        }
        std::vector<float> losses(static_cast<size_t>(T));
        backend->softmax_cross_entropy(losses.data(), logits.data(), row.targets.data(), T, V, Vp, 0.f);
        const double got = row_loglik(row, losses.data());
        EXPECT_NEAR(got, expected, 1e-5) << "ending " << k;
        scores.push_back({got, row.scored, ex.ending_chars[static_cast<size_t>(k)]});
    }
    ChoiceCounts c;
    score_example(scores, ex.label, c);
    const bool second_wins = scores[1].loglik > scores[0].loglik;
    EXPECT_EQ(c.acc, second_wins ? 1 : 0);
}

TEST(ChoiceTaskFile, ReadsHellaSwagLinesWithTheHarnessContext) {
    auto tok = make_byte_tokenizer();
    const ChoiceTask task = read_choice_task(kTinyTask, *tok);
    EXPECT_EQ(task.name, "tiny_choice");
    ASSERT_EQ(task.examples.size(), 32u);
    const ChoiceExample& e = task.examples[0];
    EXPECT_EQ(tok->decode(e.context), "Making tea: A man fills a kettle with water and puts it on the stove. He");
    ASSERT_EQ(e.endings.size(), 4u);
    EXPECT_EQ(tok->decode(e.endings[0]), " throws the kettle out of the window and starts to dance.");
    EXPECT_EQ(e.ending_chars[0], static_cast<int>(e.endings[0].size()) - 1);  // bytes, less the space
    EXPECT_EQ(e.label, 3);
}

TEST(ChoiceTaskFile, HarnessPreprocessing) {
    // As Python computes it: one replace("  ", " ") pass leaves two of three spaces.
    EXPECT_EQ(hellaswag_preprocess("  How to [title] Cook rice [step]  well. "), "How to. Cook rice  well.");
    EXPECT_EQ(utf8_length(" caf\xC3\xA9"), 5);
}

TEST(ChoiceTaskFile, PlainCtxAndStringLabels) {
    test::ScratchDir dir("choice_plain");
    const std::string f = dir.path() + "/plain.jsonl";
    // A context's trailing spaces move to the ending: "ab " + " d" is "ab" then "  d".
    test::write_file(f, "{\"ctx\": \"ab \", \"endings\": [\"c\", \"d\"], \"label\": \"1\"}\n\n");
    auto tok = make_byte_tokenizer();
    const ChoiceTask task = read_choice_task(f, *tok);
    ASSERT_EQ(task.examples.size(), 1u);
    EXPECT_EQ(task.examples[0].context, (std::vector<uint32_t>{'a', 'b'}));
    EXPECT_EQ(task.examples[0].endings[1], (std::vector<uint32_t>{' ', ' ', 'd'}));
    EXPECT_EQ(task.examples[0].ending_chars[1], 1);
    EXPECT_EQ(task.examples[0].label, 1);
}

TEST(ChoiceTaskFile, BadFilesNameTheFileAndLine) {
    test::ScratchDir dir("choice_bad");
    auto tok = make_byte_tokenizer();
    const std::string f = dir.path() + "/bad.jsonl";
    const std::string good = "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {good + "{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0\n", "line 2: not valid JSON"},
        {good + "{\"ctx\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n", "line 2: field 'endings'"},
        {"{\"endings\": [\"b\", \"c\"], \"label\": 0}\n", "line 1: field 'ctx' missing"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n", "line 1: label 2 is not an index"},
        {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"]}\n", "line 1: field 'label' missing"},
        {"\n", "no examples"},
    };
    for (const auto& [text, part] : cases) {
        test::write_file(f, text);
        test::expect_input_error([&] { read_choice_task(f, *tok); }, {"eval task file '" + f + "'", part});
    }
    test::expect_input_error([&] { read_choice_task(dir.path() + "/none.jsonl", *tok); }, {"none.jsonl", "no such file"});
}

void write_llmc(const std::string& path, const std::vector<uint16_t>& words, int examples) {
    int32_t header[256] = {};
    header[0] = 20240522;
    header[1] = 1;
    header[2] = examples;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(words.size() * 2));
}

TEST(ChoiceTaskFile, ReadsLlmcBinaryFormat) {
    test::ScratchDir dir("choice_llmc");
    auto tok = make_byte_tokenizer();
    const std::string f = dir.path() + "/task.bin";
    // One example: label 1, two endings; context "hi", endings " a" and " bc".
    write_llmc(f, {65535, 30, 0, 1, 2, 2, 'h', 'i', 2, ' ', 'a', 3, ' ', 'b', 'c'}, 1);
    const ChoiceTask task = read_choice_task(f, *tok);
    ASSERT_EQ(task.examples.size(), 1u);
    EXPECT_EQ(task.examples[0].label, 1);
    EXPECT_EQ(task.examples[0].context, (std::vector<uint32_t>{'h', 'i'}));
    EXPECT_EQ(task.examples[0].ending_chars, (std::vector<int>{1, 2}));  // "a", "bc": no leading space
    write_llmc(f, {65535, 30, 0, 1, 2, 2, 'h', 'i', 2, ' '}, 1);
    test::expect_input_error([&] { read_choice_task(f, *tok); }, {"example 0", "the file ends inside it"});
}

// Rows that share a batch are padded to the longest; the scores are those of each row alone.
TEST(ChoiceEvaluation, PaddingLeavesScoresUnchanged) {
    auto tok = make_byte_tokenizer();
    const ChoiceTask task = read_choice_task(kTinyTask, *tok);
    const ModelConfig mc = test::model_config(2, 2, 32, 96, 257);
    auto backend = make_cpu_backend(1);
    Transformer alone(mc, *backend, 1);
    Transformer batched(mc, *backend, 8);
    ModelState state(alone.layout(), *backend, 7);
    ChoiceEvaluator one(alone, state, self_communicator(), 1, tok->eot());
    ChoiceEvaluator eight(batched, state, self_communicator(), 8, tok->eot());
    const auto a = one.score_examples(task, 0, 6);
    const auto b = eight.score_examples(task, 0, 6);
    for (size_t i = 0; i < a.size(); ++i) {
        for (size_t k = 0; k < a[i].size(); ++k) {
            EXPECT_NEAR(a[i][k].loglik, b[i][k].loglik, 1e-4 * std::abs(a[i][k].loglik)) << i << " " << k;
            EXPECT_EQ(a[i][k].tokens, b[i][k].tokens);
            EXPECT_GT(a[i][k].tokens, 0);
        }
    }
}

// A repeated ending is scored once, so the two tie exactly and the first counts, even where a
// forward's rounding depends on a row's place in its batch (here: a loss that falls with it,
// which would favour the later copy whenever they sit in one batch).
TEST(ChoiceEvaluation, ARepeatedEndingTiesWhereverItsRowsFall) {
    std::vector<float> losses;
    const PositionLosses by_place = [&losses](const int32_t*, const int32_t*, int B, int T) {
        losses.resize(static_cast<size_t>(B) * static_cast<size_t>(T));
        for (size_t i = 0; i < losses.size(); ++i) losses[i] = 1.f - 0.001f * static_cast<float>(i / static_cast<size_t>(T));
        return losses.data();
    };
    ChoiceTask task;
    task.examples = {example({1, 2}, {{3}, {5, 6, 7}, {3}}, 2)};  // the label is the repeat
    for (int batch : {1, 2, 3}) {
        ChoiceEvaluator ev(by_place, 16, self_communicator(), batch, 9);
        std::vector<std::vector<EndingScore>> items;
        const ChoiceCounts c = ev.evaluate(task, 0, &items);
        ASSERT_EQ(items.size(), 1u);
        EXPECT_EQ(items[0][0].loglik, items[0][2].loglik) << "batch " << batch;
        EXPECT_EQ(items[0][0].tokens, items[0][2].tokens) << "batch " << batch;
        EXPECT_EQ(c.acc + c.acc_norm + c.acc_token, 0) << "batch " << batch << ": the first of a tie counts";
    }
}

// The inference path's scores (context once, endings as branches over the cache) against the
// batched forward's, row by row: the tiny task, plus examples that exercise every way a row
// can be cut: an empty context, a one-token ending, endings sharing their first tokens, a
// repeated ending, and rows longer than the window (cut from the left, so that two endings'
// rows no longer share their start), at 1, 3 and 8 branches per forward.
void expect_cached_scores_match(const ModelConfig& mc) {
    auto tok = make_byte_tokenizer();
    ChoiceTask task = read_choice_task(kTinyTask, *tok);
    task.examples.resize(4);
    std::vector<uint32_t> long_ctx;
    for (uint32_t t = 0; t < 20; ++t) long_ctx.push_back('A' + t);
    task.examples.push_back(example({}, {{'a', 'b'}, {'c'}}, 0));
    task.examples.push_back(example({'h', 'i'}, {{'z'}, {'q', 'r', 's'}, {'q', 'r', 't', 'u'}, {'z'}}, 3));
    task.examples.push_back(example(long_ctx, {{'a'}, {'b', 'c', 'd', 'e', 'f', 'g', 'h'}, {'i', 'j'}}, 1));
    task.examples.push_back(example({'k'}, {std::vector<uint32_t>(30, 'm'), {'n'}}, 0));
    // Byte tokens folded into the model's vocabulary (Llama's is 37).
    for (ChoiceExample& ex : task.examples) {
        for (uint32_t& t : ex.context) t %= static_cast<uint32_t>(mc.vocab_size - 1);
        for (auto& e : ex.endings)
            for (uint32_t& t : e) t %= static_cast<uint32_t>(mc.vocab_size - 1);
    }
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 7);
    ChoiceEvaluator batched(model, state, self_communicator(), 1, tok->eot() % static_cast<uint32_t>(mc.vocab_size));
    const auto want = batched.score_examples(task, 0, static_cast<long>(task.examples.size()));
    const ChoiceExtents ext = choice_extents(task, 0, mc.seq_len, tok->eot());
    const int context = ext.row;
    // A cache as long as the longest row (groups of one example) or three times that (up to
    // three examples side by side: their contexts in one forward, their branches sharing
    // forwards); logits for every row a forward takes, or for the longest branch only.
    const int branch = ext.branch;
    ASSERT_LT(branch, 3 * context);
    for (const int cache : {context, 3 * context}) {
        for (int branches : {1, 3, 8}) {
            const int logits = branches == 3 ? branch : 3 * context;
            Generator gen(mc, *backend, logits, cache, 3 * context);
            CachedChoiceEvaluator cached(gen, state, self_communicator(), branches,
                                         tok->eot() % static_cast<uint32_t>(mc.vocab_size));
            std::vector<std::vector<EndingScore>> got;
            cached.evaluate(task, 0, &got);
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_EQ(got[i].size(), want[i].size()) << i;
                for (size_t k = 0; k < got[i].size(); ++k) {
                    EXPECT_NEAR(got[i][k].loglik, want[i][k].loglik, 1e-5 * std::abs(want[i][k].loglik) + 1e-5)
                        << "example " << i << " ending " << k << ", " << branches << " branches per forward, cache "
                        << cache << ", logits rows " << logits;
                    EXPECT_EQ(got[i][k].tokens, want[i][k].tokens) << i << " " << k;
                    EXPECT_EQ(got[i][k].chars, want[i][k].chars) << i << " " << k;
                }
            }
            EXPECT_EQ(got[5][0].loglik, got[5][3].loglik) << "a repeated ending ties exactly";
        }
    }
}

TEST(CachedChoiceEvaluation, Gpt2MatchesTheBatchedForward) {
    expect_cached_scores_match(test::model_config(2, 2, 32, 16, 257));
}

TEST(CachedChoiceEvaluation, LlamaMatchesTheBatchedForward) {
    ModelConfig mc = test::small_llama(2, false, true);
    mc.seq_len = 16;
    expect_cached_scores_match(mc);
}

}  // namespace
}  // namespace zt

