// The pipeline's layer split (parallel/pipeline_stages.hpp): every split covers the blocks
// exactly, one at least per virtual stage; the balanced one has the smallest largest cost of
// every possible split (checked against all of them on small models) and moves blocks off
// the last stage when the LM head is heavy; a split as given is refused by name when wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"

namespace zt {
namespace {

ModelConfig gpt2_124m() {
    ModelConfig m;
    m.n_layer = 12;
    m.n_head = 12;
    m.n_embd = 768;
    m.seq_len = 1024;
    m.vocab_size = 50257;
    m.vocab_pad_to = 128;
    return m;
}

void expect_covers(const PipelineStages& s, int layers, const std::string& what) {
    ASSERT_EQ(static_cast<int>(s.first_layer.size()), s.count() + 1) << what;
    EXPECT_EQ(s.first_layer.front(), 0) << what;
    EXPECT_EQ(s.first_layer.back(), layers) << what;
    for (int k = 0; k < s.count(); ++k) EXPECT_GE(s.layers(k), 1) << what << " virtual stage " << k;
}

/// The smallest largest cost over every split of `layers` blocks into `count` runs of >= 1.
double best_by_enumeration(const ModelConfig& m, int count) {
    double best = 1e300;
    std::vector<int> blocks(static_cast<size_t>(count), 1);
    std::function<void(int, int)> go = [&](int k, int left) {
        if (k == count - 1) {
            blocks[static_cast<size_t>(k)] = left;
            const PipelineStages s = pipeline_layers_as_given(m, count, 1, blocks);
            best = std::min(best, *std::max_element(s.cost.begin(), s.cost.end()));
            return;
        }
        for (int n = 1; n <= left - (count - 1 - k); ++n) {
            blocks[static_cast<size_t>(k)] = n;
            go(k + 1, left - n);
        }
    };
    go(0, m.n_layer);
    return best;
}

TEST(PipelineStages, BalancedSplitIsTheBestOfAll) {
    for (const bool llama : {false, true}) {
        for (int L : {2, 5, 8, 11}) {
            for (int P : {1, 2, 3, 4}) {
                if (P > L) continue;
                ModelConfig m = test::model_config(L, 4, 64, 128, 1000, 8);
                if (llama) {
                    m.arch = ModelArch("llama");
                    m.ffn_dim = 172;
                    m.n_kv_head = 2;
                }
                const std::string what = str(llama ? "llama" : "gpt2", " L=", L, " P=", P);
                const PipelineStages s = balance_pipeline_layers(m, P, 1);
                expect_covers(s, L, what);
                EXPECT_DOUBLE_EQ(*std::max_element(s.cost.begin(), s.cost.end()), best_by_enumeration(m, P)) << what;
            }
        }
    }
}

TEST(PipelineStages, HeavyHeadMovesBlocksOffTheLastStage) {
    const ModelConfig m = gpt2_124m();
    // The LM head (2 x 50304 x 768 FLOPs a token) weighs about 4.5 blocks.
    EXPECT_NEAR(pipeline_head_cost(m) / pipeline_block_cost(m), 4.47, 0.01);
    const PipelineStages balanced = balance_pipeline_layers(m, 4, 1);
    expect_covers(balanced, 12, "GPT-2 124M P=4");
    EXPECT_EQ(balanced.layers(3), 1) << "the last stage keeps the head and one block";
    const PipelineStages even = pipeline_layers_as_given(m, 4, 1, {3, 3, 3, 3});
    EXPECT_LT(balanced.imbalance(), even.imbalance());
    EXPECT_NEAR(even.imbalance() / balanced.imbalance(), 1.36, 0.01);
    // Interleaved: 8 virtual stages over 4 ranks, virtual stage k on rank k mod 4.
    const PipelineStages two = balance_pipeline_layers(m, 4, 2);
    expect_covers(two, 12, "GPT-2 124M P=4 v=2");
    EXPECT_EQ(two.stage_of(5), 1);
    EXPECT_EQ(two.chunk_of(5), 1);
}

TEST(PipelineStages, SplitsAsGivenAreCheckedByName) {
    const ModelConfig m = gpt2_124m();
    const PipelineStages s = pipeline_layers_as_given(m, 2, 2, {3, 4, 4, 1});
    expect_covers(s, 12, "3,4,4,1");
    EXPECT_DOUBLE_EQ(s.cost[3], pipeline_block_cost(m) + pipeline_head_cost(m));
    auto refusal = [&](std::vector<int> blocks, int P, int v) {
        try {
            pipeline_layers_as_given(m, P, v, blocks);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(refusal({6, 6}, 2, 2).find("2 counts for 4 virtual stages"), std::string::npos) << refusal({6, 6}, 2, 2);
    EXPECT_NE(refusal({6, 0, 6}, 3, 1).find("virtual stage 1 holds 0 blocks"), std::string::npos);
    EXPECT_NE(refusal({3, 4, 4, 2}, 4, 1).find("add up to 13 blocks; model.n_layer = 12"), std::string::npos);
    try {
        balance_pipeline_layers(m, 8, 2);
        ADD_FAILURE() << "16 virtual stages of 12 blocks";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("parallel.pipeline"), std::string::npos) << e.what();
    }
}

// parallel.schedule and parallel.virtual_stages are a pipeline's: one stage runs 1F1B's
// one-stage schedule with one chunk (the whole model), whatever they say.
TEST(PipelineStages, OneStageRunsOneChunkOfOneForwardOneBackward) {
    Config cfg;
    cfg.model = gpt2_124m();
    for (PipelineSchedule schedule :
         {PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved, PipelineSchedule::kZeroBubble}) {
        cfg.parallel.schedule = schedule;
        cfg.parallel.virtual_stages = schedule == PipelineSchedule::kInterleaved ? 3 : 0;
        cfg.parallel.pipeline = 1;
        EXPECT_EQ(cfg.parallel.chunks(), 1) << setting_text(schedule);
        EXPECT_EQ(pipeline_schedule_kind(cfg.parallel), PipelineScheduleKind::k1F1B) << setting_text(schedule);
        const PipelineStages one = pipeline_blocks(cfg);
        EXPECT_EQ(one.count(), 1) << setting_text(schedule);
        expect_covers(one, 12, "one stage");
        cfg.parallel.pipeline = 2;
        EXPECT_EQ(cfg.parallel.chunks(), schedule == PipelineSchedule::kInterleaved ? 3 : 1) << setting_text(schedule);
        EXPECT_EQ(pipeline_schedule_kind(cfg.parallel), pipeline_schedule_kind(schedule)) << setting_text(schedule);
    }
}

}  // namespace
}  // namespace zt
