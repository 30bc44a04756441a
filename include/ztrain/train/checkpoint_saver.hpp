// When and how the training loop saves: every checkpoint.every steps, at the end, and on a
// stop signal; a failed save either stops the run (checkpoint.on_error = stop, exit 1) or is
// reported and training goes on (continue). Either way `latest` still names a complete
// checkpoint and the half-written directory goes. Not here: the format (ckpt/checkpoint.hpp).
#pragma once

#include <string>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"

namespace zt {

class Communicator;
class ModelState;
class StepReporter;

class CheckpointSaver {
  public:
    CheckpointSaver(const Config& cfg, std::string ckpt_dir, ModelState& state, Communicator& comm,
                    StepReporter& reporter);

    /// Whether the loop saves after `done` steps: periodic, last step, or a stop signal.
    bool due(long done, bool stop_requested) const;

    /// Saves `progress` (collective). Throws Error when the save failed and on_error = stop.
    void save(const TrainProgress& progress);

  private:
    const Config& m_cfg;
    std::string m_ckpt_dir;
    ModelState& m_state;
    Communicator& m_comm;
    StepReporter& m_reporter;
};

}  // namespace zt
