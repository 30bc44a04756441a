// ExampleFeed (train/example_feed.hpp): the global target count it normalises the loss by
// equals the targets of the rows it fills, across an epoch boundary; train.epochs becomes
// the steps of E passes, the last completed; train.epochs without example shards is refused;
// is_example_shard tells the shard kinds apart; the memory plan's example items are what the
// feed and the model allocate.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/memory_plan.hpp"

namespace zt {
namespace {

/// `count` examples of 2..17 tokens, targets after a prompt of random length.
void write_examples(const std::string& path, size_t count = 50) {
    ExampleSet set;
    for (size_t e = 0; e < count; ++e) {
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
        for (bool segmented_attention : {false, true}) {  // pad: one example per row, or compacted
            ExampleFeed feed(feed_config(dir.file("train.bin"), packing), segmented_attention);
            const uint64_t epoch_rows = feed.train_rows_in_epoch();
            // 12 rows from 5 before the end of epoch 0 into epoch 1.
            const uint64_t first = epoch_rows - 5;
            RowBatch batch;
            uint64_t filled = 0;
            for (uint64_t g = first; g < first + 12; g += 3) {
                feed.fill_train(g, 3, batch);
                filled += batch.num_targets;
            }
            EXPECT_EQ(feed.targets_in_rows(first, 12), filled)
                << (packing == DataPacking::kPack ? "pack" : "pad") << " segmented " << segmented_attention;
            EXPECT_EQ(feed.epoch_of(first), 0u);
            EXPECT_EQ(feed.epoch_of(first + 11), 1u);
        }
    }
}

TEST(ExampleFeed, EpochsBecomeStepsOfWholePasses) {
    test::ScratchDir dir("example_feed_epochs");
    write_examples(dir.file("train.bin"));
    Config deck = feed_config(dir.file("train.bin"), DataPacking::kPad);
    deck.train.epochs = 3;
    ExampleFeed feed(deck, true);
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

/// The bytes of the plan item `name`; -1 when the plan has none.
double plan_item(const MemoryPlan& plan, const std::string& name) {
    for (const MemoryItem& i : plan.items) {
        if (i.name == name) return i.bytes;
    }
    return -1.0;
}

TEST(ExampleMemoryPlan, PlanItemsAreWhatTheFeedAndTheModelAllocate) {
    // Sized from the shards' headers alone, yet exact whatever data.overlong leaves out
    // (seq_len 8 truncates or drops the longer examples), and nothing grows while rows are
    // filled across an epoch boundary.
    test::ScratchDir dir("example_feed_plan");
    write_examples(dir.file("train_0.bin"));
    write_examples(dir.file("train_1.bin"), 23);
    write_examples(dir.file("val.bin"), 11);
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    for (DataPacking packing : {DataPacking::kPack, DataPacking::kPad}) {
        for (DataOverlong overlong : {DataOverlong::kTruncate, DataOverlong::kDrop}) {
            const char* what = packing == DataPacking::kPack ? "pack" : "pad";
            Config cfg = feed_config(dir.file("train_*.bin"), packing);
            cfg.data.val = dir.file("val.bin");
            cfg.data.overlong = overlong;
            cfg.model.seq_len = 8;
            cfg.train.micro_batch = 3;
            ExampleFeed feed(cfg, true);
            ASSERT_LT(feed.train().examples().num_examples(), 73u) << what << ": the plan must cover left-out examples";
            const ExampleRunSizes sizes = read_example_run_sizes(cfg);
            EXPECT_EQ(sizes.train.examples, 73u);
            const MemoryPlan plan = plan_memory(cfg, 1, 1, 0, 0, false, 0, &sizes);
            const ExampleFeedBytes made = feed.bytes();
            RowBatch batch;
            batch.reserve(cfg.train.micro_batch, cfg.model.seq_len);
            const size_t reserved = batch.bytes();
            for (uint64_t g = 0; g < 3 * feed.train_rows_in_epoch(); g += 3) feed.fill_train(g, 3, batch);
            feed.fill_val(0, 3, batch);
            EXPECT_EQ(batch.bytes(), reserved) << what << ": a fill of micro_batch rows allocates nothing";
            const ExampleFeedBytes after = feed.bytes();
            EXPECT_EQ(after.examples, made.examples) << what;
            EXPECT_EQ(after.rows, made.rows) << what << ": three epochs' rows rebuilt in place";
            EXPECT_EQ(plan_item(plan, "examples"), made.examples) << what;
            EXPECT_EQ(plan_item(plan, "example rows"), made.rows) << what;
            EXPECT_EQ(plan_item(plan, "row batch"), static_cast<double>(reserved)) << what;
            // The model's copies of packed rows' segments, made by the first packed forward.
            Transformer model(cfg.model, *backend, cfg.train.micro_batch);
            ResidentWeights weights(model.layout(), *backend);
            EXPECT_EQ(model.row_segment_bytes(), 0u);
            feed.fill_train(0, cfg.train.micro_batch, batch);
            const TokenRows rows = packing == DataPacking::kPack
                                       ? TokenRows{batch.positions.data(), batch.segment_start.data()}
                                       : TokenRows{};
            model.forward(weights, batch.inputs.data(), batch.targets.data(), batch.rows, batch.T, 0.f, rows);
            EXPECT_EQ(plan_item(plan, "row segments"),
                      packing == DataPacking::kPack ? static_cast<double>(model.row_segment_bytes()) : -1.0)
                << what;
            // --plan reads the same headers.
            const MemoryPlan deck_plan = plan_for_deck(cfg, 1, 1);
            EXPECT_EQ(plan_item(deck_plan, "examples"), made.examples) << what;
            EXPECT_EQ(plan_item(deck_plan, "row batch"), static_cast<double>(reserved)) << what;
        }
    }
    // A pretraining deck's plan has none of them.
    write_token_shard(dir.file("tok.bin"), std::vector<uint32_t>(100, 7));
    Config pre = feed_config(dir.file("tok.bin"), DataPacking::kPack);
    for (const char* name : {"examples", "example rows", "row batch", "row segments"}) {
        EXPECT_EQ(plan_item(plan_for_deck(pre, 1, 1), name), -1.0) << name;
    }
}

}  // namespace
}  // namespace zt
