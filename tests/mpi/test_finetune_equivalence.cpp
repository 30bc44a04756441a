// Fine-tuning on example shards depends neither on the world size nor on accumulation: N
// ranks with 2 micro-steps each match one rank with 2N micro-steps (every step's loss, the
// validation losses and the final parameters, expect_matches_reference's tolerances) and
// one rank taking each global batch as one micro-batch (the losses), packed and padded, GPT-2 and Llama,
// ZeRO stages 0-3, hybrid shard groups of 2 (two replicas at np 4), and LoRA with dropout on
// compacted padding. The examples' lengths run from 2 to 17 tokens with prompts of random
// length, so the ranks' micro-batches hold very different numbers of targets: a loss taken
// as the mean of per-rank or per-micro-step means would differ. And a run stopped after 5
// steps and resumed at this world size from a checkpoint written at one rank continues
// with the same examples (the data cursor counts global rows).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

/// n examples of 2..17 tokens (seq_len 16 fits 17), each a prompt of random length whose
/// tokens are not targets, then targets; the completion repeats the prompt's first token so
/// there is something to learn.
void write_examples(const std::string& path, size_t n, uint64_t seed) {
    ExampleSet set;
    for (size_t e = 0; e < n; ++e) {
        const size_t len = 2 + random_bits(seed, 1, e) % 16;
        const size_t prompt = 1 + random_bits(seed, 2, e) % (len - 1);
        std::vector<uint32_t> tokens(len);
        std::vector<uint8_t> target(len, 0);
        for (size_t t = 0; t < len; ++t) {
            tokens[t] = t < prompt ? static_cast<uint32_t>(random_bits(seed, 3, e * 32 + t) % 61) : tokens[0];
            target[t] = t >= prompt ? 1 : 0;
        }
        set.append(tokens, target);
    }
    write_example_shard(path, set);
}

struct FinetuneCase {
    int stage;
    DataPacking packing;
    bool llama;
    int shard_group = -1;  ///< parallel.shard_group (-1: the node; 2 at np 4: two replicas)
    /// > 0: LoRA (rank 4) with this lora.dropout. Padded rows are compacted, and differently
    /// by the one rank taking the global batch as one micro-batch: the masks must follow
    /// each example, not its row.
    double lora_dropout = 0.0;
};

class FinetuneRanks : public ::testing::TestWithParam<FinetuneCase> {};

Config finetune_config(const test::SharedDir& dir, const std::string& run, const FinetuneCase& c) {
    Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file(run));
    if (c.llama) cfg = test::as_llama(cfg);
    cfg.data.val = dir.file("val.bin");
    cfg.data.packing = c.packing;
    cfg.parallel.zero_stage = c.stage;
    cfg.parallel.shard_group.ranks = c.shard_group;
    if (c.lora_dropout > 0) {
        cfg.model.lora.rank = 4;
        cfg.model.lora.dropout = c.lora_dropout;
    }
    return cfg;
}

/// Every step's loss and every validation loss within 1e-5 relative.
void expect_same_losses(const TrainSummary& got, const TrainSummary& ref, const std::string& what) {
    ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
        EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * ref.losses[s]) << what << " step " << s + 1;
    }
    ASSERT_EQ(got.val_losses.size(), ref.val_losses.size()) << what;
    for (size_t i = 0; i < ref.val_losses.size(); ++i) {
        EXPECT_NEAR(got.val_losses[i], ref.val_losses[i], 1e-5 * ref.val_losses[i]) << what << " validation " << i;
    }
}

TEST_P(FinetuneRanks, MatchOneRankWithAccumulationAndWithout) {
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("finetune");
    if (me == 0) {
        write_examples(dir.file("train.bin"), 300, 11);
        write_examples(dir.file("val.bin"), 40, 12);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = true;
    Config cfg = finetune_config(dir, "world", GetParam());
    const int accum = cfg.train.grad_accum;
    cfg.train.eval_batches = 2 * accum;

    // One rank with N-way accumulation: the same micro-batches, so the same parameters
    // (expect_matches_reference's tolerances). Validation splits its leading rows over the
    // ranks in micro-batches: one rank covers the same rows with N times the batches.
    Config accumulated = finetune_config(dir, "acc" + std::to_string(me), GetParam());
    accumulated.parallel.zero_stage = 0;
    accumulated.parallel.shard_group.ranks = -1;
    accumulated.train.grad_accum *= N;
    accumulated.train.eval_batches = cfg.train.eval_batches * N;
    const TrainSummary acc = train(accumulated, self);
    // One rank taking each global batch as one micro-batch (no accumulation): a loss
    // normalised per micro-step or per rank instead of by the global target count would
    // differ from it in every step after the first. Parameters are not compared: the
    // products sum in another order, which AdamW amplifies in elements whose gradient is ~0
    // beyond expect_matches_reference's absolute floor (one element in 10^4 here).
    Config whole = finetune_config(dir, "one" + std::to_string(me), GetParam());
    whole.parallel.zero_stage = 0;
    whole.parallel.shard_group.ranks = -1;
    whole.train.micro_batch *= N * accum;
    whole.train.grad_accum = 1;
    whole.train.eval_batches = 2;
    const TrainSummary one = train(whole, self);

    TrainOptions world;
    world.collect_params = true;
    const TrainSummary got = train(cfg, world);
    const std::string what = "np " + std::to_string(N) + " stage " + std::to_string(GetParam().stage);
    test::expect_matches_reference(got, acc, what + " vs one rank with accumulation");
    expect_same_losses(got, acc, what + " vs one rank with accumulation");
    expect_same_losses(got, one, what + " vs one rank, one micro-batch");
}

INSTANTIATE_TEST_SUITE_P(Stages, FinetuneRanks,
                         ::testing::Values(FinetuneCase{0, DataPacking::kPack, false},
                                           FinetuneCase{3, DataPacking::kPack, false},
                                           FinetuneCase{0, DataPacking::kPad, false},
                                           FinetuneCase{1, DataPacking::kPack, true},
                                           FinetuneCase{2, DataPacking::kPad, true},
                                           FinetuneCase{3, DataPacking::kPack, true},
                                           FinetuneCase{3, DataPacking::kPack, false, 2},
                                           FinetuneCase{2, DataPacking::kPad, true, -1, 0.3},
                                           FinetuneCase{0, DataPacking::kPad, false, -1, 0.3}));

// One rank trains 5 steps (N-way accumulation) and checkpoints; this world size resumes
// from it to step 10 and must continue the one-rank run's 10-step curve.
// Packed examples under tensor parallelism with sequence parallelism (T = 2): position runs
// restart inside rows and attention is block-diagonal, while the norms and the residual
// stream hold half of the rows on each rank; every step's loss and every validation loss match
// one rank accumulating the same micro-batches (GPT-2 and Llama, KV head shared by both ranks).
TEST(FinetuneTensor, SequenceParallelMatchesOneRank) {
    const int N = test::world_size();
    const int me = test::world_rank();
    if (N % 2 != 0) GTEST_SKIP();
    test::SharedDir dir("finetune_tensor");
    if (me == 0) {
        write_examples(dir.file("train.bin"), 300, 11);
        write_examples(dir.file("val.bin"), 40, 12);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (const bool llama : {false, true}) {
        const FinetuneCase c{1, DataPacking::kPack, llama};
        Config cfg = finetune_config(dir, llama ? "llama" : "gpt2", c);
        cfg.parallel.tensor = 2;
        cfg.parallel.sequence = true;
        cfg.train.eval_batches = 2 * cfg.train.grad_accum;
        TrainOptions self;
        self.comm = MPI_COMM_SELF;
        Config ref = finetune_config(dir, str(llama ? "llama" : "gpt2", "_ref", me), c);
        ref.parallel.zero_stage = 0;
        ref.parallel.shard_group.ranks = -1;
        ref.train.grad_accum *= N / 2;
        ref.train.eval_batches = cfg.train.eval_batches * N / 2;
        const TrainSummary one = train(ref, self);
        const TrainSummary got = train(cfg, TrainOptions{});
        expect_same_losses(got, one, str(llama ? "llama" : "gpt2", " np ", N, " tensor 2 sequence parallel"));
    }
}

TEST(FinetuneResume, AtAnotherWorldSizeContinuesTheSameExamples) {
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("finetune_resume");
    if (me == 0) {
        write_examples(dir.file("train.bin"), 300, 11);
        write_examples(dir.file("val.bin"), 40, 12);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const FinetuneCase c{0, DataPacking::kPack, false};
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    Config whole = finetune_config(dir, "whole" + std::to_string(me), c);
    whole.train.grad_accum *= N;
    whole.checkpoint.every = 5;
    const TrainSummary ref = train(whole, self);

    Config rest = finetune_config(dir, "rest", c);
    rest.checkpoint.resume.mode = ResumeSetting::Mode::kPath;
    rest.checkpoint.resume.path = dir.file("whole0/checkpoints/" + checkpoint_dir_name(5));
    const TrainSummary got = train(rest, TrainOptions{});
    ASSERT_EQ(got.losses.size(), 5u);
    for (size_t s = 0; s < 5; ++s) {
        EXPECT_NEAR(got.losses[s], ref.losses[5 + s], 1e-5 * ref.losses[5 + s]) << "step " << 6 + s;
    }
}

// Examples through a pipeline (P = 2, one data rank per stage pair at np 2, two at np 4):
// every stage reads the same rows, packed rows' segments reach every stage's attention, and
// the loss is the last stage's target sum over the global batch's targets. Every step's loss,
// the validation losses, the final parameters and the sample (the first validation example's
// prompt, generated through the stages) match one rank accumulating the same micro-batches,
// under 1F1B and zero-bubble.
TEST(FinetunePipeline, ExamplesThroughTwoStagesMatchOneRank) {
    const int N = test::world_size();
    const int me = test::world_rank();
    const int D = N / 2;
    test::SharedDir dir("finetune_pipeline");
    if (me == 0) {
        write_examples(dir.file("train.bin"), 300, 11);
        write_examples(dir.file("val.bin"), 40, 12);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // Padded rows are as long as their micro-batch's longest example: the stages' messages too,
    // and under zero-bubble the weight passes' products.
    const PipelineSchedule one_f = PipelineSchedule::k1F1B;
    const PipelineSchedule zb = PipelineSchedule::kZeroBubble;
    for (const auto& [c, schedule] : {std::pair{FinetuneCase{1, DataPacking::kPack, false}, one_f},
                                      std::pair{FinetuneCase{0, DataPacking::kPad, true}, one_f},
                                      std::pair{FinetuneCase{3, DataPacking::kPad, false}, one_f},
                                      std::pair{FinetuneCase{2, DataPacking::kPack, true}, one_f},
                                      std::pair{FinetuneCase{3, DataPacking::kPad, false}, zb},
                                      std::pair{FinetuneCase{2, DataPacking::kPack, true}, zb}}) {
        const std::string what = str("np ", N, " P = 2 ", setting_text(schedule), ", ", c.llama ? "Llama" : "GPT-2",
                                     " ZeRO-", c.stage, c.packing == DataPacking::kPack ? " packed" : " padded");
        auto configure = [&](const std::string& run) {
            Config cfg = finetune_config(dir, run, c);
            cfg.model.n_layer = 4;
            cfg.train.max_steps = 6;
            cfg.train.eval_every = 3;
            cfg.train.sample_tokens = 8;
            cfg.run.tensorboard = false;
            return cfg;
        };
        Config cfg = configure(str("pipe_", c.stage, c.llama, setting_text(schedule)));
        cfg.parallel.pipeline = 2;
        cfg.parallel.schedule = schedule;
        TrainOptions world;
        world.collect_params = true;
        const TrainSummary got = train(cfg, world);
        Config ref_cfg = configure(str("ref_", c.stage, c.llama, setting_text(schedule), "_", me));
        ref_cfg.parallel.zero_stage = 0;
        ref_cfg.parallel.shard_group.ranks = -1;
        ref_cfg.train.grad_accum *= D;
        ref_cfg.train.eval_batches *= D;
        TrainOptions self;
        self.comm = MPI_COMM_SELF;
        self.collect_params = true;
        const TrainSummary ref = train(ref_cfg, self);
        test::expect_matches_reference(got, ref, what);
        expect_same_losses(got, ref, what);
        EXPECT_FALSE(ref.last_sample.empty()) << what;
        EXPECT_EQ(got.last_sample, ref.last_sample) << what << ": the sample";
    }
}

}  // namespace
}  // namespace zt
