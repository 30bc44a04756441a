#include "ztrain/parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <limits>

#include "ztrain/core/error.hpp"

namespace zt {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

/// Finish times of every pass of every virtual stage, each stage's clock, and the activations
/// it keeps: what both the schedule builder (zero-bubble) and the checker run passes on.
class PipelineClock {
  public:
    PipelineClock(PipelineShape shape, PipelineScheduleKind kind, PassCosts costs)
        : m_shape(shape),
          m_kind(kind),
          m_costs(costs),
          m_virtual(shape.stages * shape.virtual_stages),
          m_forward(slots(), -1),
          m_backward(slots(), -1),
          m_weight(slots(), -1),
          m_free(static_cast<size_t>(shape.stages), 0),
          m_busy(static_cast<size_t>(shape.stages), 0),
          m_in_flight(static_cast<size_t>(shape.stages), 0),
          m_peak(static_cast<size_t>(shape.stages), 0) {}

    /// When stage s could start p: its clock and the end of p's dependencies; kNever while
    /// one has not run.
    double ready_at(int s, const PipelinePass& p) const {
        const int k = p.chunk * m_shape.stages + s;
        double start = m_free[static_cast<size_t>(s)];
        auto after = [&](const std::vector<double>& ends, int stage) {
            const double end = ends[index(stage, p.micro)];
            start = end < 0 ? kNever : std::max(start, end);
        };
        switch (p.kind) {
            case PassKind::kForward:
                if (k > 0) after(m_forward, k - 1);
                break;
            case PassKind::kBackward:
                after(m_forward, k);
                if (k + 1 < m_virtual) after(m_backward, k + 1);
                break;
            case PassKind::kWeight: after(m_backward, k); break;
        }
        return start;
    }

    /// The pass's time at full speed.
    double cost(const PipelinePass& p) const {
        return p.kind == PassKind::kForward                    ? m_costs.forward
               : p.kind == PassKind::kWeight                   ? m_costs.weight
               : m_kind == PipelineScheduleKind::kZeroBubble ? m_costs.backward_input
                                                               : m_costs.backward_input + m_costs.weight;
    }

    void run(int s, const PipelinePass& p, double start) { finish(s, p, start, start + cost(p)); }

    /// Records p as run by stage s from start to end.
    void finish(int s, const PipelinePass& p, double start, double end) {
        const size_t st = static_cast<size_t>(s);
        mutable_ends(p.kind)[index(virtual_stage(s, p), p.micro)] = end;
        m_free[st] = end;
        m_busy[st] += end - start;
        // Activations are kept from the forward to the last pass that reads them.
        const PassKind frees = m_kind == PipelineScheduleKind::kZeroBubble ? PassKind::kWeight : PassKind::kBackward;
        if (p.kind == PassKind::kForward) m_peak[st] = std::max(m_peak[st], ++m_in_flight[st]);
        if (p.kind == frees) --m_in_flight[st];
    }

    int in_flight(int s) const { return m_in_flight[static_cast<size_t>(s)]; }

    PipelineTimeline timeline() const {
        PipelineTimeline t;
        t.makespan = *std::max_element(m_free.begin(), m_free.end());
        t.busy = m_busy;
        for (double b : m_busy) t.idle.push_back(t.makespan - b);
        t.peak_in_flight = m_peak;
        return t;
    }

  private:
    size_t slots() const { return static_cast<size_t>(m_virtual) * static_cast<size_t>(m_shape.micro_batches); }
    size_t index(int k, int micro) const {
        return static_cast<size_t>(k) * static_cast<size_t>(m_shape.micro_batches) + static_cast<size_t>(micro);
    }
    int virtual_stage(int s, const PipelinePass& p) const { return p.chunk * m_shape.stages + s; }
    std::vector<double>& mutable_ends(PassKind k) {
        return k == PassKind::kForward ? m_forward : k == PassKind::kBackward ? m_backward : m_weight;
    }

    PipelineShape m_shape;
    PipelineScheduleKind m_kind;
    PassCosts m_costs;
    int m_virtual;
    std::vector<double> m_forward, m_backward, m_weight;  // end times, -1: not run
    std::vector<double> m_free, m_busy;
    std::vector<int> m_in_flight, m_peak;
};

void check_shape(PipelineScheduleKind kind, PipelineShape s) {
    ZT_REQUIRE(s.stages >= 1 && s.micro_batches >= 1, "pipeline schedule: ", s.stages, " stages and ",
               s.micro_batches, " micro-batches: expected at least 1 of each");
    if (kind == PipelineScheduleKind::kInterleaved) {
        ZT_REQUIRE(s.virtual_stages >= 2, "interleaved pipeline schedule: ", s.virtual_stages,
                   " chunks per stage: expected at least 2");
        ZT_REQUIRE(s.micro_batches % s.stages == 0, "interleaved pipeline schedule: ", s.micro_batches,
                   " micro-batches is not a multiple of the ", s.stages, " stages");
    } else {
        ZT_REQUIRE(s.virtual_stages == 1, pipeline_schedule_name(kind), " pipeline schedule: ", s.virtual_stages,
                   " chunks per stage: expected 1 (more are the interleaved schedule's)");
    }
}

std::vector<PipelinePass> one_f_one_b(int s, PipelineShape shape) {
    const int m = shape.micro_batches;
    const int warmup = std::min(shape.stages - 1 - s, m);
    std::vector<PipelinePass> out;
    for (int i = 0; i < warmup; ++i) out.push_back({PassKind::kForward, i, 0});
    for (int i = 0; i < m - warmup; ++i) {
        out.push_back({PassKind::kForward, warmup + i, 0});
        out.push_back({PassKind::kBackward, i, 0});
    }
    for (int i = m - warmup; i < m; ++i) out.push_back({PassKind::kBackward, i, 0});
    return out;
}

std::vector<PipelinePass> interleaved(int s, PipelineShape shape) {
    const int P = shape.stages;
    const int v = shape.virtual_stages;
    const int total = shape.micro_batches * v;
    // The k-th forward (backward) of a stage: groups of P micro-batches go through chunk 0,
    // 1, .. v-1 in turn (backward: v-1 .. 0).
    auto micro = [&](int k) { return k / (P * v) * P + k % P; };
    auto forward = [&](int k) { return PipelinePass{PassKind::kForward, micro(k), k / P % v}; };
    auto backward = [&](int k) { return PipelinePass{PassKind::kBackward, micro(k), v - 1 - k / P % v}; };
    const int warmup = shape.micro_batches == P ? total : std::min((P - 1 - s) * 2 + (v - 1) * P, total);
    std::vector<PipelinePass> out;
    for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
        out.push_back(forward(warmup + k));
        out.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
    return out;
}

/// ZB-H1 built by running it: each stage keeps 1F1B's order of forwards and backwards (B now
/// the input gradient only) and places the W passes by the clock: before a forward when P
/// micro-batches are already in flight (their activations wait for W; P is 1F1B's peak, stage
/// 0's), else only where its next forward or backward cannot start yet, filling what would be
/// idle. The stage whose next pass can start earliest runs it.
std::vector<std::vector<PipelinePass>> zero_bubble(PipelineShape shape) {
    const int P = shape.stages;
    PipelineClock clock(shape, PipelineScheduleKind::kZeroBubble, PassCosts{});
    std::vector<std::vector<PipelinePass>> order, out(static_cast<size_t>(P));
    for (int s = 0; s < P; ++s) order.push_back(one_f_one_b(s, shape));
    std::vector<size_t> next(static_cast<size_t>(P), 0);
    std::vector<int> backwards(static_cast<size_t>(P), 0), weights(static_cast<size_t>(P), 0);
    for (int left = 3 * shape.micro_batches * P; left > 0; --left) {
        double best_at = kNever;
        int best_stage = -1;
        PipelinePass best{};
        for (int s = 0; s < P; ++s) {
            const size_t st = static_cast<size_t>(s);
            const auto& list = order[st];
            const bool pending_weight = weights[st] < backwards[st];
            double at = kNever;
            PipelinePass pick{};
            if (next[st] < list.size()) {
                const PipelinePass& p = list[next[st]];
                const bool memory_full = p.kind == PassKind::kForward && clock.in_flight(s) >= P;
                if (!memory_full) {
                    at = clock.ready_at(s, p);
                    pick = p;
                }
            }
            if (pending_weight) {
                const PipelinePass w{PassKind::kWeight, weights[st], 0};
                const double w_at = clock.ready_at(s, w);
                if (w_at < at) {
                    at = w_at;
                    pick = w;
                }
            }
            if (at < best_at) {
                best_at = at;
                best_stage = s;
                best = pick;
            }
        }
        ZT_REQUIRE(best_stage >= 0, "zero-bubble schedule: no stage can run a pass (", left, " left)");
        const size_t st = static_cast<size_t>(best_stage);
        clock.run(best_stage, best, best_at);
        out[st].push_back(best);
        if (best.kind == PassKind::kWeight) {
            ++weights[st];
        } else {
            ++next[st];
            if (best.kind == PassKind::kBackward) ++backwards[st];
        }
    }
    return out;
}

}  // namespace

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
    switch (kind) {
        case PipelineScheduleKind::k1F1B: return "1f1b";
        case PipelineScheduleKind::kInterleaved: return "interleaved";
        case PipelineScheduleKind::kZeroBubble: return "zb";
    }
    return "?";
}

std::string pass_name(const PipelinePass& p) {
    const char* k = p.kind == PassKind::kForward ? "F" : p.kind == PassKind::kBackward ? "B" : "W";
    return str(k, p.micro, ".", p.chunk);
}

double PipelineTimeline::bubble_fraction() const {
    double worst = 0;
    for (size_t s = 0; s < busy.size(); ++s) worst = std::max(worst, busy[s] > 0 ? idle[s] / busy[s] : 0.0);
    return worst;
}

std::vector<std::vector<PipelinePass>> make_pipeline_schedule(PipelineScheduleKind kind, PipelineShape shape) {
    check_shape(kind, shape);
    if (kind == PipelineScheduleKind::kZeroBubble) return zero_bubble(shape);
    std::vector<std::vector<PipelinePass>> out;
    for (int s = 0; s < shape.stages; ++s) {
        out.push_back(kind == PipelineScheduleKind::k1F1B ? one_f_one_b(s, shape) : interleaved(s, shape));
    }
    return out;
}

namespace {

/// Refuses a schedule that does not run every pass of every stage exactly once.
void check_passes(const std::vector<std::vector<PipelinePass>>& schedule, PipelineShape shape,
                  PipelineScheduleKind kind) {
    check_shape(kind, shape);
    const int P = shape.stages;
    ZT_REQUIRE(static_cast<int>(schedule.size()) == P, "pipeline schedule: ", schedule.size(), " pass lists for ", P,
               " stages");
    const bool split = kind == PipelineScheduleKind::kZeroBubble;
    const size_t per_kind = static_cast<size_t>(shape.micro_batches) * static_cast<size_t>(shape.virtual_stages);
    // Every stage runs each pass of each of its chunks exactly once.
    for (int s = 0; s < P; ++s) {
        std::vector<int> seen(3 * per_kind, 0);
        for (const PipelinePass& p : schedule[static_cast<size_t>(s)]) {
            ZT_REQUIRE(p.micro >= 0 && p.micro < shape.micro_batches && p.chunk >= 0 &&
                           p.chunk < shape.virtual_stages && (split || p.kind != PassKind::kWeight),
                       "pipeline schedule: stage ", s, " runs ", pass_name(p), ", which is not one of its passes");
            const size_t at = static_cast<size_t>(p.kind) * per_kind +
                              static_cast<size_t>(p.micro) * static_cast<size_t>(shape.virtual_stages) +
                              static_cast<size_t>(p.chunk);
            ZT_REQUIRE(++seen[at] == 1, "pipeline schedule: stage ", s, " runs ", pass_name(p), " twice");
        }
        const size_t want = (split ? 3 : 2) * per_kind;
        ZT_REQUIRE(schedule[static_cast<size_t>(s)].size() == want, "pipeline schedule: stage ", s, " runs ",
                   schedule[static_cast<size_t>(s)].size(), " passes, expected ", want);
    }
}

/// Throws when a stage stopped before the end of its list (`next`: how far each got).
void check_finished(const std::vector<std::vector<PipelinePass>>& schedule, const std::vector<size_t>& next) {
    std::string stuck;
    for (size_t s = 0; s < schedule.size(); ++s) {
        if (next[s] == schedule[s].size()) continue;
        stuck += str(stuck.empty() ? "" : "; ", "stage ", s, " can never run ", pass_name(schedule[s][next[s]]),
                     " (pass ", next[s] + 1, ")");
    }
    if (!stuck.empty()) {
        throw Error(str("pipeline schedule: ", stuck,
                        ": a pass each needs comes later in its own list or waits on one of these (deadlock)"));
    }
}

}  // namespace

PipelineTimeline run_pipeline_schedule(const std::vector<std::vector<PipelinePass>>& schedule, PipelineShape shape,
                                       PipelineScheduleKind kind, PassCosts costs) {
    check_passes(schedule, shape, kind);
    const int P = shape.stages;
    // Each stage runs its next pass as soon as it can; when none can, a pass waits for one that
    // never comes.
    PipelineClock clock(shape, kind, costs);
    std::vector<size_t> next(static_cast<size_t>(P), 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < P; ++s) {
            const auto& list = schedule[static_cast<size_t>(s)];
            size_t& i = next[static_cast<size_t>(s)];
            for (; i < list.size(); ++i) {
                const double at = clock.ready_at(s, list[i]);
                if (at == kNever) break;
                clock.run(s, list[i], at);
                progress = true;
            }
        }
    }
    check_finished(schedule, next);
    return clock.timeline();
}

PipelineTimeline run_pipeline_schedule_shared(const std::vector<std::vector<PipelinePass>>& schedule,
                                              PipelineShape shape, PipelineScheduleKind kind, PassCosts costs,
                                              double capacity) {
    check_passes(schedule, shape, kind);
    ZT_REQUIRE(capacity > 0, "pipeline schedule: a capacity of ", capacity, " stages: expected more than 0");
    const size_t P = static_cast<size_t>(shape.stages);
    PipelineClock clock(shape, kind, costs);
    std::vector<size_t> next(P, 0);
    std::vector<double> left(P, -1), started(P, 0);  // the running pass's work left (-1: idle)
    // Events in time order: start what can start, then advance to the next pass's end, every
    // running pass at the shared rate.
    for (double now = 0;;) {
        size_t running = 0;
        for (size_t s = 0; s < P; ++s) {
            const auto& list = schedule[s];
            if (left[s] < 0 && next[s] < list.size() && clock.ready_at(static_cast<int>(s), list[next[s]]) != kNever) {
                left[s] = clock.cost(list[next[s]]);
                started[s] = now;
            }
            if (left[s] >= 0) ++running;
        }
        if (running == 0) break;
        const double rate = std::min(1.0, capacity / static_cast<double>(running));
        double first = kNever;
        for (size_t s = 0; s < P; ++s) {
            if (left[s] >= 0) first = std::min(first, left[s]);
        }
        now += first / rate;
        for (size_t s = 0; s < P; ++s) {
            if (left[s] < 0) continue;
            left[s] -= first;
            if (left[s] > 1e-12 * (1 + first)) continue;
            clock.finish(static_cast<int>(s), schedule[s][next[s]], started[s], now);
            ++next[s];
            left[s] = -1;
        }
    }
    check_finished(schedule, next);
    return clock.timeline();
}

}  // namespace zt
