// Padding makes any world size work: a model whose unit sizes are prime numbers trains at
// N = 2, 3 and 4 under every ZeRO stage, and matches a single rank with accumulation.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "shared_dir.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

bool is_prime(size_t n) {
    if (n < 2) return false;
    for (size_t d = 2; d * d <= n; ++d) {
        if (n % d == 0) return false;
    }
    return true;
}

TEST(Uneven, PrimeUnitSizesTrainAtAnyWorldSize) {
    int me = 0, N = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    // Width 13, one head, vocab 7 unpadded, 11 positions: unit 0 = wte 91 (aligned to 96)
    // + wpe 143 = 239; each block = 2269; ln_f = 13 (aligned to 16) + 13 = 29. All prime,
    // so no unit divides by any world size > 1.
    Config c;
    c.model.n_layer = 2;
    c.model.n_head = 1;
    c.model.n_embd = 13;
    c.model.seq_len = 11;
    c.model.vocab_size = 7;
    c.model.vocab_pad_to = 1;
    const ModelLayout layout = make_model_layout(c.model);
    for (size_t u = 0; u < layout.unit_numel.size(); ++u) {
        EXPECT_TRUE(is_prime(layout.unit_numel[u])) << "unit " << u << " has " << layout.unit_numel[u] << " elements";
    }
    test::ScratchDir dir("uneven" + std::to_string(me));
    std::vector<uint32_t> tokens(4000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(random_bits(1, 2, i) % 7);
    write_token_shard(dir.file("train.bin"), tokens);
    c.data.train = dir.file("train.bin");
    c.train.micro_batch = 1;
    c.train.max_steps = 4;
    c.train.eval_every = 0;
    c.train.sample_tokens = 0;
    c.train.threads = 1;
    c.train.log_every = 1000;
    // Every rank reads its own copy of the data; the world runs share one run directory.
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    Config ref_cfg = c;
    ref_cfg.train.grad_accum = N;
    ref_cfg.run.dir = dir.file("ref");
    const TrainSummary ref = train(ref_cfg, self);
    test::SharedDir shared("uneven-world");  // a run's directory is shared by its ranks
    for (int stage = 0; stage <= 3; ++stage) {
        Config w = c;
        w.parallel.zero_stage = stage;
        w.run.dir = shared.file("world" + std::to_string(stage));
        const TrainSummary got = train(w);
        ASSERT_EQ(got.losses.size(), ref.losses.size());
        for (size_t s = 0; s < ref.losses.size(); ++s) {
            EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s]))
                << "stage " << stage << " N=" << N << " step " << s + 1;
        }
    }
}

}  // namespace
}  // namespace zt
