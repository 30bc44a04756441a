// One stage's passes of a pipeline step, with the point-to-point traffic between stages (see
// include/ztrain/parallel/pipeline_runner.hpp).
#include "ztrain/parallel/pipeline_runner.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "ztrain/core/error.hpp"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

size_t boundary_bytes(const Transformer& model, int B, int T) {
    return model.stage_elements(B, T) * dtype_size(model.activation_dtype());
}

/// For each pass of `passes`: a forward directly followed by its micro-batch's backward on
/// its chunk (no other pass between them).
std::vector<bool> backward_follows(const std::vector<PipelinePass>& passes) {
    std::vector<bool> out(passes.size(), false);
    for (size_t i = 0; i + 1 < passes.size(); ++i) {
        const PipelinePass& f = passes[i];
        const PipelinePass& b = passes[i + 1];
        out[i] = f.kind == PassKind::kForward && b.kind == PassKind::kBackward && b.micro == f.micro &&
                 b.chunk == f.chunk;
    }
    return out;
}

}  // namespace

std::vector<int> PipelineRunner::slots_per_chunk(const std::vector<PipelinePass>& passes, int chunks) {
    std::vector<int> in_flight(static_cast<size_t>(chunks), 0);
    std::vector<int> peak(static_cast<size_t>(chunks), 0);
    // Zero-bubble keeps a micro-batch's activations until its W pass; the others until B.
    const bool split = std::any_of(passes.begin(), passes.end(), [](const PipelinePass& p) {
        return p.kind == PassKind::kWeight;
    });
    for (const PipelinePass& p : passes) {
        int& n = in_flight[static_cast<size_t>(p.chunk)];
        if (p.kind == PassKind::kForward) {
            ++n;
            peak[static_cast<size_t>(p.chunk)] = std::max(peak[static_cast<size_t>(p.chunk)], n);
        } else if (p.kind == (split ? PassKind::kWeight : PassKind::kBackward)) {
            --n;
        }
    }
    return peak;
}

ActivationCount PipelineRunner::stage_activations(PipelineScheduleKind kind, PipelineShape shape, int stage,
                                                  const std::vector<int>& bounds, const ModelConfig& cfg,
                                                  int max_batch, ActivationRecompute recompute,
                                                  size_t attention_scratch_floats,
                                                  int tensor, bool sequence) {
    const std::vector<PipelinePass> passes = make_pipeline_schedule(kind, shape)[static_cast<size_t>(stage)];
    const std::vector<int> slots = slots_per_chunk(passes, shape.virtual_stages);
    const int rows = Transformer::chunked_head_rows(cfg, max_batch, tensor);
    ActivationCount total;
    for (int c = 0; c < shape.virtual_stages; ++c) {
        const StageBlocks blocks = chunk_blocks(bounds, c * shape.stages + stage);
        // Zero-bubble's weight passes keep the products' output gradients in the blocks' own
        // activations (ParallelLinear::backward_into): nothing more per model.
        const ActivationCount one = Transformer::activations(cfg, max_batch, recompute, attention_scratch_floats,
                                                             tensor, sequence, blocks, rows);
        total.act += slots[static_cast<size_t>(c)] * one.act;
        total.f32 += slots[static_cast<size_t>(c)] * one.f32;
        // Under recompute = attention the stage's models share one block's probabilities
        // (ScheduledTraining::make_models), the same size in every chunk.
        total.probs = recompute == ActivationRecompute::kAttention ? one.probs
                                                                   : total.probs + slots[static_cast<size_t>(c)] * one.probs;
    }
    return total;
}

ModelLayout PipelineRunner::stage_state_layout(const ModelLayout& whole, PipelineShape shape, int stage,
                                               const std::vector<int>& bounds) {
    std::vector<int> units;
    for (int c = 0; c < shape.virtual_stages; ++c) {
        for (int u : stage_units(whole.model, chunk_blocks(bounds, c * shape.stages + stage))) units.push_back(u);
    }
    std::sort(units.begin(), units.end());
    units.erase(std::unique(units.begin(), units.end()), units.end());
    // Unit 0 (the embedding, tied to the head) lives on the first and the last stage.
    const bool mirrors = shape.stages > 1 && stage == shape.stages - 1;
    return stage_layout(whole, units, PipelineStage{shape.stages, stage, mirrors ? std::vector<int>{0} : std::vector<int>{}});
}

PipelineRunner::PipelineRunner(MPI_Comm pipeline, PipelineScheduleKind kind, PipelineShape shape)
    : PipelineRunner(pipeline == MPI_COMM_NULL ? nullptr : make_mpi_point_to_point(pipeline), kind, shape) {}

PipelineRunner::PipelineRunner(std::unique_ptr<PointToPoint> link, PipelineScheduleKind kind, PipelineShape shape)
    : m_link(std::move(link)), m_shape(shape) {
    // One stage sends nothing: it needs no link.
    const int ranks = m_link ? m_link->size() : 1;
    ZT_REQUIRE(ranks == shape.stages, "pipeline communicator of ", ranks, " ranks for ", shape.stages, " stages");
    m_stage = m_link ? m_link->rank() : 0;
    m_passes = make_pipeline_schedule(kind, shape)[static_cast<size_t>(m_stage)];
    m_backward_follows = backward_follows(m_passes);
    m_slots = slots_per_chunk(m_passes, shape.virtual_stages);
    // The messages of a chunk pair up by order (one tag per virtual stage and direction):
    // its forwards, and its backwards, must come in micro-batch order. Its weight passes too:
    // micro-batch m's slot (m mod slots) is free again once every earlier one's is.
    std::vector<int> next_f(static_cast<size_t>(shape.virtual_stages), 0);
    std::vector<int> next_b(static_cast<size_t>(shape.virtual_stages), 0);
    std::vector<int> next_w(static_cast<size_t>(shape.virtual_stages), 0);
    for (const PipelinePass& p : m_passes) {
        m_split |= p.kind == PassKind::kWeight;
        std::vector<int>& order = p.kind == PassKind::kForward ? next_f : p.kind == PassKind::kBackward ? next_b : next_w;
        int& next = order[static_cast<size_t>(p.chunk)];
        ZT_REQUIRE(p.micro == next, "stage ", m_stage, ": pass ", pass_name(p), " out of micro-batch order");
        ++next;
    }
    const int V = shape.stages * shape.virtual_stages;
    ZT_REQUIRE(!m_link || tag(V, true) <= m_link->max_tag(), "pipeline of ", V, " virtual stages: message tags end at ",
               m_link->max_tag());
    m_sends.resize(static_cast<size_t>(shape.virtual_stages));
    for (size_t c = 0; c < m_sends.size(); ++c) m_sends[c].resize(static_cast<size_t>(m_slots[c]));
}

void PipelineRunner::settle(int chunk, int slot, PipelineStepTotals& totals) {
    std::vector<SendRequest>& pending = m_sends[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
    if (pending.empty()) return;
    const auto t0 = Clock::now();
    std::optional<Communicator::PendingGuard> pending_guard;
    if (m_watch != nullptr) pending_guard.emplace(*m_watch, "pipeline send");
    for (SendRequest& r : pending) m_link->wait(r);
    totals.wait_s += seconds_since(t0);
    pending.clear();
}

void PipelineRunner::settle_all(PipelineStepTotals& totals) {
    for (size_t c = 0; c < m_sends.size(); ++c) {
        for (size_t k = 0; k < m_sends[c].size(); ++k) settle(static_cast<int>(c), static_cast<int>(k), totals);
    }
}

void PipelineRunner::receive(void* buf, size_t bytes, int peer, int tag, const char* what,
                             PipelineStepTotals& totals) {
    const auto t0 = Clock::now();
    std::optional<Communicator::PendingGuard> pending_guard;
    if (m_watch != nullptr) pending_guard.emplace(*m_watch, what);
    m_link->recv(buf, bytes, peer, tag);
    totals.wait_s += seconds_since(t0);
}

void PipelineRunner::send(int chunk, int slot, const void* buf, size_t bytes, int peer, int tag,
                          PipelineStepTotals& totals) {
    m_sends[static_cast<size_t>(chunk)][static_cast<size_t>(slot)].push_back(m_link->start_send(buf, bytes, peer, tag));
    totals.bytes_sent += bytes;
}

PipelineStepTotals PipelineRunner::run(UnitStore& store, const std::vector<std::vector<Transformer*>>& models,
                                       const std::function<PipelineMicroBatch(int)>& batch, int B, int T, float dloss,
                                       const std::function<void(int, int)>& begin_micro_step) {
    ZT_REQUIRE(models.size() == m_slots.size(), models.size(), " chunks' models for ", m_slots.size(), " chunks");
    for (size_t c = 0; c < models.size(); ++c) {
        ZT_REQUIRE(static_cast<int>(models[c].size()) >= m_slots[c], "chunk ", c, ": ", models[c].size(),
                   " models for ", m_slots[c], " micro-batches in flight");
    }
    PipelineStepTotals totals;
    bool begun = false;  // the micro-step of the backward that follows began at its forward
    for (size_t i = 0; i < m_passes.size(); ++i) {
        const PipelinePass& p = m_passes[i];
        const int slot = p.micro % m_slots[static_cast<size_t>(p.chunk)];
        Transformer& model = *models[static_cast<size_t>(p.chunk)][static_cast<size_t>(slot)];
        settle(p.chunk, slot, totals);
        const PipelineMicroBatch mb = batch(p.micro);
        const int rows_T = mb.positions_of(T);
        const int rows_B = mb.rows_of(B);
        const bool begins_here = p.kind == PassKind::kForward   ? !m_split && m_backward_follows[i]
                                 : p.kind == PassKind::kBackward ? !m_split && !begun
                                                                 : true;
        if (begin_micro_step && begins_here) begin_micro_step(p.micro, p.chunk);
        begun = p.kind == PassKind::kForward && begins_here;
        if (p.kind == PassKind::kForward) {
            forward_pass(store, model, mb, p.chunk, slot, rows_B, rows_T, dloss, totals);
            continue;
        }
        const auto t0 = Clock::now();
        if (p.kind == PassKind::kBackward) {
            // A split backward leaves the weight gradients, and the micro-step's gradient
            // bookkeeping, to the weight pass.
            model.defer_weight_grads(m_split);
            backward_pass(store, model, p.chunk, slot, rows_B, rows_T, totals);
        } else {
            model.backward_weights(store);
            model.defer_weight_grads(false);
            totals.backward_s += seconds_since(t0);
        }
    }
    settle_all(totals);
    return totals;
}

PipelineStepTotals PipelineRunner::run_forward(UnitStore& store, const std::vector<std::vector<Transformer*>>& models,
                                               const std::function<PipelineMicroBatch(int)>& batch, int count, int B,
                                               int T) {
    ZT_REQUIRE(models.size() == m_slots.size(), models.size(), " chunks' models for ", m_slots.size(), " chunks");
    const int P = m_shape.stages;
    const int chunks = static_cast<int>(models.size());
    std::vector<int> slots(models.size());
    for (int c = 0; c < chunks; ++c) {
        ZT_REQUIRE(!models[static_cast<size_t>(c)].empty(), "chunk ", c, " has no model");
        slots[static_cast<size_t>(c)] =
            static_cast<int>(std::min(models[static_cast<size_t>(c)].size(), m_sends[static_cast<size_t>(c)].size()));
        ZT_REQUIRE(m_stage < P - 1 || c == chunks - 1 || slots[static_cast<size_t>(c)] >= std::min(P, count),
                   "the last stage's chunk ", c, " has ", slots[static_cast<size_t>(c)], " models for groups of ", P,
                   " micro-batches");
    }
    PipelineStepTotals totals;
    // Groups of P micro-batches, each through every chunk in turn (the interleaved schedule's
    // forward order). A send completes only once its receiver posts the receive (large
    // messages), and a slot's next forward waits for its last send: every stage waits only on
    // passes earlier in the order (group, chunk, micro-batch, stage), since the last stage
    // holds at least P micro-batches of each chunk it sends to the first stage. Chunk by chunk
    // over all `count` instead, the last stage's sends to the first stage's next chunk fill its
    // slots while the first stage is still on the chunk before: a deadlock.
    for (int g = 0; g < count; g += P) {
        for (int c = 0; c < chunks; ++c) {
            const std::vector<Transformer*>& chunk = models[static_cast<size_t>(c)];
            for (int a = g; a < std::min(count, g + P); ++a) {
                const int slot = a % slots[static_cast<size_t>(c)];
                settle(c, slot, totals);
                const PipelineMicroBatch mb = batch(a);
                forward_pass(store, *chunk[static_cast<size_t>(slot)], mb, c, slot, mb.rows_of(B),
                             mb.positions_of(T), 0.f, totals);
            }
        }
    }
    settle_all(totals);
    return totals;
}

void PipelineRunner::forward_pass(UnitStore& store, Transformer& model, const PipelineMicroBatch& mb, int chunk,
                                  int slot, int B, int T, float dloss, PipelineStepTotals& totals) {
    const int P = m_shape.stages;
    const int vs = chunk * P + m_stage;
    const int V = P * m_shape.virtual_stages;
    const size_t bytes = boundary_bytes(model, B, T);
    if (vs > 0) {
        receive(model.stage_input().data, bytes, (vs - 1) % P, tag(vs, false), "pipeline receive (activations)", totals);
    }
    const auto t0 = Clock::now();
    model.set_dropout_rows(mb.dropout);
    const float mean = model.forward(store, mb.inputs, mb.targets, B, T, dloss, mb.rows);
    totals.forward_s += seconds_since(t0);
    if (vs == V - 1) {
        totals.loss_means += mean;
        totals.loss_sum += model.last_loss_sum();
        totals.targets += model.last_target_count();
        return;
    }
    send(chunk, slot, model.stage_output().data, bytes, (vs + 1) % P, tag(vs + 1, false), totals);
}

void PipelineRunner::backward_pass(UnitStore& store, Transformer& model, int chunk, int slot, int B, int T,
                                   PipelineStepTotals& totals) {
    const int P = m_shape.stages;
    const int vs = chunk * P + m_stage;
    const int V = P * m_shape.virtual_stages;
    const size_t bytes = boundary_bytes(model, B, T);
    if (vs < V - 1) {
        receive(model.stage_output_grad().data, bytes, (vs + 1) % P, tag(vs, true), "pipeline receive (gradients)",
                totals);
    }
    const auto t0 = Clock::now();
    model.backward(store);
    totals.backward_s += seconds_since(t0);
    if (vs == 0) return;
    send(chunk, slot, model.stage_input_grad().data, bytes, (vs - 1) % P, tag(vs - 1, true), totals);
}

}  // namespace zt
