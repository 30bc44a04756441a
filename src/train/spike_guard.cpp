// Loss-spike rollbacks (include/ztrain/train/spike_guard.hpp).
#include "ztrain/train/spike_guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt {
namespace {

/// Clean losses the median is taken over, and how many it needs before it judges.
constexpr size_t kWindow = 32;
constexpr size_t kMinHistory = 5;
/// What ZT_DEBUG_SPIKE multiplies a poisoned batch's loss by.
constexpr double kDebugSpike = 1000.0;

}  // namespace

void apply_skipped_spans(TrainProgress& progress) {
    for (bool moved = true; moved;) {
        moved = false;
        for (const SkippedSpan& k : progress.skipped) {
            if (k.from == progress.samples_seen && k.samples > 0) {
                progress.samples_seen += k.samples;
                moved = true;
            }
        }
    }
}

/// This rank's owned master, m and v (each unit's owned range, back to back), with what the
/// loop needs to go on from the same point.
struct SpikeGuard::Snapshot {
    std::vector<float> state;
    TrainProgress progress;
    LossScaleRecord loss_scale;
    std::deque<double> recent;
};

SpikeGuard::SpikeGuard(const TrainConfig& tc, ModelState& state, Communicator& comm, uint64_t rows)
    : m_tc(tc), m_state(state), m_comm(comm), m_rows(std::max<uint64_t>(rows, 1)) {
    const char* spec = std::getenv("ZT_DEBUG_SPIKE");
    long first = -1, count = -1;
    const int n = spec != nullptr ? std::sscanf(spec, "%ld:%ld", &first, &count) : 0;
    if (n >= 1 && first >= 1) {
        m_debug_first = first;
        m_debug_count = n == 2 ? count : -1;
    }
}

SpikeGuard::~SpikeGuard() = default;

void SpikeGuard::take_snapshot(const TrainProgress& progress, const LossScalePolicy& loss_scale) {
    if (!m_snapshot) m_snapshot = std::make_unique<Snapshot>();
    StateShards sh = m_state.shards();
    std::vector<float>& host = m_snapshot->state;
    size_t at = 0;
    for (int u = 0; u < m_state.layout().num_units(); ++u) {
        // A frozen base never changes: only what has a master of its own is kept.
        const size_t b = sh.state_begin(u);
        const size_t n = sh.state_end(u) > b ? sh.state_end(u) - b : 0;
        if (host.size() < at + 3 * n) host.resize(at + 3 * n);
        for (StateShards::Kind kind : {StateShards::kMaster, StateShards::kAdamM, StateShards::kAdamV}) {
            if (n > 0) sh.read(u, kind, b, b + n, host.data() + at, /*snapshot=*/true);
            at += n;
        }
    }
    m_snapshot->progress = progress;
    m_snapshot->loss_scale = loss_scale.record();
    m_snapshot->recent = m_recent;
}

void SpikeGuard::before_step(TrainProgress& progress, const LossScalePolicy& loss_scale) {
    apply_skipped_spans(progress);
    m_cursor = progress.samples_seen;
    if (m_tc.spike != SpikePolicy::kRollback || m_pending > 0) return;
    const bool due = !m_snapshot ||
                     (progress.step % m_tc.spike_snapshot_every == 0 && progress.step != m_snapshot->progress.step);
    if (due) take_snapshot(progress, loss_scale);
}

double SpikeGuard::debug_loss(double loss) const {
    if (m_debug_first < 0) return loss;
    const long batch = static_cast<long>(m_cursor / m_rows) + 1;
    const bool poisoned = batch >= m_debug_first && (m_debug_count < 0 || batch < m_debug_first + m_debug_count);
    return poisoned ? loss * kDebugSpike : loss;
}

double SpikeGuard::median() const {
    std::vector<double> v(m_recent.begin(), m_recent.end());
    std::sort(v.begin(), v.end());
    const size_t mid = v.size() / 2;
    return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

std::optional<Rollback> SpikeGuard::judge(long done, double loss, const TrainProgress& progress) {
    if (m_tc.spike != SpikePolicy::kRollback) return std::nullopt;
    const bool finite = std::isfinite(loss);
    const double med = m_recent.size() >= kMinHistory ? median() : 0.0;
    // Every rank holds the same loss; the verdict is still agreed, so all roll back together.
    double spike = !finite || (med > 0 && loss > m_tc.spike_factor * med) ? 1.0 : 0.0;
    m_comm.all_reduce_scalars(&spike, 1, ReduceOp::kMax);
    if (spike == 0.0) {
        m_pending = 0;
        m_recent.push_back(loss);
        if (m_recent.size() > kWindow) m_recent.pop_front();
        return std::nullopt;
    }
    if (m_pending++ == 0) m_spike_cursor = m_cursor;
    if (finite && m_pending < m_tc.spike_patience) return std::nullopt;
    Rollback r;
    r.step = done;
    r.to_step = m_snapshot->progress.step;
    for (uint64_t c = m_spike_cursor; c < progress.samples_seen; c += m_rows) r.skipped_batches.push_back(c / m_rows + 1);
    r.reason = finite ? str("loss ", loss, " above ", m_tc.spike_factor, " x the median ", med, " of the last ",
                            m_recent.size(), " clean steps for ", m_pending, " step(s) (train.spike_patience = ",
                            m_tc.spike_patience, ")")
                      : str("loss ", loss, " is not finite");
    if (m_rollbacks >= m_tc.spike_max_rollbacks) {
        throw AgreedError(str("step ", done, ": loss spike (", r.reason, ") after train.spike_max_rollbacks = ",
                              m_tc.spike_max_rollbacks, " rollback(s): the run keeps diverging; lower train.lr, or "
                              "check the data from global batch ", r.skipped_batches.front()),
                          kExitTooManyRollbacks);
    }
    return r;
}

TrainProgress SpikeGuard::roll_back(const TrainProgress& now, LossScalePolicy& loss_scale) {
    StateShards sh = m_state.shards();
    const std::vector<float>& host = m_snapshot->state;
    size_t at = 0;
    for (int u = 0; u < m_state.layout().num_units(); ++u) {
        const size_t b = sh.state_begin(u);
        const size_t n = sh.state_end(u) > b ? sh.state_end(u) - b : 0;
        for (StateShards::Kind kind : {StateShards::kMaster, StateShards::kAdamM, StateShards::kAdamV}) {
            if (n > 0) sh.write(u, kind, b, b + n, host.data() + at);
            at += n;
        }
    }
    sh.sync_working_from_master();
    (void)loss_scale.restore(m_snapshot->loss_scale);
    TrainProgress p = m_snapshot->progress;
    p.skipped = now.skipped;
    p.skipped.push_back(SkippedSpan{m_spike_cursor, now.samples_seen - m_spike_cursor});
    m_recent = m_snapshot->recent;
    m_pending = 0;
    ++m_rollbacks;
    return p;
}

}  // namespace zt
