// 3D parallelism at np 8 (oversubscribed): 2 pipeline stages x tensor pairs x 2 data-parallel
// ranks, against one rank training the same global batch: every step's loss at 1e-5 and the
// final master weights (read from both runs' last checkpoints in the whole model's layout) at
// the equivalence tests' tolerance, for GPT-2 at ZeRO-1 and Llama at ZeRO-3 with sequence
// parallelism (1F1B), and GPT-2 at ZeRO-2 with sequence parallelism under zero-bubble.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

TEST(Pipeline3D, TwoStagesOfTensorPairsOverTwoDataRanksMatchOneRank) {
    if (test::world_size() != 8) GTEST_SKIP() << "P = 2 x T = 2 x data 2 needs 8 ranks";
    const int me = test::world_rank();
    test::SharedDir dir("pipeline_3d");
    test::write_shared_train_shard(dir);
    struct Case {
        const char* name;
        bool llama;
        int zero_stage;
        bool sequence;
        PipelineSchedule schedule;
    };
    for (const Case c : {Case{"gpt2_zero1", false, 1, false, PipelineSchedule::k1F1B},
                         Case{"llama_zero3_sp", true, 3, true, PipelineSchedule::k1F1B},
                         Case{"gpt2_zero2_sp_zb", false, 2, true, PipelineSchedule::kZeroBubble}}) {
        auto configure = [&](const std::string& run) {
            Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file(run));
            if (c.llama) cfg = test::as_llama(cfg);
            cfg.model.n_layer = 4;
            cfg.train.grad_accum = 4;
            cfg.train.max_steps = 4;
            cfg.checkpoint.every = 4;
            cfg.run.tensorboard = false;
            return cfg;
        };
        Config cfg = configure(str(c.name, "_3d"));
        cfg.parallel.pipeline = 2;
        cfg.parallel.tensor = 2;
        cfg.parallel.sequence = c.sequence;
        cfg.parallel.zero_stage = c.zero_stage;
        cfg.parallel.schedule = c.schedule;
        cfg.parallel.shard_group.ranks = 0;
        TrainSummary got = train(cfg, TrainOptions{});
        TrainSummary ref = test::one_rank_reference(configure(str(c.name, "_ref", me)), 2, /*collect_params=*/false);
        MPI_Barrier(MPI_COMM_WORLD);
        got.final_params = test::checkpoint_master(dir.file(str(c.name, "_3d")) + "/checkpoints/step_00000004");
        ref.final_params = test::checkpoint_master(dir.file(str(c.name, "_ref", me)) + "/checkpoints/step_00000004");
        test::expect_matches_reference(got, ref, str(c.name, ": P = 2 x T = 2 x data 2 at np 8"));
    }
}

}  // namespace
}  // namespace zt
