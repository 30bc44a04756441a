// One pipeline-parallel step, timed: every rank of the world is a stage (P = ranks), the
// model's blocks split by balance_pipeline_layers, and PipelineRunner runs the schedule's
// passes with real MPI traffic. Per configuration rank 0 prints one JSON line: the median
// step time, each stage's median time blocked on its neighbours (its bubble, measured), the
// bubble fraction that gives against the schedule's formula, and the bytes the stages sent
// against 2 (V - 1) m b s h bytes. Run by bench/pipeline_bench.sh.
//   mpiexec -np P pipeline_step_bench SCHEDULE M [layers=8 embd=256 heads=4 seq=128 batch=4 steps=6 v=2]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"

namespace zt {
namespace {

/// Every unit whole, gradients accumulated in place: the store of a replicated fp32 state.
class BenchStore final : public UnitStore {
  public:
    explicit BenchStore(const ModelLayout& layout) {
        for (int u = 0; u < layout.num_units(); ++u) {
            const size_t n = layout.unit_numel[static_cast<size_t>(u)];
            m_params.emplace_back(n);
            m_grads.emplace_back(n, 0.f);
            init_unit(layout, u, 1, m_params.back().data());
        }
    }
    const float* acquire(int unit) override { return m_params[static_cast<size_t>(unit)].data(); }
    void release(int unit) override { (void)unit; }
    float* grads(int unit) override { return m_grads[static_cast<size_t>(unit)].data(); }

  private:
    std::vector<std::vector<float>> m_params;
    std::vector<std::vector<float>> m_grads;
};

int setting(int argc, char** argv, const std::string& key, int fallback) {
    for (int i = 3; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind(key + "=", 0) == 0) return std::atoi(a.c_str() + key.size() + 1);
    }
    return fallback;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int run(int argc, char** argv) {
    int P = 1;
    int s = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &s);
    if (argc < 3) {
        if (s == 0) std::fprintf(stderr, "usage: pipeline_step_bench 1f1b|interleaved|zb M [key=value ...]\n");
        return 2;
    }
    const std::string schedule = argv[1];
    const PipelineScheduleKind kind = schedule == "interleaved" ? PipelineScheduleKind::kInterleaved
                                      : schedule == "zb"        ? PipelineScheduleKind::kZeroBubble
                                                                : PipelineScheduleKind::k1F1B;
    const int m = std::atoi(argv[2]);
    const int v = kind == PipelineScheduleKind::kInterleaved ? setting(argc, argv, "v", 2) : 1;
    ModelConfig mc;
    mc.n_layer = setting(argc, argv, "layers", 8);
    mc.n_embd = setting(argc, argv, "embd", 256);
    mc.n_head = setting(argc, argv, "heads", 4);
    mc.seq_len = setting(argc, argv, "seq", 128);
    mc.vocab_size = setting(argc, argv, "vocab", 4096);
    const int B = setting(argc, argv, "batch", 4);
    const int steps = setting(argc, argv, "steps", 6);
    const int T = mc.seq_len;

    auto backend = make_cpu_backend(1);
    const PipelineStages split = balance_pipeline_layers(mc, P, v);
    PipelineRunner runner(MPI_COMM_WORLD, kind, PipelineShape{P, m, v});
    std::vector<std::vector<std::unique_ptr<Transformer>>> owned(static_cast<size_t>(v));
    std::vector<std::vector<Transformer*>> models(static_cast<size_t>(v));
    for (int c = 0; c < v; ++c) {
        for (int k = 0; k < runner.slots()[static_cast<size_t>(c)]; ++k) {
            owned[static_cast<size_t>(c)].push_back(std::make_unique<Transformer>(
                mc, *backend, B,
                TransformerOptions().with_stage(PipelineRunner::chunk_blocks(split.first_layer, c * P + s))));
            models[static_cast<size_t>(c)].push_back(owned[static_cast<size_t>(c)].back().get());
        }
    }
    BenchStore store(owned[0][0]->layout());
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(m), std::vector<int32_t>(static_cast<size_t>(B * T)));
    for (int a = 0; a < m; ++a) {
        for (size_t i = 0; i < tokens[static_cast<size_t>(a)].size(); ++i) {
            tokens[static_cast<size_t>(a)][i] = static_cast<int32_t>(random_bits(3, static_cast<uint64_t>(a), i) %
                                                                      static_cast<uint64_t>(mc.vocab_size));
        }
    }
    auto batch = [&](int a) {
        const int32_t* t = tokens[static_cast<size_t>(a)].data();
        return PipelineMicroBatch{t, t, {}};
    };
    std::vector<double> step_s;
    std::vector<double> wait_s;
    size_t bytes = 0;
    for (int i = 0; i <= steps; ++i) {  // step 0 warms up and is not counted
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        const PipelineStepTotals got = runner.run(store, models, batch, B, T, 1.f / static_cast<float>(m * B * T));
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i == 0) continue;
        step_s.push_back(dt);
        wait_s.push_back(got.wait_s);
        bytes = got.bytes_sent;
    }
    const double my_step = median(step_s);
    const double my_wait = median(wait_s);
    std::vector<double> waits(static_cast<size_t>(P));
    std::vector<double> step_all(static_cast<size_t>(P));
    MPI_Gather(&my_wait, 1, MPI_DOUBLE, waits.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&my_step, 1, MPI_DOUBLE, step_all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double sent = static_cast<double>(bytes);
    MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (s != 0) return 0;
    const double step = *std::max_element(step_all.begin(), step_all.end());
    double bubble = 0;
    std::string per_stage;
    std::string busy;
    for (int k = 0; k < P; ++k) {
        const double w = waits[static_cast<size_t>(k)];
        bubble = std::max(bubble, w / (step - w));
        per_stage += (k ? "," : "") + std::to_string(w);
        busy += (k ? "," : "") + std::to_string(step_all[static_cast<size_t>(k)] - w);
    }
    std::string layers;
    for (int k = 0; k < split.count(); ++k) layers += (k ? "," : "") + std::to_string(split.layers(k));
    const int V = P * v;
    // (P - 1) / (v m); zero-bubble ZB-H1 with F = B = W: (P - 1)(F + B - W) / (m (F + B + W)).
    const double bubble_formula = static_cast<double>(P - 1) / (v * m) /
                                  (kind == PipelineScheduleKind::kZeroBubble ? 3.0 : 1.0);
    const double formula_bytes = 2.0 * (V - 1) * m * B * T * mc.n_embd * sizeof(float);
    std::printf("{\"schedule\":\"%s\",\"P\":%d,\"v\":%d,\"m\":%d,\"layers\":\"%s\",\"step_s\":%.4f,"
                "\"wait_s\":[%s],\"busy_s\":[%s],\"bubble_measured\":%.4f,\"bubble_formula\":%.4f,\"bytes\":%.0f,"
                "\"bytes_formula\":%.0f}\n",
                schedule.c_str(), P, v, m, layers.c_str(), step, per_stage.c_str(), busy.c_str(), bubble,
                bubble_formula, sent, formula_bytes);
    return 0;
}

}  // namespace
}  // namespace zt

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int code = 0;
    try {
        code = zt::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pipeline_step_bench: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return code;
}
