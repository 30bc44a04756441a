// sliding_window_bench: a backend's attention (the CPU's, or with --backend cuda the GPU's:
// CUDA builds), forward then backward, with a sliding window (Mistral:
// gqa_attention_forward_segmented with attend_from[t] = t - window + 1) against plain causal
// attention at the same shape, and the ratio of their times against the ratio of the scores
// each must compute (causal T (T + 1) / 2 pairs; the window sum_t min(t + 1, window)). Runs
// alternate (causal, window, window, causal, ...) so machine noise hits both alike; medians
// over the repetitions, timed on the backend's own clock (a GPU's events). bench/
// sliding_window_bench.sh runs it and records the machine.
//
//   sliding_window_bench [--T 4096] [--window 1024] [--batch 1] [--heads 8] [--kv-heads 2]
//                        [--hs 64] [--threads 2] [--reps 5] [--backend cpu|cuda]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config.hpp"
#if ZT_HAVE_CUDA
#include "ztrain/backend_cuda/cuda_backend.hpp"
#endif

namespace {

struct Options {
    int T = 4096, window = 1024, B = 1, NH = 8, NKV = 2, hs = 64, threads = 2, reps = 5;
    std::string backend = "cpu";
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--backend") {
            o.backend = argv[i + 1];
            continue;
        }
        const int v = std::atoi(argv[i + 1]);
        int* field = k == "--T" ? &o.T : k == "--window" ? &o.window : k == "--batch" ? &o.B
                   : k == "--heads" ? &o.NH : k == "--kv-heads" ? &o.NKV : k == "--hs" ? &o.hs
                   : k == "--threads" ? &o.threads : k == "--reps" ? &o.reps : nullptr;
        if (field == nullptr || v < 1) {
            std::fprintf(stderr, "sliding_window_bench: bad option %s %s\n", argv[i], argv[i + 1]);
            std::exit(2);
        }
        *field = v;
    }
    return o;
}

/// This process's CPU time (every thread), in seconds.
double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// One run's wall and CPU seconds.
struct Time {
    double wall, cpu;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::unique_ptr<zt::Backend> make_backend(const Options& o) {
    if (o.backend == "cpu") return zt::make_cpu_backend(o.threads);
#if ZT_HAVE_CUDA
    if (o.backend == "cuda") return zt::make_cuda_backend(0);
#endif
    std::fprintf(stderr, "sliding_window_bench: --backend %s: expected cpu%s\n", o.backend.c_str(),
                 ZT_HAVE_CUDA ? " or cuda" : " (this build has no CUDA backend)");
    std::exit(2);
}

/// `host` copied into a new buffer of the backend's memory.
float* on_backend(zt::Backend& be, const std::vector<float>& host) {
    float* p = be.alloc_floats(std::max<size_t>(host.size(), 1));
    be.to_device(p, host.data(), host.size() * sizeof(float));
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const size_t T = static_cast<size_t>(o.T);
    const size_t W = static_cast<size_t>(o.NH + 2 * o.NKV) * static_cast<size_t>(o.hs);
    const size_t O = static_cast<size_t>(o.NH) * static_cast<size_t>(o.hs);
    const size_t B = static_cast<size_t>(o.B);
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> qkv(B * T * W), dout(B * T * O), out(B * T * O), dqkv(qkv.size());
    for (float& x : qkv) x = dist(gen);
    for (float& x : dout) x = dist(gen);
    std::vector<float> att(B * static_cast<size_t>(o.NH) * T * T);
    std::vector<int32_t> from(B * T);
    for (size_t i = 0; i < from.size(); ++i) {
        from[i] = std::max(0, static_cast<int>(i % T) - o.window + 1);
    }
    std::unique_ptr<zt::Backend> backend = make_backend(o);
    zt::Backend& be = *backend;
    // The backend's memory (the CPU's is the host's; a GPU's its device); attend_from stays
    // host memory, as the interface takes it.
    float* d_qkv = on_backend(be, qkv);
    float* d_dout = on_backend(be, dout);
    float* d_out = on_backend(be, out);
    float* d_dqkv = on_backend(be, dqkv);
    float* d_att = on_backend(be, att);
    float* d_scratch = be.alloc_floats(std::max<size_t>(be.attention_scratch_floats(o.B, o.T, o.NH), 1));
    const std::unique_ptr<zt::OpClock> clock = be.make_op_clock();
    auto run = [&](bool window) {
        be.zero_bytes(d_dqkv, dqkv.size() * sizeof(float));
        const double c0 = cpu_seconds();
        const size_t m0 = clock->mark();
        if (window) {
            be.gqa_attention_forward_segmented(d_out, d_att, d_qkv, from.data(), o.B, o.T, o.NH, o.NKV, o.hs);
            be.gqa_attention_backward_segmented(d_dqkv, d_scratch, d_dout, d_qkv, d_att, from.data(), o.B, o.T, o.NH,
                                                o.NKV, o.hs);
        } else {
            be.gqa_attention_forward(d_out, d_att, d_qkv, o.B, o.T, o.NH, o.NKV, o.hs);
            be.gqa_attention_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_att, o.B, o.T, o.NH, o.NKV, o.hs);
        }
        const size_t m1 = clock->mark();
        const double wall = clock->elapsed_ms(m0, m1) / 1e3;
        clock->reset();
        return Time{wall, cpu_seconds() - c0};
    };
    run(false);  // warm-up: pages touched, threads started
    run(true);
    std::vector<double> causal, windowed, causal_cpu, windowed_cpu;
    for (int r = 0; r < o.reps; ++r) {
        const bool window_first = r % 2 == 1;
        for (const bool window : {window_first, !window_first}) {
            const Time t = run(window);
            (window ? windowed : causal).push_back(t.wall);
            (window ? windowed_cpu : causal_cpu).push_back(t.cpu);
        }
        std::printf("rep %d: causal %.3f s (cpu %.3f s), window %.3f s (cpu %.3f s)\n", r + 1, causal.back(),
                    causal_cpu.back(), windowed.back(), windowed_cpu.back());
    }
    double causal_pairs = 0, window_pairs = 0;
    for (int t = 0; t < o.T; ++t) {
        causal_pairs += t + 1;
        window_pairs += std::min(t + 1, o.window);
    }
    const double flop_ratio = window_pairs / causal_pairs;
    const double time_ratio = median(windowed) / median(causal);
    std::printf("backend %s, T %d, window %d, batch %d, heads %d (key/value %d), head size %d, threads %d, %d reps\n",
                o.backend.c_str(), o.T, o.window, o.B, o.NH, o.NKV, o.hs, o.threads, o.reps);
    const double cpu_ratio = median(windowed_cpu) / median(causal_cpu);
    std::printf("median forward+backward: causal %.3f s (cpu %.3f s), window %.3f s (cpu %.3f s)\n", median(causal),
                median(causal_cpu), median(windowed), median(windowed_cpu));
    std::printf("score ratio %.3f; wall time ratio %.3f (%.2fx the score ratio, %s 15%%); cpu time ratio %.3f "
                "(%.2fx, %s 15%%)\n",
                flop_ratio, time_ratio, time_ratio / flop_ratio, time_ratio <= 1.15 * flop_ratio ? "within" : "NOT within",
                cpu_ratio, cpu_ratio / flop_ratio, cpu_ratio <= 1.15 * flop_ratio ? "within" : "NOT within");
    for (float* p : {d_qkv, d_dout, d_out, d_dqkv, d_att, d_scratch}) be.free(p);
    return 0;
}
