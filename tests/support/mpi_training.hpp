// Shared pieces of the MPI training tests: world rank/size, a shared scratch directory, a
// synthetic token shard and the small model configuration they train.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shared_dir.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt::test {

inline int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

inline int world_size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/// n tokens below vocab; runs of three equal tokens give the model something to learn.
inline void write_random_shard(const std::string& path, size_t n, uint32_t vocab) {
    std::vector<uint32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(random_bits(5, 0, i / 3) % vocab);
    write_token_shard(path, tokens);
}

/// `dir`'s train.bin, 30000 tokens of tiny_mpi_config's vocabulary (write_random_shard),
/// written by rank 0 and there for every rank on return. Collective over the world.
inline void write_shared_train_shard(const SharedDir& dir) {
    if (world_rank() == 0) write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
}

/// Two layers, 24 wide, seq 16, vocab 61 (padded to 64): small enough to train 10 steps under
/// every strategy in a second, large enough to exercise every unit and clipping.
inline Config tiny_mpi_config(const std::string& train_file, const std::string& run_dir) {
    Config c;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 24;
    c.model.seq_len = 16;
    c.model.vocab_size = 61;
    c.model.vocab_pad_to = 8;
    c.data.train = train_file;
    c.train.micro_batch = 2;
    c.train.grad_accum = 2;
    c.train.max_steps = 10;
    c.train.lr = 3e-3;
    c.train.lr_min = 3e-4;
    c.train.warmup_steps = 2;
    c.train.weight_decay = 0.1;
    c.train.grad_clip = 0.5;  // low enough that clipping is active in some steps
    c.parallel.timeout_s = 30;  // a deadlocked collective names itself within 30 s
    c.train.eval_every = 0;
    c.train.sample_tokens = 0;
    c.train.log_every = 1000;
    c.train.threads = 1;
    c.parallel.bucket_mb = 1;
    c.run.dir = run_dir;
    return c;
}

/// tiny_mpi_config's model as a Llama: 2 query heads sharing 1 key/value head (head size 12),
/// SwiGLU width 40, an untied head (unit 0 then holds embedding and head).
inline Config as_llama(Config c) {
    c.model.arch = ModelArch("llama");
    c.model.n_kv_head = 1;
    c.model.ffn_dim = 40;
    c.model.tie_embeddings = false;
    return c;
}

/// A Llama-block model (as_llama's, or tensor_config's Llama) as Qwen `family` (2 or 3):
/// qwen2 with q/k/v biases; qwen3 with q/k head norms and a head size (6) of its own. Any
/// other value: the model as it is.
inline Config as_qwen(Config c, int family) {
    if (family == 2) {
        c.model.arch = ModelArch("qwen2");
        c.model.qkv_bias = true;
    } else if (family == 3) {
        c.model.arch = ModelArch("qwen3");
        c.model.qk_norm = true;
        c.model.head_dim = 6;
    }
    return c;
}

/// Every unit's master weights in checkpoint `step_dir`, in the whole model's layout (read
/// through CheckpointReader, so the same at any tensor split and pipeline that wrote it).
inline std::vector<float> checkpoint_master(const std::string& step_dir) {
    CheckpointReader reader(step_dir);
    std::vector<float> all;
    const auto units = reader.meta().at("units").get<std::vector<size_t>>();
    for (size_t u = 0; u < units.size(); ++u) {
        std::vector<float> unit(units[u]);
        reader.read(static_cast<int>(u), 0, units[u], "master", unit.data());
        all.insert(all.end(), unit.begin(), unit.end());
    }
    return all;
}

/// The one-rank run (MPI_COMM_SELF, DDP, one pipeline stage, no tensor group) of the global
/// batch `cfg` trains on `data_ranks` data-parallel ranks: each of its steps accumulates their
/// micro-batches, in the same order (gradient accumulation over grad_accum x data_ranks).
/// What every equivalence test compares a parallel run with.
inline TrainSummary one_rank_reference(Config cfg, int data_ranks, bool collect_params = true) {
    cfg.parallel.zero_stage = 0;
    cfg.parallel.pipeline = 1;
    cfg.parallel.tensor = 1;
    cfg.parallel.sequence = false;
    // Recompute changes memory, not math (test_gpt_gradcheck: bit for bit): the reference
    // keeps every activation, so a parallel run's recompute is checked against that too.
    cfg.train.recompute = ActivationRecompute::kNone;
    cfg.train.grad_accum *= data_ranks;
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    self.collect_params = collect_params;
    return train(cfg, self);
}

/// A parallel run against the one-rank run with the same global batch (gradient
/// accumulation), as the equivalence tests compare them: 1e-5 relative on every step's loss,
/// and on the final parameters 1e-5 relative plus an absolute floor of 4e-6 (why: see
/// test_zero_equivalence.cpp; hybrid groups sum in a third order, and on a CPU with AVX-512
/// kernels one element of 16k of the hybrid test's ZeRO-2/3 runs at N = 4 left the one-rank
/// run's by 2.3e-6). `what` names the run in the messages.
/// `abs_tol`: the absolute part of the parameters' tolerance (1e-5 relative on top).
inline void expect_matches_reference(const TrainSummary& got, const TrainSummary& ref, const std::string& what,
                                     double abs_tol = 4e-6) {
    ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
        EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s])) << what << " step " << s + 1;
    }
    ASSERT_EQ(got.final_params.size(), ref.final_params.size()) << what;
    double worst = -1.0;  // largest excess over the tolerance
    size_t worst_i = 0;
    size_t bad = 0;
    for (size_t i = 0; i < ref.final_params.size(); ++i) {
        const double diff = std::fabs(static_cast<double>(got.final_params[i]) - ref.final_params[i]);
        const double excess = diff - (1e-5 * std::fabs(static_cast<double>(ref.final_params[i])) + abs_tol);
        if (excess > 0) ++bad;
        if (excess > worst) {
            worst = excess;
            worst_i = i;
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " parameters differ; worst " << worst_i << " is "
                       << got.final_params[worst_i] << ", one-rank reference " << ref.final_params[worst_i];
}

}  // namespace zt::test
