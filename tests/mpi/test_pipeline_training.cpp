// ztrain's training loop with parallel.pipeline > 1 against one rank training the same global
// batch (gradient accumulation over the data ranks' micro-batches): every step's loss (the
// true loss of the global batch, on every rank), the validation loss and the final
// parameters, as the other equivalence tests compare them (expect_matches_reference).
// - np 2: P = 2, 1F1B, interleaved and zero-bubble, GPT-2 and Llama, ZeRO 0-3; the sample (generated
//   through the stages) is the one rank's;
// - bf16 and fp16 track the one-rank run of their dtype (unit 0's two halves are summed in
//   the stored dtype), and fp16's loss scale skips the same steps (the verdict is agreed over
//   the stages);
// - np 4: P = 2 x data 2 at ZeRO-1 and ZeRO-3, hybrid (2 replicas of 1-rank shard groups) at
//   ZeRO-2 and ZeRO-3, and P = 2 x T = 2 with sequence parallelism, 1F1B and zero-bubble, and
//   Llama under Muon (losses);
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

struct PipeCase {
    const char* name;
    PipelineSchedule schedule;
    int zero_stage;
    bool llama;
    DType dtype;
    int qwen = 0;  // with llama: as Qwen2 or Qwen3 (test::as_qwen)
    ActivationRecompute recompute = ActivationRecompute::kNone;
};

Config pipe_config(const PipeCase& c, const std::string& train, const std::string& val, const std::string& run) {
    Config cfg = test::tiny_mpi_config(train, run);
    if (c.llama) cfg = test::as_qwen(test::as_llama(cfg), c.qwen);
    cfg.model.n_layer = 4;
    cfg.data.val = val;
    cfg.train.grad_accum = 4;
    cfg.train.max_steps = 6;
    cfg.train.eval_every = 3;
    cfg.train.eval_batches = 2;
    cfg.train.sample_tokens = 12;
    cfg.parallel.zero_stage = c.zero_stage;
    cfg.parallel.shard_group.ranks = 0;
    cfg.parallel.schedule = c.schedule;
    cfg.precision.dtype = c.dtype;
    cfg.train.recompute = c.recompute;
    cfg.run.tensorboard = false;
    // DDP without the communication thread: a gradient bucket started before its units are
    // final (unit 0 is done last on every stage) then reads them at once, so such an error
    // fails every run instead of some.
    if (c.zero_stage == 0) cfg.parallel.comm_thread = false;
    return cfg;
}

class PipelineTraining : public ::testing::TestWithParam<PipeCase> {};

TEST_P(PipelineTraining, MatchesOneRank) {
    const PipeCase c = GetParam();
    const int N = test::world_size();
    const int me = test::world_rank();
    const int P = 2;
    const int D = N / P;
    const std::string what = std::string(c.name) + " N=" + std::to_string(N);
    test::SharedDir dir("pipeline");
    if (me == 0) {
        test::write_random_shard(dir.file("train.bin"), 30000, 61);
        test::write_random_shard(dir.file("val.bin"), 4000, 61);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    Config cfg = pipe_config(c, dir.file("train.bin"), dir.file("val.bin"), dir.file("world"));
    cfg.parallel.pipeline = P;
    TrainOptions world;
    world.collect_params = true;
    const TrainSummary got = train(cfg, world);

    Config ref_cfg = pipe_config(c, dir.file("train.bin"), dir.file("val.bin"), dir.file("ref" + std::to_string(me)));
    // The reference evaluates the same windows: the pipeline's D data ranks read eval_batches
    // micro-batches each.
    ref_cfg.train.eval_batches *= D;
    const TrainSummary ref = test::one_rank_reference(ref_cfg, D);
    test::expect_matches_reference(got, ref, what);
    ASSERT_EQ(got.val_losses.size(), ref.val_losses.size()) << what;
    for (size_t i = 0; i < ref.val_losses.size(); ++i) {
        EXPECT_NEAR(got.val_losses[i], ref.val_losses[i], 1e-5 * ref.val_losses[i]) << what << " evaluation " << i;
    }
    // The sample runs each token's forward through the stages: the same tokens as one rank.
    EXPECT_FALSE(ref.last_sample.empty()) << what;
    EXPECT_EQ(got.last_sample, ref.last_sample) << what << ": the last sample";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PipelineTraining,
    ::testing::Values(PipeCase{"onef1b_ddp", PipelineSchedule::k1F1B, 0, false, DType::kF32},
                      PipeCase{"interleaved_zero1", PipelineSchedule::kInterleaved, 1, false, DType::kF32},
                      PipeCase{"onef1b_llama_zero3", PipelineSchedule::k1F1B, 3, true, DType::kF32},
                      PipeCase{"interleaved_llama_zero2", PipelineSchedule::kInterleaved, 2, true, DType::kF32},
                      PipeCase{"zero_bubble_ddp", PipelineSchedule::kZeroBubble, 0, false, DType::kF32},
                      PipeCase{"zero_bubble_llama_zero1", PipelineSchedule::kZeroBubble, 1, true, DType::kF32},
                      PipeCase{"zero_bubble_zero2", PipelineSchedule::kZeroBubble, 2, false, DType::kF32},
                      PipeCase{"zero_bubble_llama_zero3", PipelineSchedule::kZeroBubble, 3, true, DType::kF32},
                      PipeCase{"onef1b_qwen2_zero1", PipelineSchedule::k1F1B, 1, true, DType::kF32, 2},
                      PipeCase{"zero_bubble_qwen3_zero1", PipelineSchedule::kZeroBubble, 1, true, DType::kF32, 3},
                      // The weight passes read the blocks' kept activations; the probabilities
                      // are rebuilt in each block's backward pass, one buffer per model.
                      PipeCase{"zero_bubble_llama_zero3_recompute_attention", PipelineSchedule::kZeroBubble, 3, true,
                               DType::kF32, 0, ActivationRecompute::kAttention},
                      PipeCase{"interleaved_recompute_attention", PipelineSchedule::kInterleaved, 1, false,
                               DType::kF32, 0, ActivationRecompute::kAttention}),
    [](const ::testing::TestParamInfo<PipeCase>& i) { return std::string(i.param.name); });

// np 4: P = 4 interleaved over 4 micro-batches. The last stage runs every forward of its
// head chunk before the first backward, so each head takes its gradients in the forward with
// other micro-batches' passes between it and its backward: DDP, ZeRO-2 (unit 0 reduced once
// a step) and a bf16 ZeRO-1 (its fp32 scratch folded into the stored gradient at each
// micro-step's end) against one rank.
TEST(PipelineTraining, FourStagesInterleavedWithForwardsApartFromBackwardsMatchOneRank) {
    if (test::world_size() != 4) GTEST_SKIP() << "P = 4 needs 4 ranks";
    const int me = test::world_rank();
    test::SharedDir dir("pipeline_apart");
    test::write_shared_train_shard(dir);
    for (const auto& [zero, dt] : {std::pair{0, DType::kF32}, std::pair{2, DType::kF32}, std::pair{1, DType::kBF16}}) {
        const PipeCase c{"apart", PipelineSchedule::kInterleaved, zero, false, dt};
        const std::string run = str(zero, "_", dtype_name(dt));
        const std::string what = str("P = 4 interleaved, m = 4, ZeRO-", zero, ", ", dtype_name(dt));
        auto configure = [&](const std::string& name) {
            Config cfg = pipe_config(c, dir.file("train.bin"), "", dir.file(name));
            cfg.model.n_layer = 8;  // one block per virtual stage
            cfg.train.eval_every = 0;
            return cfg;
        };
        Config cfg = configure("world" + run);
        cfg.parallel.pipeline = 4;
        TrainOptions world;
        world.collect_params = dt == DType::kF32;
        const TrainSummary got = train(cfg, world);
        const TrainSummary ref =
            test::one_rank_reference(configure(str("ref", me, "_", run)), 1, /*collect_params=*/dt == DType::kF32);
        if (dt == DType::kF32) {
            test::expect_matches_reference(got, ref, what);
            continue;
        }
        ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
        for (size_t s = 0; s < ref.losses.size(); ++s) {
            EXPECT_NEAR(got.losses[s], ref.losses[s], 2e-3 * ref.losses[s]) << what << " step " << s + 1;
        }
    }
}

TEST(PipelineLowPrecision, TracksTheOneRankRunOfItsDtype) {
    const int N = test::world_size();
    const int me = test::world_rank();
    test::SharedDir dir("pipeline_16bit");
    test::write_shared_train_shard(dir);
    // Zero-bubble too: a 16-bit state hands out an fp32 scratch per unit and micro-step, given
    // back at grads_done, so a weight pass must ask for its unit's buffer again.
    // ZeRO-2/3 too: a stage keeps its whole fp32 gradients through the step and reduces them
    // once, into the 16-bit shard.
    struct LowCase {
        DType dt;
        PipelineSchedule schedule;
        int zero;
    };
    for (const auto& [dt, schedule, zero] : {LowCase{DType::kBF16, PipelineSchedule::k1F1B, 1},
                                             LowCase{DType::kF16, PipelineSchedule::k1F1B, 3},
                                             LowCase{DType::kBF16, PipelineSchedule::kZeroBubble, 2},
                                             LowCase{DType::kF16, PipelineSchedule::kZeroBubble, 1}}) {
        const PipeCase c{"16bit", schedule, zero, false, dt};
        auto configure = [&](const std::string& run) {
            Config cfg = pipe_config(c, dir.file("train.bin"), "", run);
            cfg.train.eval_every = 0;
            cfg.precision.init_scale = 2e6;  // fp16: overflows in the first steps, so steps are skipped
            cfg.precision.hysteresis = 1;
            return cfg;
        };
        const std::string what = str(dtype_name(dt), " ", setting_text(schedule), " ZeRO-", zero);
        Config cfg = configure(dir.file(str("world_", dtype_name(dt), "_", setting_text(schedule))));
        cfg.parallel.pipeline = 2;
        const TrainSummary got = train(cfg, TrainOptions{});
        Config ref_cfg = configure(dir.file(str("ref", me, "_", dtype_name(dt), "_", setting_text(schedule))));
        ref_cfg.parallel.schedule = PipelineSchedule::k1F1B;
        const TrainSummary ref = test::one_rank_reference(ref_cfg, N / 2, /*collect_params=*/false);
        ASSERT_EQ(got.losses.size(), ref.losses.size());
        EXPECT_EQ(got.skipped, ref.skipped) << what << ": the steps the loss scale skipped differ";
        if (dt == DType::kF16) {
            EXPECT_GT(std::count(ref.skipped.begin(), ref.skipped.end(), true), 0) << "no step overflowed";
        }
        double worst = 0;
        for (size_t s = 0; s < ref.losses.size(); ++s) {
            worst = std::max(worst, std::fabs(got.losses[s] - ref.losses[s]) / ref.losses[s]);
        }
        EXPECT_LT(worst, 2e-3) << what << ": worst relative loss difference " << worst;
    }
}

// Hybrid shard groups inside the stages (np 4: P = 2 x data 2, shard groups of 1 rank, so
// each stage's state is replicated over 2 replicas) at ZeRO-2 and ZeRO-3 (1F1B and
// zero-bubble): one rank's run.
TEST(PipelineHybridTraining, ReplicatedStagesMatchOneRank) {
    const int N = test::world_size();
    if (N != 4) GTEST_SKIP() << "P = 2 x two replicas needs 4 ranks";
    const int me = test::world_rank();
    test::SharedDir dir("pipeline_hybrid");
    test::write_shared_train_shard(dir);
    for (const auto& [zero, schedule] : {std::pair{2, PipelineSchedule::k1F1B}, std::pair{3, PipelineSchedule::k1F1B},
                                         std::pair{3, PipelineSchedule::kZeroBubble}}) {
        const PipeCase c{"hybrid", schedule, zero, zero == 3, DType::kF32};
        const std::string run = str(zero, "_", setting_text(schedule));
        Config cfg = pipe_config(c, dir.file("train.bin"), "", dir.file("world" + run));
        cfg.train.eval_every = 0;
        cfg.parallel.pipeline = 2;
        cfg.parallel.shard_group.ranks = 1;
        TrainOptions world;
        world.collect_params = true;
        const TrainSummary got = train(cfg, world);
        Config ref_cfg = pipe_config(c, dir.file("train.bin"), "", dir.file(str("ref", run, "_", me)));
        ref_cfg.train.eval_every = 0;
        test::expect_matches_reference(got, test::one_rank_reference(ref_cfg, 2),
                                       str("P = 2 x 2 replicas, ZeRO-", zero, ", ", setting_text(schedule)));
    }
}

TEST(PipelineTensorTraining, TwoStagesOfTensorPairsTrackOneRank) {
    const int N = test::world_size();
    if (N != 4) GTEST_SKIP() << "P = 2 x T = 2 needs 4 ranks";
    const int me = test::world_rank();
    test::SharedDir dir("pipeline_tensor");
    test::write_shared_train_shard(dir);
    struct TensorStageCase {
        PipelineSchedule schedule;
        bool llama;
        OptimizerKind optimizer;
    };
    for (const auto& [schedule, llama, optimizer] :
         {TensorStageCase{PipelineSchedule::k1F1B, false, OptimizerKind::kAdamW},
          TensorStageCase{PipelineSchedule::kZeroBubble, false, OptimizerKind::kAdamW},
          // Muon: each stage's split matrices gathered over its tensor pair and orthogonalized whole.
          TensorStageCase{PipelineSchedule::k1F1B, true, OptimizerKind::kMuon}}) {
        const PipeCase c{"3d", schedule, 1, llama, DType::kF32};
        const std::string name = std::string(setting_text(schedule)) + (llama ? "_llama" : "") +
                                 (optimizer == OptimizerKind::kMuon ? "_muon" : "");
        Config cfg = pipe_config(c, dir.file("train.bin"), "", dir.file("world_" + name));
        cfg.train.eval_every = 0;
        cfg.train.optimizer = optimizer;
        cfg.parallel.pipeline = 2;
        cfg.parallel.tensor = 2;
        cfg.parallel.sequence = true;
        const TrainSummary got = train(cfg, TrainOptions{});
        Config ref_cfg = pipe_config(c, dir.file("train.bin"), "", dir.file(str("ref", me, "_", name)));
        ref_cfg.train.eval_every = 0;
        ref_cfg.train.optimizer = optimizer;
        const TrainSummary ref = test::one_rank_reference(ref_cfg, 1, /*collect_params=*/false);
        ASSERT_EQ(got.losses.size(), ref.losses.size());
        for (size_t s = 0; s < ref.losses.size(); ++s) {
            EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s])) << name << " step " << s + 1;
        }
    }
}

// Checkpoints at any mesh: each stage saves its units in the whole model's layout, so a
// checkpoint written at P = 2 resumes at P = 2 (another ZeRO stage), at P = 1 with a tensor
// pair, and (np 4) at P = 4, and one written at P = 1 resumes at P = 2: each resumed run
// reproduces the uninterrupted P = 2 run's last steps and final parameters (the same global
// batch throughout).
TEST(PipelineCheckpoints, ResumeAtAnyPipelineReproducesTheUninterruptedRun) {
    const int N = test::world_size();
    const int D = N / 2;  // data-parallel ranks of the P = 2 runs
    test::SharedDir dir("pipeline_ckpt");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    const PipeCase c{"ckpt", PipelineSchedule::k1F1B, 1, false, DType::kF32};
    // A run of `pipeline` stages x `tensor` over the world, into `run`, keeping D x 4
    // micro-batches per step.
    auto mesh = [&](const std::string& run, int pipeline, int tensor) {
        Config cfg = pipe_config(c, dir.file("train.bin"), "", dir.file(run));
        cfg.train.eval_every = 0;
        cfg.parallel.pipeline = pipeline;
        cfg.parallel.tensor = tensor;
        cfg.train.grad_accum = 4 * D * pipeline * tensor / N;
        return cfg;
    };
    // Every unit's master weights in a run's final checkpoint, in the whole model's layout.
    auto final_master = [&](const std::string& run) {
        return test::checkpoint_master(dir.file(run) + "/checkpoints/step_00000006");
    };
    Config full_cfg = mesh("full", 2, 1);
    full_cfg.checkpoint.every = 3;
    TrainSummary tail = train(full_cfg, TrainOptions{});  // what a run resumed after step 3 must reproduce
    ASSERT_EQ(tail.losses.size(), 6u);
    const double fresh_first_loss = tail.losses[0];
    tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
    tail.final_params = final_master("full");
    const std::string step3 = dir.file("full") + "/checkpoints/step_00000003";
    ASSERT_TRUE(std::filesystem::exists(step3 + "/shard_00000_of_" + str(D == 1 ? "00001" : "00002") +
                                        "_stage_001_of_002.h5"))
        << "no file of stage 1 in " << step3;

    auto resumed = [&](const std::string& run, int pipeline, int tensor, int zero_stage, const std::string& from) {
        Config cfg = mesh(run, pipeline, tensor);
        cfg.parallel.zero_stage = zero_stage;
        cfg.checkpoint.resume.mode = ResumeSetting::Mode::kPath;
        cfg.checkpoint.resume.path = from;
        TrainSummary got = train(cfg, TrainOptions{});
        got.final_params = final_master(run);
        test::expect_matches_reference(got, tail, str(run, ": P = 2 step 3 resumed at P = ", pipeline, " x T = ",
                                                      tensor, ", ZeRO-", zero_stage, " (N = ", N, ")"));
    };
    resumed("at_p2_zero3", 2, 1, 3, step3);
    resumed("at_p1_t2", 1, 2, 2, step3);
    if (N == 4) resumed("at_p4", 4, 1, 1, step3);

    // The other way: a run at P = 1 (a tensor pair) saved after step 3, resumed at P = 2.
    Config first = mesh("p1_first", 1, 2);
    first.checkpoint.every = 3;
    train(first, TrainOptions{});
    resumed("p1_at_p2", 2, 1, 0, dir.file("p1_first") + "/checkpoints/step_00000003");

    // model.init_from: step 3's weights, consolidated, start a P = 2 run as they start a P = 1
    // one (a tensor pair): the same losses.
    if (test::world_rank() == 0) consolidate(step3, dir.file("step3.safetensors"), DType::kF32, false);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> first_losses[2];
    for (const int pipeline : {1, 2}) {
        Config cfg = mesh(str("init_p", pipeline), pipeline, 3 - pipeline);
        cfg.model.init_from = dir.file("step3.safetensors");
        cfg.train.max_steps = 2;
        first_losses[pipeline - 1] = train(cfg, TrainOptions{}).losses;
    }
    ASSERT_EQ(first_losses[1].size(), 2u);
    for (size_t s = 0; s < 2; ++s) {
        EXPECT_NEAR(first_losses[1][s], first_losses[0][s], 1e-5 * first_losses[0][s])
            << "step " << s + 1 << " from model.init_from at P = 2 vs P = 1";
    }
    EXPECT_GT(std::fabs(first_losses[1][0] - fresh_first_loss), 1e-3)
        << "the imported weights were not used: the loss of a fresh model";
}

}  // namespace
}  // namespace zt
