#include "ztrain/train/checkpoint_saver.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <thread>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/step_reporter.hpp"

namespace zt {
namespace {

/// The report of a published checkpoint.
CheckpointSaved saved_record(const CheckpointWriteReport& report, long step, bool async, double blocked_s,
                             double write_s, double snapshot_s) {
    CheckpointSaved saved;
    saved.dir = report.dir;
    saved.step = step;
    saved.async = async;
    saved.bytes = report.bytes;
    saved.blocked_s = blocked_s;
    saved.write_s = write_s;
    saved.snapshot_s = snapshot_s;
    saved.shard_write_s = report.shard_write_s;
    saved.shard_sync_s = report.shard_sync_s;
    saved.direct_io = report.direct_io;
    saved.writer_cpu_s = report.writer_cpu_s;
    saved.publish_s = report.publish_s;
    saved.pace_target_s = report.pace_target_s;
    saved.paced_s = report.paced_s;
    saved.hurried = report.hurried;
    return saved;
}

/// Test hook: ZT_TEST_CHECKPOINT_DELAY_MS=N makes every background write wait N ms before
/// it starts, so tests can act while a write is surely in flight (a signal, a kill).
int test_write_delay_ms() {
    const char* v = std::getenv("ZT_TEST_CHECKPOINT_DELAY_MS");
    return v ? std::atoi(v) : 0;
}

/// Step times the pace is taken from: the median of the last this many (an odd count, so
/// the median is one of them; a few slow steps, an evaluation's, do not move it).
constexpr size_t kStepWindow = 15;

}  // namespace

double async_pace_target_s(double spread, long step, int every, long max_steps, double step_s) {
    long until = max_steps - step;  // the end of training waits for the write
    if (every > 0) until = std::min(until, every - step % every);
    if (!(spread > 0) || !(step_s > 0) || until <= 0) return 0;
    return spread * static_cast<double>(until) * step_s;
}

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
}

bool async_saves_planned(const Config& cfg) {
    return cfg.checkpoint.async && cfg.checkpoint.every > 0 && cfg.checkpoint.every < cfg.train.max_steps;
}

CheckpointSaver::CheckpointSaver(const Config& cfg, std::string ckpt_dir, ModelState& state, Communicator& comm,
                                 StepReporter& reporter, MPI_Comm mpi_comm)
    : m_cfg(cfg), m_ckpt_dir(std::move(ckpt_dir)), m_state(state), m_comm(comm), m_reporter(reporter) {
    if (!async_saves_planned(cfg)) return;
    // One rank: the checkpoint communicator's collectives make no MPI calls at all.
    if (comm.size() > 1 && !mpi_thread_multiple()) {
        if (comm.rank() == 0) {
            std::printf("ztrain: note: checkpoint.async needs MPI_THREAD_MULTIPLE, which this MPI library does not "
                        "provide; checkpoints are written synchronously\n");
        }
        return;
    }
    m_ckpt_comm = make_mpi_communicator(mpi_comm);  // a duplicate: its own message space
    m_snapshot = std::make_unique<CheckpointSnapshot>(state);
}

CheckpointSaver::~CheckpointSaver() = default;

bool CheckpointSaver::due(long done, bool stop_requested) const {
    const bool periodic = m_cfg.checkpoint.every > 0 && done % m_cfg.checkpoint.every == 0;
    return stop_requested || periodic || done == m_cfg.train.max_steps;
}

void CheckpointSaver::step_finished(double step_s) {
    if (m_step_times.size() < kStepWindow) {
        m_step_times.push_back(step_s);
    } else {
        m_step_times[m_step_next] = step_s;
    }
    m_step_next = (m_step_next + 1) % kStepWindow;
}

void CheckpointSaver::handle_failure(long step, const Error& e, bool last) {
    // Every rank sees the same error at the same step (the save agrees on failures, and the
    // ranks agree on when to collect a background write): stopping is an AgreedError, one
    // message and MPI_Finalize rather than MPI_Abort. `latest` still names a complete
    // checkpoint; the half-written directory goes.
    const bool root = m_comm.rank() == 0;
    if (root) {
        std::error_code ec;
        std::filesystem::remove_all(std::filesystem::path(m_ckpt_dir) / (checkpoint_dir_name(step) + ".partial"), ec);
    }
    const std::string previous = previous_checkpoint();
    const std::string kept = previous.empty() ? "no earlier checkpoint of this run exists"
                                              : str("latest still names the complete ", previous);
    // The run's last save has no later one to make up for it: going on would end the run
    // with exit 0 and its trained state lost.
    if (last) {
        throw AgreedError(str("the run's last checkpoint, at step ", step, ", failed: ", e.what(), " (", kept,
                              previous.empty() ? ": none of its steps are saved" : ": the steps after it are not saved",
                              ")"));
    }
    if (m_cfg.checkpoint.on_error == OnCheckpointError::kStop) {
        throw AgreedError(str("checkpoint at step ", step, " failed: ", e.what(), " (", kept,
                              "; with checkpoint.on_error = continue a failed save warns and training goes on)"));
    }
    if (root) {
        std::fprintf(stderr, "ztrain: warning: checkpoint at step %ld failed: %s; training continues "
                     "(checkpoint.on_error = continue); %s\n",
                     step, e.what(), kept.c_str());
    }
}

std::string CheckpointSaver::previous_checkpoint() const {
    // `latest` is replaced only once a checkpoint is complete: what it names is intact.
    std::ifstream in(std::filesystem::path(m_ckpt_dir) / "latest");
    std::string name;
    if (in && std::getline(in, name)) return name;
    return "";
}

void CheckpointSaver::collect_finished() {
    if (!m_writer.in_flight()) return;
    try {
        const CheckpointWriteReport report = m_writer.collect();
        m_reporter.checkpoint_written(saved_record(
            report, m_pending_step, true, m_pending_blocked_s,
            std::chrono::duration<double>(m_pending_end - m_pending_start).count(), m_pending_snapshot_s));
    } catch (const Error& e) {
        handle_failure(m_pending_step, e, false);
    }
}

void CheckpointSaver::save(const TrainProgress& p, bool stop_requested) {
    const auto t_save = std::chrono::steady_clock::now();
    CheckpointRecord record;
    record.progress = p;
    record.dtype = dtype_name(m_cfg.precision.dtype);
    record.seed = m_cfg.train.seed;
    record.config_ini = to_ini(m_cfg);
    record.inputs = m_inputs;
    if (m_cfg.model.lora.on() && !m_cfg.model.init_from.empty()) {
        record.lora_base = std::filesystem::absolute(m_cfg.model.init_from).lexically_normal().string();
    }
    if (m_blend_record) record.blend = m_blend_record(p.samples_seen);
    // The last save has no steps to overlap: copying a snapshot would only add its time.
    const bool last = stop_requested || p.step >= m_cfg.train.max_steps;
    if (!m_snapshot || last) {
        collect_finished();  // one write at a time, in step order
        const auto t_write = std::chrono::steady_clock::now();
        try {
            const CheckpointWriteReport report =
                write_checkpoint(m_ckpt_dir, m_state, m_comm, record, m_cfg.checkpoint.keep);
            const double took = seconds_since(t_write);
            m_reporter.checkpoint_written(saved_record(report, p.step, false, took, took, 0));
        } catch (const Error& e) {
            handle_failure(p.step, e, last);
        }
        return;
    }
    // One write at a time: a save that comes while the previous one is still being written
    // hurries it and waits for it (its time counts as blocked), so no save is ever skipped
    // and the snapshot buffer is free again.
    collect_finished();
    const auto t_snapshot = std::chrono::steady_clock::now();
    m_snapshot->capture(m_state, record);
    m_pending_snapshot_s = seconds_since(t_snapshot);
    m_pending_step = p.step;
    m_pending_start = t_save;
    m_pending_blocked_s = seconds_since(t_save);
    const int delay_ms = test_write_delay_ms();
    const double pace_s = async_pace_target_s(m_cfg.checkpoint.async_spread, p.step, m_cfg.checkpoint.every,
                                              m_cfg.train.max_steps, median_of(m_step_times));
    m_writer.start(
        [this, delay_ms](WritePacer& pacer) {
            if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
            CheckpointWriteReport report =
                write_checkpoint(m_ckpt_dir, *m_snapshot, *m_ckpt_comm, m_cfg.checkpoint.keep, &pacer);
            m_pending_end = std::chrono::steady_clock::now();
            return report;
        },
        pace_s);
}

}  // namespace zt
