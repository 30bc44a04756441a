// with_global_batch: train.global_batch fixes the sequences per optimizer step, and
// train.grad_accum follows the world size (Megatron's --global-batch-size, DeepSpeed's
// train_batch_size), so a run resumed on more or fewer ranks keeps its batch.
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

Config with_global_batch(const Config& deck, int world, std::string* note) {
    Config cfg = deck;
    const TrainConfig& t = deck.train;
    const ParallelConfig& p = deck.parallel;
    if (t.global_batch <= 0) return cfg;
    const long long model_ranks = static_cast<long long>(p.tensor) * p.pipeline;
    // A world the mesh cannot split is refused by the mesh, with its own message.
    if (model_ranks <= 0 || world <= 0 || world % model_ranks != 0) return cfg;
    const long long data = world / model_ranks;
    const long long per_step = data * t.micro_batch;
    ZT_INPUT_CHECK(static_cast<long long>(t.global_batch) % per_step == 0, "train.global_batch = ", t.global_batch,
                   ": not a multiple of train.micro_batch x data ranks = ", t.micro_batch, " x ", data, " = ", per_step,
                   " (", world, " rank(s) / (parallel.tensor ", p.tensor, " x parallel.pipeline ", p.pipeline,
                   ")); give a global batch that ", data, " data rank(s) split evenly, or another micro_batch");
    const long long accum = static_cast<long long>(t.global_batch) / per_step;
    ZT_INPUT_CHECK(accum <= 1 << 20, "train.global_batch = ", t.global_batch, ": ", accum,
                   " micro-steps per step is too many");
    if (p.pipeline > 1) {
        ZT_INPUT_CHECK(accum >= p.pipeline, "train.global_batch = ", t.global_batch, ": ", accum,
                       " micro-batch(es) per step on ", data, " data rank(s), fewer than parallel.pipeline = ", p.pipeline,
                       " (one in flight per stage); give a global batch of at least ", per_step * p.pipeline);
        ZT_INPUT_CHECK(p.schedule != PipelineSchedule::kInterleaved || accum % p.pipeline == 0,
                       "train.global_batch = ", t.global_batch, ": ", accum, " micro-batches per step on ", data,
                       " data rank(s), not a multiple of parallel.pipeline = ", p.pipeline,
                       " as parallel.schedule = interleaved needs");
    }
    cfg.train.grad_accum = static_cast<int>(accum);
    // A resolved deck from another world size carries that world's grad_accum: replaced.
    if (note != nullptr && t.grad_accum != 1 && t.grad_accum != accum) {
        *note = str("train.grad_accum = ", t.grad_accum, " replaced by ", accum, ": train.global_batch = ",
                    t.global_batch, " over ", data, " data rank(s) x micro_batch ", t.micro_batch);
    }
    return cfg;
}

}  // namespace zt
