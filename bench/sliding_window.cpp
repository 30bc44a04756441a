// sliding_window_bench: the CPU backend's attention, forward then backward, with a sliding
// window (Mistral: gqa_attention_forward_segmented with attend_from[t] = t - window + 1)
// against plain causal attention at the same shape, and the ratio of their times against
// the ratio of the scores each must compute (causal T (T + 1) / 2 pairs; the window
// sum_t min(t + 1, window)). Runs alternate (causal, window, window, causal, ...) so machine
// noise hits both alike; medians over the repetitions. bench/sliding_window_bench.sh runs it
// and records the machine.
//
//   sliding_window_bench [--T 4096] [--window 1024] [--batch 1] [--heads 8] [--kv-heads 2]
//                        [--hs 64] [--threads 2] [--reps 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"

namespace {

struct Options {
    int T = 4096, window = 1024, B = 1, NH = 8, NKV = 2, hs = 64, threads = 2, reps = 5;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
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
    auto backend = zt::make_cpu_backend(o.threads);
    std::vector<float> scratch(backend->attention_scratch_floats(o.B, o.T, o.NH));
    auto run = [&](bool window) {
        std::fill(dqkv.begin(), dqkv.end(), 0.f);
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_seconds();
        if (window) {
            backend->gqa_attention_forward_segmented(out.data(), att.data(), qkv.data(), from.data(), o.B, o.T, o.NH,
                                                     o.NKV, o.hs);
            backend->gqa_attention_backward_segmented(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                                      att.data(), from.data(), o.B, o.T, o.NH, o.NKV, o.hs);
        } else {
            backend->gqa_attention_forward(out.data(), att.data(), qkv.data(), o.B, o.T, o.NH, o.NKV, o.hs);
            backend->gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), o.B,
                                            o.T, o.NH, o.NKV, o.hs);
        }
        return Time{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cpu_seconds() - c0};
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
    std::printf("T %d, window %d, batch %d, heads %d (key/value %d), head size %d, threads %d, %d reps\n", o.T,
                o.window, o.B, o.NH, o.NKV, o.hs, o.threads, o.reps);
    const double cpu_ratio = median(windowed_cpu) / median(causal_cpu);
    std::printf("median forward+backward: causal %.3f s (cpu %.3f s), window %.3f s (cpu %.3f s)\n", median(causal),
                median(causal_cpu), median(windowed), median(windowed_cpu));
    std::printf("score ratio %.3f; wall time ratio %.3f (%.2fx the score ratio, %s 15%%); cpu time ratio %.3f "
                "(%.2fx, %s 15%%)\n",
                flop_ratio, time_ratio, time_ratio / flop_ratio, time_ratio <= 1.15 * flop_ratio ? "within" : "NOT within",
                cpu_ratio, cpu_ratio / flop_ratio, cpu_ratio <= 1.15 * flop_ratio ? "within" : "NOT within");
    return 0;
}
