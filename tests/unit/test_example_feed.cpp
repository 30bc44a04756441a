// ExampleFeed (train/example_feed.hpp): the global target count it normalises the loss by
// equals the targets of the rows it fills, across an epoch boundary; train.epochs becomes
// the steps of E passes, the last completed; train.epochs without example shards is refused;
// is_example_shard tells the shard kinds apart.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/train/example_feed.hpp"

namespace zt {
namespace {

/// 50 examples of 2..17 tokens, targets after a prompt of random length.
void write_examples(const std::string& path) {
    ExampleSet set;
    for (size_t e = 0; e < 50; ++e) {
        const size_t len = 2 + random_bits(3, 1, e) % 16;
        const size_t prompt = 1 + random_bits(3, 2, e) % (len - 1);
        std::vector<uint32_t> tokens(len);
        std::vector<uint8_t> target(len, 0);
        for (size_t t = 0; t < len; ++t) {
            tokens[t] = static_cast<uint32_t>(random_bits(3, 3, e * 32 + t) % 61);
            target[t] = t >= prompt ? 1 : 0;
        }
        set.append(tokens, target);
    }
    write_example_shard(path, set);
}

Config feed_config(const std::string& train, DataPacking packing) {
    Config cfg;
    cfg.model.seq_len = 16;
    cfg.model.vocab_size = 61;
    cfg.data.train = train;
    cfg.data.packing = packing;
    cfg.train.micro_batch = 2;
    cfg.train.grad_accum = 2;
    return cfg;
}

TEST(ExampleFeed, GlobalTargetCountIsTheTargetsOfTheRowsFilled) {
    test::ScratchDir dir("example_feed");
    write_examples(dir.file("train.bin"));
    for (DataPacking packing : {DataPacking::kPack, DataPacking::kPad}) {
        ExampleFeed feed(feed_config(dir.file("train.bin"), packing));
        const uint64_t epoch_rows = feed.train_rows_in_epoch();
        // 12 rows from 5 before the end of epoch 0 into epoch 1.
        const uint64_t first = epoch_rows - 5;
        RowBatch batch;
        uint64_t filled = 0;
        for (uint64_t g = first; g < first + 12; g += 3) {
            feed.fill_train(g, 3, batch);
            filled += batch.num_targets;
        }
        EXPECT_EQ(feed.targets_in_rows(first, 12), filled) << (packing == DataPacking::kPack ? "pack" : "pad");
        EXPECT_EQ(feed.epoch_of(first), 0u);
        EXPECT_EQ(feed.epoch_of(first + 11), 1u);
    }
}

TEST(ExampleFeed, EpochsBecomeStepsOfWholePasses) {
    test::ScratchDir dir("example_feed_epochs");
    write_examples(dir.file("train.bin"));
    Config deck = feed_config(dir.file("train.bin"), DataPacking::kPad);
    deck.train.epochs = 3;
    ExampleFeed feed(deck);
    // Pad: one row per example, 150 rows in 3 epochs; 2 ranks x 2 x 2 = 8 rows per step.
    EXPECT_EQ(feed.steps_for_epochs(3, 8), 19);
    EXPECT_EQ(with_run_length(deck, &feed, 2).train.max_steps, 19);
    EXPECT_EQ(with_run_length(deck, &feed, 1).train.max_steps, 38);
    deck.train.epochs = 0;
    EXPECT_EQ(with_run_length(deck, &feed, 2).train.max_steps, deck.train.max_steps);
    deck.train.epochs = 1;
    test::expect_input_error([&] { with_run_length(deck, nullptr, 1); },
                             {"train.epochs = 1", "only example shards", "train.max_steps"});
}

TEST(ExampleFeed, TellsExampleShardsFromPretrainingShards) {
    test::ScratchDir dir("example_feed_kinds");
    write_examples(dir.file("ex.bin"));
    write_token_shard(dir.file("tok.bin"), std::vector<uint32_t>(100, 7));
    EXPECT_TRUE(is_example_shard(dir.file("ex.bin"), "data.train"));
    EXPECT_FALSE(is_example_shard(dir.file("tok.bin"), "data.train"));
    EXPECT_FALSE(is_example_shard(dir.file("missing_*.bin"), "data.train"));
}

}  // namespace
}  // namespace zt
