#include "ztrain/train/resume_policy.hpp"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/gpt.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt {

ResumePolicy::ResumePolicy(const Config& cfg, bool root) : m_cfg(cfg), m_root(root) {
    m_ckpt_dir = cfg.checkpoint.dir.empty() ? (std::filesystem::path(cfg.run.dir) / "checkpoints").string()
                                            : cfg.checkpoint.dir;
    std::string note;
    m_dir = resolve_resume(setting_text(cfg.checkpoint.resume), m_ckpt_dir, &note);
    if (root && !note.empty()) std::printf("ztrain: note: %s\n", note.c_str());
}

void ResumePolicy::initial_weights(const Gpt& model, ModelState& state, Communicator& comm) const {
    const std::string& init_from = m_cfg.model.init_from;
    if (!init_from.empty() && !resuming()) {
        import_weights(init_from, model.layout(), m_cfg.model, state, &comm);
        if (m_root) std::printf("ztrain: initialized weights from %s\n", init_from.c_str());
    } else if (!init_from.empty() && m_root) {
        std::printf("ztrain: model.init_from ignored: resuming from a checkpoint of this run\n");
    }
}

CheckpointRecord ResumePolicy::load(ModelState& state, Communicator& comm) {
    CheckpointRecord loaded;
    if (!resuming()) return loaded;
    // resume=auto falls back to older complete checkpoints when the newest is damaged;
    // an explicit PATH is loaded or refused.
    std::vector<std::string> candidates{m_dir};
    if (m_cfg.checkpoint.resume.mode == ResumeSetting::Mode::kAuto) {
        for (const std::string& d : list_checkpoints(m_ckpt_dir)) {
            if (std::filesystem::path(d) != std::filesystem::path(m_dir)) candidates.push_back(d);
        }
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
        try {
            loaded = load_checkpoint(candidates[i], state, comm);
            m_dir = candidates[i];
            break;
        } catch (const InputError& e) {
            if (i + 1 == candidates.size()) throw;
            if (m_root) {
                std::fprintf(stderr, "ztrain: warning: checkpoint %s rejected: %s; falling back to %s\n",
                             candidates[i].c_str(), e.what(), candidates[i + 1].c_str());
            }
        }
    }
    // The data order and sampling are functions of (seed, step): another seed would silently
    // continue a different run, so it is refused (every rank read the same meta: all throw).
    const uint64_t seed = m_cfg.train.seed;
    if (loaded.seed_known && loaded.seed != seed) {
        throw InputError(str(m_dir, ": train.seed = ", seed, " differs from the checkpoint's train.seed = ",
                             loaded.seed, " (the data order depends on it): resume with --train.seed=",
                             loaded.seed, ", or start over with checkpoint.resume=never"));
    }
    return loaded;
}

void ResumePolicy::report(const TrainProgress& progress) const {
    if (!resuming() || !m_root) return;
    std::printf("ztrain: resumed from %s at step %ld (%llu samples seen)\n", m_dir.c_str(), progress.step,
                static_cast<unsigned long long>(progress.samples_seen));
    if (progress.step >= m_cfg.train.max_steps) {
        std::printf("ztrain: the checkpoint already reaches train.max_steps = %d: nothing to train "
                    "(raise train.max_steps, or --checkpoint.resume=never to start over)\n",
                    m_cfg.train.max_steps);
    }
}

}  // namespace zt
