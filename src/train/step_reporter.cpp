#include "ztrain/train/step_reporter.hpp"
#include "ztrain/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <iterator>
#include <map>

#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/train/choice_eval.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/loss_scale_policy.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/zero_memory.hpp"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

/// The signal the user sent to the launcher (src/app/ztrun writes "SIGINT" or "SIGTERM" to
/// the file ZT_LAUNCHER_STOP_FILE names before passing SIGUSR1 on); "" when there is no
/// launcher or it sent nothing (a SIGUSR1 from Slurm or by hand).
std::string launcher_stop_signal() {
    const char* path = std::getenv("ZT_LAUNCHER_STOP_FILE");
    if (path == nullptr || *path == '\0') return "";
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line == "SIGINT" || line == "SIGTERM" ? line : "";
}

/// Length of the valid UTF-8 sequence starting at s[i] (1-4), or 0 when it is not one
/// (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, truncated).
size_t utf8_sequence(const std::string& s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    if (c < 0x80) return 1;
    size_t n = 0;
    unsigned min = 0;
    unsigned cp = 0;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1Fu; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0Fu; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07u; min = 0x10000; }
    else return 0;
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((b(i + k) & 0xC0u) != 0x80u) return 0;
        cp = (cp << 6) | (b(i + k) & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/// The start-up table: bytes per buffer kind on this rank next to the ZeRO formula each
/// should follow, so a user sees what sharding bought.
void print_memory_table(const StateBytes& sb, size_t activation_bytes, int stage, int group, int world,
                        size_t n_params, DType work, DType grads) {
    const ZeroMemoryFormulas f = zero_memory_formulas(stage, group, n_params, work, grads);
    const double mib = 1048576.0;
    std::printf("ztrain: memory per rank, ZeRO stage %d, N = %d%s, P = %zu parameters (%s)\n", stage, group,
                group != world ? " (the shard group)" : "", n_params, dtype_name(work));
    std::printf("  %-12s %10s   %s\n", "buffer", "MiB", "formula");
    std::printf("  %-12s %10.2f   %s\n", "params", sb.params / mib, f.params.formula.c_str());
    std::printf("  %-12s %10.2f   %s\n", "grads", sb.grads / mib, f.grads.formula.c_str());
    std::printf("  %-12s %10.2f   %s\n", "master", sb.master / mib, f.master.formula.c_str());
    std::printf("  %-12s %10.2f   %s\n", "optimizer", sb.optimizer / mib, f.optimizer.formula.c_str());
    std::printf("  %-12s %10.2f   %s = %.2f MiB\n", "model state", sb.model_state() / mib, f.model_state.formula.c_str(),
                f.model_state.bytes / mib);
    std::printf("  %-12s %10.2f\n", "activations", activation_bytes / mib);
    std::printf("  %-12s %10.2f   %s\n", "scratch", sb.scratch / mib, "gathered units, gradient scratch (peak)");
}

/// Every rank's compute time and phases from the step's gathered figures (rows of `world`:
/// wait, run, compute, forward, backward, communication, optimizer).
std::vector<RankStepTimes> rank_step_times(const std::vector<double>& per_rank, size_t world) {
    std::vector<RankStepTimes> ranks(world);
    for (size_t r = 0; r < world; ++r) {
        ranks[r].compute_ms = per_rank[2 * world + r];
        ranks[r].step_ms = per_rank[r] + ranks[r].compute_ms;  // waited + computed
        for (size_t k = 0; k < ranks[r].phase_ms.size(); ++k) ranks[r].phase_ms[k] = per_rank[(3 + k) * world + r];
    }
    return ranks;
}

}  // namespace

std::string printable_text(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const size_t n = utf8_sequence(s, i);
        if (c == '\n') {
            out += "\n    ";
        } else if (n == 0 || (c < 32 && c != '\t') || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        } else {
            out.append(s, i, n);
            i += n;
            continue;
        }
        ++i;
    }
    return out;
}


std::string format_duration(double s) {
    if (!(s >= 0) || s > 1e8) return "?";
    const long t = static_cast<long>(s + 0.5);
    char buf[32];
    if (t >= 3600) {
        std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    } else if (t >= 60) {
        std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
    } else {
        std::snprintf(buf, sizeof buf, "%lds", t);
    }
    return buf;
}

StepReporter::StepReporter(const std::string& run_dir, bool resuming, bool root, const TrainConfig& tc,
                           Communicator& comm, const Communicator& shard, const Communicator& replica,
                           const Transformer& model,
                           ProfilingBackend* op_profile)
    : m_root(root),
      m_max_steps(tc.max_steps),
      m_log_every(tc.log_every),
      m_muon_lr_ratio(tc.optimizer == OptimizerKind::kMuon ? muon_settings(tc).lr_ratio : 0.0),
      // A resumed run appends to the metrics of the run it continues.
      m_metrics(root ? (std::filesystem::path(run_dir) / "metrics.jsonl").string() : std::string(), resuming),
      m_comm(comm),
      m_shard(shard),
      m_replica(replica),
      m_model(model),
      m_op_profile(op_profile),
      m_run_start(Clock::now()) {}

void StepReporter::start(const Config& cfg, const StateBytes& sb, size_t snapshot_bytes, int threads,
                         const std::string& data_text, DType work, DType reduce, const LossScalePolicy& loss_scale) {
    if (!m_root) return;
    const ModelConfig& mc = cfg.model;
    const int world = m_comm.size();
    // Real parameters (the manifest), not alignment gaps: this rank's (its tensor slices) and
    // the model's.
    size_t n_params = 0;
    size_t model_params = 0;
    for (const ParamSpec& p : m_model.layout().params) {
        n_params += p.numel;
        size_t whole = 1;
        for (size_t d : p.slice.global_shape) whole *= d;
        model_params += p.slice.split() ? whole : p.numel;
    }
    const int data_ranks = world / std::max(1, m_layout.tensor * m_layout.pipeline);
    const DType grads = grads_dtype(cfg);
    nlohmann::ordered_json mem;
    mem["event"] = "memory";
    mem["params"] = sb.params;
    mem["grads"] = sb.grads;
    mem["master"] = sb.master;
    mem["optimizer"] = sb.optimizer;
    mem["activations"] = m_model.activation_bytes();
    mem["scratch"] = sb.scratch;
    mem["model_state"] = sb.model_state();
    mem["checkpoint_snapshot"] = snapshot_bytes;
    mem["world_size"] = world;
    mem["nodes"] = m_layout.nodes;
    mem["ranks_per_node"] = m_layout.ranks_per_node;
    mem["tensor"] = m_layout.tensor;
    mem["shard_group"] = m_shard.size();
    mem["replicas"] = m_replica.size();
    mem["zero_stage"] = cfg.parallel.zero_stage;
    mem["dtype"] = dtype_name(cfg.precision.dtype);
    mem["grad_dtype"] = dtype_name(grads);
    mem["num_params"] = model_params;
    mem["predicted_peak"] = m_plan_rank;
    mem["overlap_depth"] = m_overlap_depth;
    record(mem);
    std::printf("%s\n", model_family(mc).banner(mc, static_cast<double>(model_params)).c_str());
    // The split of each rank's cores: train.threads compute threads, plus the communication
    // thread (parallel.comm_thread) that runs the started collectives.
    const int comm_threads = (m_shard.has_communication_thread() ? 1 : 0) + (m_replica.has_communication_thread() ? 1 : 0);
    std::printf("ztrain: %d rank(s) x %d thread(s)%s, global batch %d x %d tokens, %s\n", world,
                threads,
                comm_threads == 0 ? ""
                                  : str(" + ", comm_threads, " communication thread", comm_threads > 1 ? "s" : "",
                                        " (overlap depth ", m_overlap_depth, ")")
                                        .c_str(),
                cfg.train.micro_batch * cfg.train.grad_accum * data_ranks, mc.seq_len, data_text.c_str());
    // The ZeRO formulas' N is the group the state is split over; P this rank's parameters
    // (its tensor slices under tensor parallelism).
    print_memory_table(sb, m_model.activation_bytes(), cfg.parallel.zero_stage, m_shard.size(), world, n_params,
                       work, grads);
    if (snapshot_bytes > 0) {
        std::printf("  %-12s %10.2f   %s\n", "ckpt snapshot", static_cast<double>(snapshot_bytes) / 1048576.0,
                    "host copy of the owned master, m, v for background writes (checkpoint.async)");
    }
    if (m_plan_rank > 0) {
        const double gib = 1024.0 * 1024 * 1024;
        std::printf("ztrain: predicted peak memory %.2f GiB per rank, %.2f GiB on this node", m_plan_rank / gib,
                    m_plan_node / gib);
        if (m_plan_available > 0) std::printf(", %.2f GiB available", m_plan_available / gib);
        std::printf(" (ztrain --plan for the table)\n");
    }
    if (work != DType::kF32 || reduce != work) {
        std::printf("ztrain: precision: %s working copy, fp32 master and AdamW state, gradients accumulated in %s and "
                    "reduced in %s%s\n",
                    dtype_name(work), dtype_name(grads), dtype_name(reduce),
                    loss_scale.fp16() ? (loss_scale.dynamic() ? str(", dynamic loss scale from ", loss_scale.scale()).c_str()
                                                              : str(", static loss scale ", loss_scale.scale()).c_str())
                                      : "");
    }
    std::fflush(stdout);
}

void StepReporter::skipped(long step, bool fp16, double scale_before, double scale_after) {
    if (!m_root) return;
    std::printf("step %5ld/%d | non-finite gradients: step skipped%s\n", step, m_max_steps,
                fp16 ? str(", loss scale ", scale_before, " -> ", scale_after).c_str() : "");
}

std::vector<const Communicator*> StepReporter::counted() const {
    std::vector<const Communicator*> all{&m_comm, &m_shard, &m_replica};
    for (const Communicator* c : {m_tensor, m_data}) {
        if (c != nullptr) all.push_back(c);
    }
    return all;
}

nlohmann::ordered_json StepReporter::comm_bytes_record() const {
    nlohmann::ordered_json cb = nlohmann::ordered_json::object();
    // Per kind over every communicator of the run, then the model state's two apart: inside
    // the shard group (intra) and across the groups (inter).
    std::map<CollectiveKind, uint64_t> sent;
    for (const Communicator* c : counted()) {
        for (const auto& [kind, entry] : c->stats().by_kind) sent[kind] += entry.bytes;
    }
    for (const auto& [kind, bytes] : sent) cb[collective_name(kind)] = bytes;
    const auto per_kind = [](const Communicator& c) {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (const auto& [kind, entry] : c.stats().by_kind) o[collective_name(kind)] = entry.bytes;
        return o;
    };
    cb["intra"] = per_kind(m_shard);
    cb["inter"] = per_kind(m_replica);
    if (m_tensor != nullptr) cb["tensor"] = per_kind(*m_tensor);
    return cb;
}

void StepReporter::step(const StepReport& r) {
    // This process's first step warms caches: the average leaves it out when there are more.
    const long run_here = r.step - m_first_step;
    if (run_here > 1 || m_max_steps - m_first_step == 1) m_train_seconds += r.step_s;
    // Every rank's waits and run times for started collectives: a straggler or a rank whose
    // communication is not hidden shows here, not only rank 0's view. One small all-reduce
    // (after the step's own collectives, so their byte counts below are unchanged).
    CommStats::Overlap ov;
    for (const Communicator* c : counted()) {
        ov.waited += c->stats().overlap.waited;
        ov.done_before_wait += c->stats().overlap.done_before_wait;
        ov.wait_s += c->stats().overlap.wait_s;
        ov.run_s += c->stats().overlap.run_s;
    }
    // Bytes per kind, taken before the all-reduce below adds to m_comm's counts.
    const nlohmann::ordered_json cb = comm_bytes_record();
    const size_t world = static_cast<size_t>(m_comm.size());
    // Per rank: wait, run, compute (the step less its waits) and the phases (stragglers).
    const size_t me = static_cast<size_t>(m_comm.rank());
    const double own[] = {ov.wait_s, ov.run_s, r.step_s - ov.wait_s, r.phases.fwd, r.phases.bwd, r.phases.comm,
                          r.phases.opt};
    std::vector<double> per_rank(std::size(own) * world, 0.0);
    for (size_t k = 0; k < std::size(own); ++k) per_rank[k * world + me] = own[k] * 1e3;
    m_comm.all_reduce_scalars(per_rank.data(), per_rank.size());
    const std::vector<RankStepTimes> rank_times = rank_step_times(per_rank, world);
    const std::optional<Stragglers> stragglers = m_stragglers ? m_stragglers->add(r.step, rank_times, run_here == 1)
                                                              : std::nullopt;
    if (!m_root) return;
    nlohmann::ordered_json rec;
    rec["step"] = r.step;
    rec["loss"] = r.loss;
    rec["lr"] = r.lr;
    if (m_muon_lr_ratio > 0) rec["muon_lr"] = r.lr * m_muon_lr_ratio;
    rec["grad_norm"] = std::isfinite(r.grad_norm) ? nlohmann::ordered_json(r.grad_norm) : nlohmann::ordered_json();
    rec["tokens"] = static_cast<long long>(static_cast<double>(r.tokens_seen));
    rec["tokens_per_s"] = r.tokens_per_s;
    if (r.targets) rec["targets"] = *r.targets;
    if (r.rows) rec["rows"] = *r.rows;
    if (!r.tokens_by_corpus.empty()) {
        nlohmann::ordered_json by = nlohmann::ordered_json::object();
        for (const auto& [corpus, tokens] : r.tokens_by_corpus) by[corpus] = tokens;
        rec["tokens_by_corpus"] = by;
    }
    rec["step_ms"] = r.step_s * 1e3;
    rec["loss_scale"] = r.loss_scale;
    rec["skipped"] = r.skipped;
    rec["comm_bytes"] = cb;
    // Started collectives waited for during the step (every communicator): how many, how
    // many had finished before the wait, the time waited and the time they ran in the
    // communication thread; run_ms - wait_ms is the communication hidden behind compute.
    nlohmann::ordered_json overlap = nlohmann::ordered_json::object();
    overlap["waited"] = ov.waited;
    overlap["finished_before_wait"] = ov.done_before_wait;
    overlap["wait_ms"] = ov.wait_s * 1e3;
    overlap["run_ms"] = ov.run_s * 1e3;
    overlap["wait_ms_by_rank"] = std::vector<double>(per_rank.begin(), per_rank.begin() + static_cast<long>(world));
    overlap["run_ms_by_rank"] =
        std::vector<double>(per_rank.begin() + static_cast<long>(world), per_rank.begin() + static_cast<long>(2 * world));
    rec["comm_overlap"] = overlap;
    const ComputeExtremes ce = compute_extremes(rank_times);
    rec["compute_ms"] = {{"slowest", ce.slowest_ms}, {"slowest_rank", ce.slowest_rank}, {"fastest", ce.fastest_ms},
                         {"fastest_rank", ce.fastest_rank}};
    rec["zero_ms"] = r.phases.zero * 1e3;
    rec["fwd_ms"] = r.phases.fwd * 1e3;
    rec["bwd_ms"] = r.phases.bwd * 1e3;
    rec["comm_ms"] = r.phases.comm * 1e3;
    rec["opt_ms"] = r.phases.opt * 1e3;
    if (m_op_profile != nullptr) {
        nlohmann::ordered_json ops = nlohmann::ordered_json::object();
        for (int k = 0; k < ProfilingBackend::kNumOps; ++k) ops[ProfilingBackend::op_name(k)] = m_op_profile->op_ms(k);
        rec["ops_ms"] = ops;
    }
    record(rec);
    if (stragglers) report_stragglers(*stragglers);
    const long done = r.step;
    if (done % m_log_every == 0 || done == m_max_steps || done == 1) {
        const double avg = run_here > 1 ? m_train_seconds / static_cast<double>(run_here - 1) : r.step_s;
        std::printf("step %5ld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.0f ms | ETA %s\n", done,
                    m_max_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.step_s * 1e3,
                    format_duration(avg * static_cast<double>(m_max_steps - done)).c_str());
        std::fflush(stdout);
    }
}

void StepReporter::report_stragglers(const Stragglers& s) {
    nlohmann::ordered_json rec;
    rec["event"] = "stragglers";
    rec["step"] = s.step;
    rec["ranks"] = s.ranks;
    rec["hosts"] = s.hosts;
    rec["phase"] = s.phase;
    rec["ratios"] = s.ratios;
    rec["median_compute_ms"] = s.median_ms;
    record(rec);
    std::printf("ztrain: %s\n", describe(s).c_str());
    std::fflush(stdout);
}

void StepReporter::val_loss(long step, double loss, const CorpusLosses& by_corpus) {
    if (!m_root) return;
    nlohmann::ordered_json rec;
    rec["step"] = step;
    rec["val_loss"] = loss;
    std::string each;
    if (!by_corpus.empty()) {
        nlohmann::ordered_json by = nlohmann::ordered_json::object();
        for (const auto& [corpus, l] : by_corpus) {
            by[corpus] = l;
            char value[32];
            std::snprintf(value, sizeof value, "%.4f", l);
            each += str(each.empty() ? " (" : ", ", corpus, " ", value);
        }
        rec["val_loss_by_corpus"] = by;
        each += ")";
    }
    record(rec);
    std::printf("step %ld | val loss %.4f%s\n", step, loss, each.c_str());
}

void StepReporter::choice_eval(long step, const std::string& task, const ChoiceCounts& c) {
    if (!m_root) return;
    const double n = static_cast<double>(std::max(1L, c.n));
    nlohmann::ordered_json rec;
    rec["event"] = "eval";
    rec["step"] = step;
    rec["task"] = task;
    rec["n"] = c.n;
    rec["acc"] = static_cast<double>(c.acc) / n;
    rec["acc_norm"] = static_cast<double>(c.acc_norm) / n;
    rec["acc_token"] = static_cast<double>(c.acc_token) / n;
    record(rec);
    std::printf("step %ld | eval %s\n", step, choice_summary(task, c).c_str());
}

void StepReporter::sample(long step, const std::string& text) {
    if (m_root) std::printf("sample at step %ld:\n    %s\n", step, printable_text(text).c_str());
}

void StepReporter::checkpoint_written(const CheckpointSaved& saved) {
    if (!m_root) return;
    nlohmann::ordered_json rec;
    rec["event"] = "checkpoint";
    rec["step"] = saved.step;
    rec["async"] = saved.async;
    rec["bytes"] = saved.bytes;
    rec["blocked_ms"] = saved.blocked_s * 1e3;
    rec["write_ms"] = saved.write_s * 1e3;
    rec["phases_ms"] = {{"snapshot", saved.snapshot_s * 1e3},
                        {"shard_write", saved.shard_write_s * 1e3},
                        {"shard_sync", saved.shard_sync_s * 1e3},
                        {"publish", saved.publish_s * 1e3},
                        {"writer_cpu", saved.writer_cpu_s * 1e3}};
    rec["direct_io"] = saved.direct_io;
    rec["paced_ms"] = {{"target", saved.pace_target_s * 1e3}, {"slept", saved.paced_s * 1e3}};
    rec["hurried"] = saved.hurried;
    record(rec);
    if (saved.async) {
        std::printf("ztrain: checkpoint %s written in %.2f s (in the background; training blocked %.3f s)\n",
                    saved.dir.c_str(), saved.write_s, saved.blocked_s);
    } else {
        std::printf("ztrain: checkpoint %s written in %.2f s\n", saved.dir.c_str(), saved.write_s);
    }
    std::fflush(stdout);
}

void StepReporter::stopped_by_signal(int signal, long step) {
    if (!m_root) return;
    const char* name = signal == SIGINT    ? "SIGINT"
                       : signal == SIGTERM ? "SIGTERM"
                       : signal == SIGUSR1 ? "SIGUSR1"
                                           : "a stop signal";
    const std::string sent = launcher_stop_signal();
    if (signal == SIGUSR1 && !sent.empty()) {
        const char* what = sent == "SIGINT" ? "Ctrl-C (SIGINT, passed" : "SIGTERM (passed";
        std::printf("ztrain: stopped after %s to the ranks as SIGUSR1) at step %ld; resume with "
                    "checkpoint.resume=auto\n",
                    what, step);
        return;
    }
    std::printf("ztrain: stopped by %s (signal %d) after step %ld; resume with checkpoint.resume=auto\n", name,
                signal, step);
}

void StepReporter::rolled_back(const Rollback& rb) {
    if (!m_root) return;
    m_metrics.supersede_after(rb.to_step);
    nlohmann::ordered_json rec;
    rec["event"] = "rollback";
    rec["step"] = rb.step;
    rec["to_step"] = rb.to_step;
    rec["skipped_batches"] = rb.skipped_batches;
    rec["reason"] = rb.reason;
    record(rec);
    std::printf("ztrain: step %ld: loss spike (%s): rolled back to step %ld, skipping %zu global batch(es) from "
                "%llu\n",
                rb.step, rb.reason.c_str(), rb.to_step, rb.skipped_batches.size(),
                static_cast<unsigned long long>(rb.skipped_batches.empty() ? 0 : rb.skipped_batches.front()));
    std::fflush(stdout);
}

void StepReporter::memory_peaks(const std::vector<double>& measured) {
    if (!m_root || measured.empty()) return;
    nlohmann::ordered_json rec;
    rec["event"] = "memory_peak";
    rec["predicted_peak"] = m_plan_rank;
    rec["measured_peak"] = measured;
    record(rec);
    const double top = *std::max_element(measured.begin(), measured.end());
    std::printf("ztrain: peak resident memory %.1f MiB (the largest rank's), predicted %.1f MiB\n",
                top / 1048576.0, m_plan_rank / 1048576.0);
}

void StepReporter::record(const nlohmann::ordered_json& rec) {
    if (!m_output_error.empty()) return;
    try {
        m_metrics.write(rec);
        if (m_tensorboard) m_tensorboard->write(rec);
    } catch (const Error& e) {
        m_output_error = e.what();
    }
}

void StepReporter::finish(long last_step) {
    if (!m_root) return;
    const long ran = last_step - m_first_step;
    const std::string took = format_duration(seconds_since(m_run_start));
    if (m_first_step == 0) {
        std::printf("ztrain: %ld steps in %s\n", ran, took.c_str());
    } else if (ran > 0) {
        std::printf("ztrain: %ld steps (%ld to %ld) in %s\n", ran, m_first_step + 1, last_step, took.c_str());
    } else {
        std::printf("ztrain: 0 steps (resumed at step %ld)\n", m_first_step);
    }
}

}  // namespace zt
