#include "ztrain/train/resume_policy.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/agree.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt {
namespace {

/// For an explicit checkpoint.resume that was refused: the newest complete checkpoint beside
/// it, as a sentence to end the error with ("" when there is none).
std::string complete_checkpoint_hint(const std::string& refused) {
    const std::string good = newest_complete_checkpoint(refused);
    // The refused checkpoint itself complete: it was refused for what it holds, not damage.
    std::error_code ec;
    if (good.empty() || std::filesystem::equivalent(good, refused, ec)) return "";
    return str(". The newest complete checkpoint there is ", good, ": resume it with --checkpoint.resume=", good,
               " (checkpoint.resume=auto falls back to it by itself)");
}

}  // namespace

std::string checkpoint_dir(const Config& cfg) {
    return cfg.checkpoint.dir.empty() ? (std::filesystem::path(cfg.run.dir) / "checkpoints").string()
                                      : cfg.checkpoint.dir;
}

ResumePolicy::ResumePolicy(const Config& cfg, Communicator& comm) : m_cfg(cfg), m_root(comm.rank() == 0) {
    m_ckpt_dir = checkpoint_dir(cfg);
    std::string note;
    m_dir = resolve_resume(setting_text(cfg.checkpoint.resume), m_ckpt_dir, &note);
    if (m_root && !note.empty()) std::printf("ztrain: note: %s\n", note.c_str());
    // Agreed, so every rank has looked before any rank goes on to write this run's files
    // (rank 0 creates metrics.jsonl soon after; a slower rank would then see it and refuse
    // alone, leaving the others waiting in a collective).
    agree_across_ranks(comm, [&] {
        if (!resuming()) refuse_earlier_run();
        check_model_before_load();
    });
}

void ResumePolicy::refuse_earlier_run() const {
    // A fresh run writes step_* checkpoints, `latest` and metrics.jsonl: an earlier run's
    // would be mixed with them (pruning by `keep` sees both runs' steps) or overwritten.
    const std::vector<std::string> earlier = list_checkpoints(m_ckpt_dir);
    const std::filesystem::path metrics = std::filesystem::path(m_cfg.run.dir) / "metrics.jsonl";
    std::error_code ec;
    // An empty metrics.jsonl holds no step of any run (a start refused after it was opened).
    const bool has_metrics = std::filesystem::exists(metrics, ec) &&
                             !(std::filesystem::is_regular_file(metrics, ec) && std::filesystem::file_size(metrics, ec) == 0);
    if (earlier.empty() && !has_metrics) return;
    std::string what;
    if (!earlier.empty()) {
        what = str(earlier.size(), " checkpoint(s) of an earlier run in ", m_ckpt_dir, " (newest ",
                   std::filesystem::path(earlier.front()).filename().string(), ")");
    }
    if (has_metrics) what += str(what.empty() ? "" : " and ", metrics.string(), " of an earlier run");
    const bool never = m_cfg.checkpoint.resume.mode == ResumeSetting::Mode::kNever;
    const char* why = never ? "checkpoint.resume = never starts a fresh run"
                            : "checkpoint.resume = auto found no checkpoint to resume, so this is a fresh run";
    // Under auto there is no checkpoint to continue from: advising auto again would go round.
    const char* continue_it = never && !earlier.empty() ? "Continue it with --checkpoint.resume=auto, give" : "Give";
    throw InputError(str(why, ", but there is ", what, ": the new run would mix with it or overwrite it. ", continue_it,
                         " this run another --run.dir, or remove the old files (rm -r ", m_cfg.run.dir, ")"));
}

long ResumePolicy::checkpoint_step() const {
    if (!resuming()) return -1;
    try {
        return read_checkpoint_meta(m_dir).at("step").get<long>();
    } catch (const std::exception&) {
        return -1;  // damaged or unreadable: load() decides (a fallback, or a refusal naming it)
    }
}

void ResumePolicy::initial_weights(ModelState& state, Communicator& comm) const {
    const std::string& init_from = m_cfg.model.init_from;
    if (!init_from.empty() && !resuming()) {
        import_weights(init_from, state.layout(), m_cfg.model, state, &comm);
        if (m_root) std::printf("ztrain: initialized weights from %s\n", init_from.c_str());
    } else if (!init_from.empty() && m_root) {
        std::printf("ztrain: model.init_from ignored: resuming from a checkpoint of this run\n");
    }
}

namespace {

/// The deck the checkpoint's run was started with; none where it cannot be read (an older
/// key set), which gives no note and no check.
std::optional<Config> saved_deck(const CheckpointRecord& r, const std::string& dir) {
    try {
        return parse_deck_text(r.config_ini, str(dir, " (the checkpoint's config)"));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

}  // namespace

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
    // A LoRA base that moved is read where this run names it (its files' fingerprint is
    // checked against the checkpoint's once the inputs are fingerprinted: check_inputs).
    const std::string base = m_cfg.model.lora.on() && !m_cfg.model.init_from.empty()
                                 ? std::filesystem::absolute(m_cfg.model.init_from).lexically_normal().string()
                                 : std::string();
    std::vector<std::string> rejected;
    for (size_t i = 0; i < candidates.size(); ++i) {
        try {
            loaded = load_checkpoint(candidates[i], state, comm, base);
            m_dir = candidates[i];
            break;
        } catch (const InputError& e) {
            if (i + 1 == candidates.size() && candidates.size() > 1) throw;
            if (i + 1 == candidates.size()) throw InputError(str(e.what(), complete_checkpoint_hint(candidates[i])));
            if (m_root) {
                std::fprintf(stderr, "ztrain: warning: checkpoint %s rejected: %s; falling back to %s\n",
                             candidates[i].c_str(), e.what(), candidates[i + 1].c_str());
            }
            rejected.push_back(candidates[i]);
        }
    }
    if (m_root) set_damaged_aside(rejected);
    // The data order and sampling are functions of (seed, step): another seed would silently
    // continue a different run, so it is refused (every rank read the same meta: all throw).
    const uint64_t seed = m_cfg.train.seed;
    if (loaded.seed_known && loaded.seed != seed) {
        throw InputError(str(m_dir, ": train.seed = ", seed, " differs from the checkpoint's train.seed = ",
                             loaded.seed, " (the data order depends on it): resume with --train.seed=",
                             loaded.seed, ", or start over with checkpoint.resume=never"));
    }
    check_lora_base(loaded);
    check_optimizer(loaded);
    check_model(loaded.config_ini, m_dir);
    return loaded;
}

void ResumePolicy::set_damaged_aside(const std::vector<std::string>& rejected) const {
    // A damaged step left in place would count among checkpoint.keep's newest at the next
    // save, and the one this run resumed from would be pruned in its stead. Renamed, not
    // removed: list_checkpoints skips a name with a dot, so it is neither kept nor retried.
    for (const std::string& dir : rejected) {
        if (verify_checkpoint_files(dir).empty()) continue;  // complete: refused for another reason
        std::string aside = dir + ".damaged";
        for (int n = 2; std::filesystem::exists(aside); ++n) aside = str(dir, ".damaged", n);
        std::error_code ec;
        std::filesystem::rename(dir, aside, ec);
        if (ec) {
            std::fprintf(stderr, "ztrain: warning: cannot move the damaged checkpoint %s aside: %s\n", dir.c_str(),
                         ec.message().c_str());
        } else {
            std::fprintf(stderr, "ztrain: moved the damaged checkpoint %s aside to %s (out of checkpoint.keep's "
                                 "rotation)\n", dir.c_str(), aside.c_str());
        }
    }
}

void ResumePolicy::check_model_before_load() const {
    if (!resuming()) return;
    nlohmann::json meta;
    try {
        meta = read_checkpoint_meta(m_dir);
    } catch (const std::exception&) {
        return;
    }
    if (meta.contains("config_ini") && meta["config_ini"].is_string()) {
        check_model(meta["config_ini"].get<std::string>(), m_dir);
    }
}

void ResumePolicy::check_model(const std::string& config_ini, const std::string& dir) const {
    // The keys that change the weights' shapes (named here, not as a count of elements at the
    // load) or what they compute: the heads' split, the vocabulary mask, rotary, the norms,
    // the attention window.
    static const char* const kKeys[] = {
        "model.arch",         "model.n_layer",       "model.n_embd",            "model.ffn_dim",
        "model.vocab_pad_to", "model.n_head",        "model.n_kv_head",         "model.head_dim",
        "model.vocab_size",   "model.rope_theta",    "model.rope_scaling",      "model.rope_factor",
        "model.rope_low_freq_factor", "model.rope_high_freq_factor", "model.rope_original_context",
        "model.norm_eps",     "model.sliding_window", "model.qkv_bias",         "model.qk_norm",
        "model.tie_embeddings"};
    if (config_ini.empty()) return;
    CheckpointRecord record;
    record.config_ini = config_ini;
    const std::optional<Config> deck = saved_deck(record, dir);
    if (!deck) return;
    // seq_len is a shape where positions are a learned table (GPT-2's wpe): there the model's
    // size depends on it.
    ModelConfig at_saved_length = m_cfg.model;
    at_saved_length.seq_len = deck->model.seq_len;
    const Family& family = model_family(m_cfg.model);
    if (at_saved_length.seq_len != m_cfg.model.seq_len &&
        family.parameter_count(at_saved_length) != family.parameter_count(m_cfg.model)) {
        throw InputError(str(dir, ": model.seq_len = ", m_cfg.model.seq_len, " differs from the checkpoint's model.seq_len = ",
                             deck->model.seq_len, " (", family.name(),
                             "'s learned position table has a row per position): resume with --model.seq_len=",
                             deck->model.seq_len, ", or train this model in another run.dir"));
    }
    for (const char* key : kKeys) {
        const std::string was = config_value_text(*deck, key);
        const std::string now = config_value_text(m_cfg, key);
        if (was == now) continue;
        // The weights of another shape cannot start this model either.
        const std::string key_text = key;
        const bool shape = key_text == "model.n_layer" || key_text == "model.n_embd" || key_text == "model.ffn_dim" ||
                           key_text == "model.vocab_pad_to";
        throw InputError(str(dir, ": ", key, " = ", now, " differs from the checkpoint's ", key, " = ", was,
                             " (its weights were trained for that model): resume with --", key, "=", was,
                             shape ? ", or train this model in another run.dir"
                                   : ", or start from its weights (zt-consolidate, then model.init_from) with "
                                     "checkpoint.resume=never"));
    }
}

void ResumePolicy::check_optimizer(const CheckpointRecord& loaded) const {
    // AdamW's and Muon's moments mean different things (Muon keeps no second moment for its
    // matrices: AdamW would divide by zeros); a checkpoint without a config was AdamW's.
    OptimizerKind was = OptimizerKind::kAdamW;
    if (!loaded.config_ini.empty()) {
        const std::optional<Config> deck = saved_deck(loaded, m_dir);
        if (!deck) return;
        was = deck->train.optimizer;
    }
    const OptimizerKind now = m_cfg.train.optimizer;
    if (was == now) return;
    throw InputError(str(m_dir, ": train.optimizer = ", setting_text(now), " differs from the checkpoint's ",
                         setting_text(was), " (its optimizer state is ", setting_text(was),
                         "'s): resume with --train.optimizer=", setting_text(was),
                         ", or start from its weights (zt-consolidate, then model.init_from) with checkpoint.resume=never"));
}

void ResumePolicy::check_lora_base(const CheckpointRecord& loaded) const {
    // LoRA trains adapters for one base. A resume naming it at another path goes on where
    // the checkpoint fingerprinted the base's files (the inputs' check compares them: other
    // content exits 2); a checkpoint without that fingerprint must name the same path.
    if (!m_cfg.model.lora.on() || m_cfg.model.init_from.empty()) return;
    const std::optional<Config> deck = saved_deck(loaded, m_dir);
    if (!deck) return;
    const std::string& old = deck->model.init_from;
    const auto same = [](const std::string& a, const std::string& b) {
        std::error_code ec;
        return a == b || std::filesystem::equivalent(a, b, ec);
    };
    if (old.empty() || same(old, m_cfg.model.init_from)) return;
    if (loaded.inputs.is_object() && loaded.inputs.contains("base")) {
        if (m_root) {
            std::printf("ztrain: the LoRA run's base was %s, this run names %s: its files are checked against the "
                        "checkpoint's fingerprint of the base\n",
                        (loaded.lora_base.empty() ? old : loaded.lora_base).c_str(), m_cfg.model.init_from.c_str());
        }
        return;
    }
    throw InputError(str(m_dir, ": the LoRA run's base is ", old, ", this run names ", m_cfg.model.init_from,
                         " (model.init_from / model.from_hf): its adapters were trained on the first; resume with "
                         "the same base, or start over with checkpoint.resume=never"));
}

void ResumePolicy::report(const CheckpointRecord& resumed, int world_size, int shard_group) const {
    if (!resuming() || !m_root) return;
    const TrainProgress& progress = resumed.progress;
    std::printf("ztrain: resumed from %s at step %ld (%llu samples seen)\n", m_dir.c_str(), progress.step,
                static_cast<unsigned long long>(progress.samples_seen));
    const auto groups = [](int world, int group) {
        return group > 0 && group != world ? str(" in shard groups of ", group) : std::string();
    };
    const auto mesh = [](int t, int p) {
        return str(t > 1 ? str(", tensor ", t) : std::string(), p > 1 ? str(", pipeline ", p) : std::string());
    };
    const int parts = m_cfg.parallel.tensor * m_cfg.parallel.pipeline;  // ranks per data-parallel rank
    const std::string was = str("world size ", resumed.world_size, mesh(resumed.tensor, resumed.pipeline),
                                groups(resumed.world_size / (resumed.tensor * resumed.pipeline), resumed.shard_group),
                                ", ZeRO stage ", resumed.zero_stage, ", ", resumed.dtype);
    const std::string now = str("world size ", world_size, mesh(m_cfg.parallel.tensor, m_cfg.parallel.pipeline),
                                groups(world_size / parts, shard_group), ", ZeRO stage ", m_cfg.parallel.zero_stage,
                                ", ", dtype_name(m_cfg.precision.dtype));
    if (resumed.world_size > 0 && resumed.zero_stage >= 0 && !resumed.dtype.empty() && was != now) {
        std::printf("ztrain: note: the checkpoint was written at %s; this run is %s (its state is resharded, "
                    "and the data continues from sample %llu)\n",
                    was.c_str(), now.c_str(), static_cast<unsigned long long>(progress.samples_seen));
    }
    batch_note(resumed, world_size / parts);
    schedule_note(resumed);
    if (progress.step >= m_cfg.train.max_steps) {
        std::printf("ztrain: the checkpoint already reaches train.max_steps = %d: nothing to train "
                    "(raise train.max_steps, or --checkpoint.resume=never to start over)\n",
                    m_cfg.train.max_steps);
    }
}

void ResumePolicy::batch_note(const CheckpointRecord& resumed, int world_size) const {
    // micro_batch is per rank: at another world size the same deck trains on another global
    // batch, which changes the run as much as the learning rate does.
    const std::optional<Config> deck = saved_deck(resumed, m_dir);
    if (!deck) return;
    const TrainConfig& old = deck->train;
    if (resumed.world_size <= 0) return;
    const TrainConfig& now = m_cfg.train;
    const int old_ranks = resumed.world_size / std::max(1, resumed.tensor * resumed.pipeline);  // data-parallel
    const long before = static_cast<long>(old.micro_batch) * old.grad_accum * old_ranks;
    const long after = static_cast<long>(now.micro_batch) * now.grad_accum * world_size;
    if (before == after) return;
    std::printf("ztrain: note: the global batch changes from %ld to %ld sequences per step (train.micro_batch %d x "
                "train.grad_accum %d x %d rank(s), where the checkpoint's run had %d x %d x %d: micro_batch is per "
                "data-parallel rank)",
                before, after, now.micro_batch, now.grad_accum, world_size, old.micro_batch, old.grad_accum,
                old_ranks);
    const long per_accum = static_cast<long>(now.micro_batch) * world_size;
    if (before % per_accum == 0) {
        std::printf("; --train.grad_accum=%ld keeps it at %ld (train.global_batch = %ld keeps it at any world size)\n",
                    before / per_accum, before, before);
    } else {
        std::printf("; no train.grad_accum keeps %ld exactly at micro_batch %d on %d rank(s)\n", before,
                    now.micro_batch, world_size);
    }
}

void ResumePolicy::schedule_note(const CheckpointRecord& resumed) const {
    // The checkpoint's deck says which schedule the run was on; one that cannot be read (an
    // older key set) just gives no note.
    const std::optional<Config> deck = saved_deck(resumed, m_dir);
    if (!deck) return;
    const TrainConfig& old = deck->train;
    const TrainConfig& now = m_cfg.train;
    const long at = resumed.progress.applied_steps;
    const double lr_old = learning_rate(old, at);
    const double lr_now = learning_rate(now, at);
    std::string changed;
    auto differ = [&](const char* key, const std::string& a, const std::string& b) {
        if (a != b) changed += str(changed.empty() ? "" : ", ", key, " ", a, " -> ", b);
    };
    differ("train.max_steps", std::to_string(old.max_steps), std::to_string(now.max_steps));
    differ("train.schedule_steps", std::to_string(old.schedule_steps), std::to_string(now.schedule_steps));
    differ("train.warmup_steps", std::to_string(old.warmup_steps), std::to_string(now.warmup_steps));
    differ("train.schedule", setting_text(old.schedule), setting_text(now.schedule));
    differ("train.decay_fraction", str(old.decay_fraction), str(now.decay_fraction));
    differ("train.decay_steps", std::to_string(old.decay_steps), std::to_string(now.decay_steps));
    differ("train.decay_shape", setting_text(old.decay_shape), setting_text(now.decay_shape));
    differ("train.lr", str(old.lr), str(now.lr));
    differ("train.lr_min", str(old.lr_min), str(now.lr_min));
    // Only a change that moves the lr from here on is worth a note.
    bool moves = false;
    for (long s = at; s < std::max(old.max_steps, now.max_steps) && !moves; ++s) {
        moves = learning_rate(old, s) != learning_rate(now, s);
    }
    if (changed.empty() || !moves) return;
    std::printf("ztrain: note: the learning-rate schedule differs from the checkpoint's run (%s): the lr at "
                "step %ld is %.2e, where the old schedule gives %.2e\n",
                changed.c_str(), resumed.progress.step, lr_now, lr_old);
    const int old_end = old.schedule_steps > 0 ? old.schedule_steps : old.max_steps;
    if (now.schedule_steps == 0 && now.max_steps != old.max_steps) {
        std::printf("ztrain: note: to keep the old schedule (decay over %d steps, then hold lr_min), resume with "
                    "--train.schedule_steps=%d\n",
                    old_end, old_end);
    }
}

}  // namespace zt
