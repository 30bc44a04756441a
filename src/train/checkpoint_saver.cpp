#include "ztrain/train/checkpoint_saver.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/train/step_reporter.hpp"

namespace zt {

CheckpointSaver::CheckpointSaver(const Config& cfg, std::string ckpt_dir, ModelState& state, Communicator& comm,
                                 StepReporter& reporter)
    : m_cfg(cfg), m_ckpt_dir(std::move(ckpt_dir)), m_state(state), m_comm(comm), m_reporter(reporter) {}

bool CheckpointSaver::due(long done, bool stop_requested) const {
    const bool periodic = m_cfg.checkpoint.every > 0 && done % m_cfg.checkpoint.every == 0;
    return stop_requested || periodic || done == m_cfg.train.max_steps;
}

void CheckpointSaver::save(const TrainProgress& p) {
    const bool root = m_comm.rank() == 0;
    const auto t_save = std::chrono::steady_clock::now();
    try {
        CheckpointRecord record;
        record.progress = p;
        record.dtype = dtype_name(m_cfg.precision.dtype);
        record.seed = m_cfg.train.seed;
        record.config_ini = to_ini(m_cfg);
        const std::string dir = save_checkpoint(m_ckpt_dir, m_state, m_comm, record, m_cfg.checkpoint.keep);
        m_reporter.checkpoint_written(
            dir, seconds_since(t_save));
    } catch (const Error& e) {
        // Every rank sees the same error (the save agrees on failures). `latest` still
        // names a complete checkpoint; the half-written directory goes.
        if (root) {
            std::error_code ec;
            std::filesystem::remove_all(std::filesystem::path(m_ckpt_dir) / (checkpoint_dir_name(p.step) + ".partial"),
                                        ec);
        }
        if (m_cfg.checkpoint.on_error == OnCheckpointError::kStop) {
            throw Error(str("checkpoint at step ", p.step, " failed: ", e.what(),
                            " (latest still names a complete checkpoint; checkpoint.on_error = continue trains "
                            "on)"));
        }
        if (root) {
            std::fprintf(stderr, "ztrain: warning: checkpoint at step %ld failed: %s; training continues "
                         "(checkpoint.on_error = continue); latest still names a complete checkpoint\n",
                         p.step, e.what());
        }
    }
}

}  // namespace zt
