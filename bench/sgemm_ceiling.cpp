// sgemm_ceiling: the OpenBLAS fp32 GEMM rate at the matrix shapes of GPT-2 training, and
// the tokens/s a trainer could reach if it did nothing but those GEMMs at that rate.
//
// Build:  g++ -O2 -I/usr/include/x86_64-linux-gnu/openblas-pthread sgemm_ceiling.cpp -lopenblas
// Run:    ./a.out [--layers 12] [--embd 768] [--bt 256] [--seq 64] [--vocab-padded 50304]
//                 [--threads 2] [--reps 5]
//
// Shapes (row-major, weights stored (out, in) as in ztrain/llm.c; M = B*T rows):
//   forward   out (M, OC)  = inp (M, C) @ W^T            sgemm(NoTrans, Trans,   M,  OC, C)
//   dgrad     dinp (M, C) += dout (M, OC) @ W            sgemm(NoTrans, NoTrans, M,  C,  OC)
//   wgrad     dW (OC, C)  += dout^T (OC, M) @ inp (M, C) sgemm(Trans,   NoTrans, OC, C,  M)
// for the four per-block linears (C->3C qkv, C->C attn proj, C->4C fc, 4C->C mlp proj;
// each counted n_layer times) and the LM head (C -> Vp, counted once).
//
// FLOP formula (per token, training = forward + backward):
//   N_mm      = 12 * L * C^2 + C * Vp          (weights of all matmuls; biases, LN, wpe out)
//   flops/tok = 6 * N_mm + 12 * L * T * C      (6N: 2 fwd + 4 bwd per weight; attention
//               Q.K^T and P.V: 2*2*T*C per layer forward, x3 with backward, full T x T
//               counted, as in the nanoGPT/PaLM MFU formula)
// The GEMM rate is FLOP-weighted over the shapes: sum(flops_i * n_i) / sum(time_i * n_i),
// with time_i the median of --reps timed calls. The attention products are assumed to run
// at that same rate (in practice they are smaller and slower). Everything that is not a
// GEMM (layernorm, GELU, softmax, AdamW, cross-entropy) is counted as free, so the
// tokens/s figure is an upper bound for a trainer on this BLAS.
//
// OpenBLAS runs its own pool with --threads threads (openblas_set_num_threads). The last
// line of stdout is a JSON object with the results.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
    std::string name;
    bool ta;
    bool tb;
    int M, N, K;
    int count;  // occurrences per training step
    std::vector<double> secs;
    double flops() const { return 2.0 * M * N * K; }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
    int L = 12, C = 768, BT = 256, T = 64, Vp = 50304, threads = 2, reps = 5;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> int {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return std::atoi(argv[++i]);
        };
        if (a == "--layers") L = next();
        else if (a == "--embd") C = next();
        else if (a == "--bt") BT = next();
        else if (a == "--seq") T = next();
        else if (a == "--vocab-padded") Vp = next();
        else if (a == "--threads") threads = next();
        else if (a == "--reps") reps = next();
        else {
            std::fprintf(stderr, "usage: %s [--layers L] [--embd C] [--bt B*T] [--seq T] "
                                 "[--vocab-padded Vp] [--threads N] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    openblas_set_num_threads(threads);

    std::vector<Shape> shapes;
    struct Lin { const char* name; int in, out, count; };
    const Lin lins[] = {{"qkv", C, 3 * C, L}, {"attn_proj", C, C, L}, {"fc", C, 4 * C, L},
                        {"mlp_proj", 4 * C, C, L}, {"lm_head", C, Vp, 1}};
    for (const Lin& l : lins) {
        shapes.push_back({std::string(l.name) + ".fwd", false, true, BT, l.out, l.in, l.count, {}});
        shapes.push_back({std::string(l.name) + ".dgrad", false, false, BT, l.in, l.out, l.count, {}});
        shapes.push_back({std::string(l.name) + ".wgrad", true, false, l.out, l.in, BT, l.count, {}});
    }

    size_t maxA = 0, maxB = 0, maxC = 0;
    for (const Shape& s : shapes) {
        maxA = std::max(maxA, static_cast<size_t>(s.M) * s.K);
        maxB = std::max(maxB, static_cast<size_t>(s.K) * s.N);
        maxC = std::max(maxC, static_cast<size_t>(s.M) * s.N);
    }
    std::vector<float> A(maxA), B(maxB), Cm(maxC, 0.f);
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (float& x : A) x = u(rng);
    for (float& x : B) x = u(rng);

    auto call = [&](const Shape& s) {
        // Leading dimensions of the stored (untransposed) operands.
        const int lda = s.ta ? s.M : s.K;
        const int ldb = s.tb ? s.K : s.N;
        const float beta = s.name.find(".fwd") != std::string::npos ? 0.f : 1.f;
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                    s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.f, A.data(), lda,
                    B.data(), ldb, beta, Cm.data(), s.N);
    };

    for (const Shape& s : shapes) call(s);  // warm-up: page in buffers, start the pool
    // Rounds over all shapes (rather than all reps of one shape in a row) spread the
    // noise of a shared machine evenly across shapes.
    for (int r = 0; r < reps; ++r) {
        for (Shape& s : shapes) {
            const auto t0 = std::chrono::steady_clock::now();
            call(s);
            const auto t1 = std::chrono::steady_clock::now();
            s.secs.push_back(std::chrono::duration<double>(t1 - t0).count());
        }
    }

    std::printf("sgemm_ceiling: OpenBLAS %d thread(s), L=%d C=%d B*T=%d T=%d Vp=%d, "
                "median of %d calls per shape\n", threads, L, C, BT, T, Vp, reps);
    std::printf("%-16s %6s %6s %6s %5s %10s %9s\n", "shape", "M", "N", "K", "x", "ms", "GFLOP/s");
    double tot_flops = 0.0, tot_secs = 0.0;
    for (const Shape& s : shapes) {
        const double t = median(s.secs);
        std::printf("%-16s %6d %6d %6d %5d %10.3f %9.1f\n", s.name.c_str(), s.M, s.N, s.K,
                    s.count, t * 1e3, s.flops() / t * 1e-9);
        tot_flops += s.flops() * s.count;
        tot_secs += t * s.count;
    }
    const double rate = tot_flops / tot_secs;
    const double n_mm = 12.0 * L * C * C + 1.0 * C * Vp;
    const double flops_tok = 6.0 * n_mm + 12.0 * L * T * C;
    const double ceiling = rate / flops_tok;
    std::printf("FLOP-weighted sgemm rate: %.1f GFLOP/s (matmul FLOPs per step %.1f GFLOP, "
                "%.3f s)\n", rate * 1e-9, tot_flops * 1e-9, tot_secs);
    std::printf("flops/token = 6*N_mm + 12*L*T*C = 6*%.2fM + %.2fM = %.1f MFLOP\n", n_mm * 1e-6,
                12.0 * L * T * C * 1e-6, flops_tok * 1e-6);
    std::printf("tokens/s ceiling (GEMMs only, everything else free): %.1f\n", ceiling);
    std::printf("{\"threads\": %d, \"layers\": %d, \"embd\": %d, \"bt\": %d, \"seq\": %d, "
                "\"vocab_padded\": %d, \"gflops\": %.2f, \"n_mm\": %.0f, \"flops_per_token\": %.0f, "
                "\"tokens_per_s_ceiling\": %.2f}\n",
                threads, L, C, BT, T, Vp, rate * 1e-9, n_mm, flops_tok, ceiling);
    return 0;
}
