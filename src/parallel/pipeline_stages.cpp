#include "ztrain/parallel/pipeline_stages.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"

namespace zt {

namespace {

/// Virtual stage k holding `blocks` blocks: the head with the last one.
double run_cost(const ModelConfig& m, int k, int count, int blocks) {
    return blocks * pipeline_block_cost(m) + (k == count - 1 ? pipeline_head_cost(m) : 0.0);
}

PipelineStages with_costs(const ModelConfig& m, int stages, int virtual_stages, std::vector<int> first) {
    PipelineStages s;
    s.stages = stages;
    s.virtual_stages = virtual_stages;
    s.first_layer = std::move(first);
    for (int k = 0; k < s.count(); ++k) s.cost.push_back(run_cost(m, k, s.count(), s.layers(k)));
    return s;
}

void check_shape(const ModelConfig& m, int stages, int virtual_stages) {
    if (stages < 1 || virtual_stages < 1) {
        throw InputError(str("parallel.pipeline = ", stages, " with ", virtual_stages,
                             " chunks per stage: expected at least 1 of each"));
    }
    if (m.n_layer < stages * virtual_stages) {
        throw InputError(str("parallel.pipeline = ", stages, " x ", virtual_stages, " chunks per stage needs ",
                             stages * virtual_stages, " blocks, one per virtual stage at least; model.n_layer = ",
                             m.n_layer));
    }
}

}  // namespace

double pipeline_block_cost(const ModelConfig& m) {
    const double C = m.n_embd;
    return 2 * model_family(m).block_product_weights(m) + 4.0 * m.seq_len * C;
}

double pipeline_head_cost(const ModelConfig& m) { return 2.0 * m.padded_vocab() * m.n_embd; }

double PipelineStages::imbalance() const {
    const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
    return total > 0 ? *std::max_element(cost.begin(), cost.end()) * static_cast<double>(cost.size()) / total : 1.0;
}

PipelineStages balance_pipeline_layers(const ModelConfig& m, int stages, int virtual_stages) {
    check_shape(m, stages, virtual_stages);
    const int V = stages * virtual_stages;
    const int L = m.n_layer;
    // worst[k][j]: the smallest largest cost of virtual stages 0..k-1 holding blocks [0, j);
    // cut[k][j]: where the last of them starts.
    const double never = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> worst(static_cast<size_t>(V) + 1, std::vector<double>(static_cast<size_t>(L) + 1, never));
    std::vector<std::vector<int>> cut(static_cast<size_t>(V) + 1, std::vector<int>(static_cast<size_t>(L) + 1, 0));
    worst[0][0] = 0;
    for (int k = 1; k <= V; ++k) {
        for (int j = k; j <= L - (V - k); ++j) {
            for (int i = k - 1; i < j; ++i) {
                const double w = std::max(worst[static_cast<size_t>(k) - 1][static_cast<size_t>(i)],
                                          run_cost(m, k - 1, V, j - i));
                if (w < worst[static_cast<size_t>(k)][static_cast<size_t>(j)]) {
                    worst[static_cast<size_t>(k)][static_cast<size_t>(j)] = w;
                    cut[static_cast<size_t>(k)][static_cast<size_t>(j)] = i;
                }
            }
        }
    }
    std::vector<int> first(static_cast<size_t>(V) + 1, 0);
    first[static_cast<size_t>(V)] = L;
    for (int k = V; k > 0; --k) {
        first[static_cast<size_t>(k) - 1] = cut[static_cast<size_t>(k)][static_cast<size_t>(first[static_cast<size_t>(k)])];
    }
    return with_costs(m, stages, virtual_stages, first);
}

PipelineStages pipeline_blocks(const Config& cfg) {
    const int P = cfg.parallel.pipeline;
    const int v = cfg.parallel.chunks();
    if (cfg.parallel.pipeline_layers.empty()) return balance_pipeline_layers(cfg.model, P, v);
    std::vector<int> counts;
    ZT_INPUT_CHECK(parse_pipeline_layers(cfg.parallel.pipeline_layers, counts), "parallel.pipeline_layers = ",
                   cfg.parallel.pipeline_layers, ": expected block counts separated by commas");
    return pipeline_layers_as_given(cfg.model, P, v, counts);
}

PipelineScheduleKind pipeline_schedule_kind(PipelineSchedule s) {
    switch (s) {
        case PipelineSchedule::k1F1B: return PipelineScheduleKind::k1F1B;
        case PipelineSchedule::kInterleaved: return PipelineScheduleKind::kInterleaved;
        case PipelineSchedule::kZeroBubble: return PipelineScheduleKind::kZeroBubble;
    }
    throw Error("parallel.schedule: unknown value");
}

PipelineScheduleKind pipeline_schedule_kind(const ParallelConfig& p) {
    return p.pipeline > 1 ? pipeline_schedule_kind(p.schedule) : PipelineScheduleKind::k1F1B;
}

PipelineStages pipeline_layers_as_given(const ModelConfig& m, int stages, int virtual_stages,
                                        const std::vector<int>& blocks) {
    check_shape(m, stages, virtual_stages);
    const int V = stages * virtual_stages;
    if (static_cast<int>(blocks.size()) != V) {
        throw InputError(str("parallel.pipeline_layers: ", blocks.size(), " counts for ", V,
                             " virtual stages (parallel.pipeline = ", stages, " x ", virtual_stages,
                             " chunks): expected one count per virtual stage"));
    }
    std::vector<int> first{0};
    for (size_t k = 0; k < blocks.size(); ++k) {
        if (blocks[k] < 1) {
            throw InputError(str("parallel.pipeline_layers: virtual stage ", k, " holds ", blocks[k],
                                 " blocks: expected at least 1"));
        }
        first.push_back(first.back() + blocks[k]);
    }
    if (first.back() != m.n_layer) {
        throw InputError(str("parallel.pipeline_layers: the counts add up to ", first.back(),
                             " blocks; model.n_layer = ", m.n_layer, ": expected them to cover the blocks exactly"));
    }
    return with_costs(m, stages, virtual_stages, first);
}

}  // namespace zt
