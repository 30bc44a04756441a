// The training run: data -> micro-steps (forward, backward) -> gradient reduction ->
// clipping -> AdamW, with evaluation, samples, progress lines and metrics.jsonl. train()
// wires the components of train/ together (see trainer.cpp's header for the map).
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"

namespace zt {

class ModelState;

/// What a finished run reports (rank 0's view; tests use it).
struct TrainSummary {
    int steps = 0;
    std::vector<double> losses;      ///< train loss per optimizer step
    std::vector<double> loss_scales; ///< loss scale used at each step (1 outside fp16)
    std::vector<bool> skipped;       ///< steps skipped for non-finite gradients
    std::vector<double> grad_norms;  ///< unscaled global gradient norm (NaN when skipped)
    std::vector<double> val_losses;  ///< per evaluation
    std::string last_sample;
    std::vector<float> final_params;  ///< all units' unpadded parameters, when asked for
    bool stopped_by_signal = false;   ///< a stop signal ended the run after a checkpoint
};

struct TrainOptions {
    MPI_Comm comm = MPI_COMM_WORLD;  ///< the ranks that train together
    bool collect_params = false;     ///< fill TrainSummary::final_params (tests)
    /// --force-unlock: break a directory lock recorded by a job on another host (run_lock.hpp).
    bool force_unlock = false;
    /// Test hooks: after the gradients of a step are reduced (before the overflow check),
    /// and after the step was applied or skipped. `step` is 1-based.
    std::function<void(long step, ModelState& state)> after_grad_sync;
    std::function<void(long step, ModelState& state, bool skipped)> after_step;
    /// Pretraining micro-steps: the input tokens this rank trains on, before its forward
    /// (`step` 1-based, `micro` from 0).
    std::function<void(long step, int micro, const std::vector<int32_t>& inputs)> on_inputs;
};

/// Runs the whole job described by `cfg` (MPI must be initialized). Throws InputError for
/// bad input found before work starts, Error for failures.
TrainSummary train(const Config& cfg, const TrainOptions& options = TrainOptions{});

}  // namespace zt
