// Where a run starts from: checkpoint.resume resolved against the checkpoint directory
// (auto falls back to older complete checkpoints when the newest is damaged; an explicit
// PATH is loaded or refused), the seed check, and model.init_from for a run that does not
// resume. Not here: the loss-scale state a checkpoint carries (LossScalePolicy::restore) and
// the checkpoint format itself (ckpt/).
#pragma once

#include <string>
#include <vector>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"

namespace zt {

class Communicator;
class Transformer;
class ModelState;

/// The checkpoint directory: checkpoint.dir, or run.dir/checkpoints.
std::string checkpoint_dir(const Config& cfg);

class ResumePolicy {
  public:
    /// Resolves checkpoint.resume (every rank: the same answer). Throws InputError for a
    /// PATH that does not exist, and for a fresh run into a place an earlier run left its
    /// checkpoints or metrics.jsonl in (they would be mixed with this run's, or lost);
    /// rank 0 prints the note of an auto fallback. Collective (the fresh-run check is
    /// agreed: no rank may create this run's files before every rank has looked).
    ResumePolicy(const Config& cfg, Communicator& comm);

    /// The checkpoint directory: checkpoint.dir, or run.dir/checkpoints.
    const std::string& ckpt_dir() const { return m_ckpt_dir; }
    bool resuming() const { return !m_dir.empty(); }
    /// The step directory loaded (after load(): the one that was accepted).
    const std::string& dir() const { return m_dir; }

    /// The step of the checkpoint to resume, read from its meta.h5 without loading it; -1
    /// for a fresh run or a checkpoint whose meta cannot be read.
    long checkpoint_step() const;

    /// model.init_from into `state` for a run that does not resume (collective); a resumed
    /// checkpoint has its own weights, so init_from is then ignored with a line saying so.
    void initial_weights(ModelState& state, Communicator& comm) const;

    /// Loads the checkpoint into `state` (collective) and returns its record (progress, dtype,
    /// seed); a fresh run returns step 0. Throws InputError when no candidate loads, or when train.seed differs
    /// from the checkpoint's (the data order depends on it).
    CheckpointRecord load(ModelState& state, Communicator& comm);

    /// Rank 0: "resumed from ..."; a note when the checkpoint's run had another world size,
    /// shard group, ZeRO stage or dtype, and one when the learning-rate schedule changed (with the lr at
    /// the resumed step under both, and how to keep the old one); and, when the checkpoint
    /// already reaches max_steps, that there is nothing to train. Nothing for a fresh run.
    void report(const CheckpointRecord& resumed, int world_size, int shard_group) const;

  private:
    void refuse_earlier_run() const;
    /// A LoRA run resumed with another base model (model.init_from) than its checkpoint's:
    /// InputError naming both.
    void check_lora_base(const CheckpointRecord& loaded) const;
    /// A checkpoint of another train.optimizer is refused (its moments mean other things).
    void check_optimizer(const CheckpointRecord& loaded) const;
    /// Refuses a model key (other than seq_len and the weight sources) that differs from the
    /// checkpoint's deck `config_ini` (in `dir`), naming both values.
    void check_model(const std::string& config_ini, const std::string& dir) const;
    /// check_model against the checkpoint to resume, before any state is built: its meta.h5,
    /// when readable (a damaged one is the load's to refuse or fall back past).
    void check_model_before_load() const;
    /// Renames each damaged step of `rejected` (resume=auto fell back past it) to
    /// STEP.damaged (rank 0).
    void set_damaged_aside(const std::vector<std::string>& rejected) const;
    /// A note when the global batch (micro_batch x grad_accum x ranks) differs from the
    /// checkpoint's run, with the grad_accum that keeps it.
    void batch_note(const CheckpointRecord& resumed, int world_size) const;
    void schedule_note(const CheckpointRecord& resumed) const;

    const Config& m_cfg;
    bool m_root;
    std::string m_ckpt_dir;
    std::string m_dir;
};

}  // namespace zt
