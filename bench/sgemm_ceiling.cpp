// sgemm_ceiling: the OpenBLAS fp32 GEMM rate at the matrix shapes of GPT-2 or Llama
// training, and the tokens/s a trainer could reach if it did nothing but those GEMMs at that rate.
//
// Build:  g++ -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-pthread sgemm_ceiling.cpp -lopenblas
// Run:    ./a.out [--arch gpt2] [--layers 12] [--embd 768] [--bt 256] [--seq 64]
//                 [--vocab-padded 50304] [--threads 2] [--reps 5] [--no-split]
//         ./a.out --arch llama --layers 30 --embd 576 --heads 9 --kv-heads 3 --ffn 1536
//                 --bt 1024 --seq 256 --vocab-padded 49152
//
// Shapes (row-major, weights stored (out, in) as in ztrain/llm.c; M = B*T rows):
//   forward   out (M, OC)  = inp (M, C) @ W^T            sgemm(NoTrans, Trans,   M,  OC, C)
//   dgrad     dinp (M, C) += dout (M, OC) @ W            sgemm(NoTrans, NoTrans, M,  C,  OC)
//   wgrad     dW (OC, C)  += dout^T (OC, M) @ inp (M, C) sgemm(Trans,   NoTrans, OC, C,  M)
// for the four per-block linears, each counted n_layer times, and the LM head (C -> Vp,
// counted once):
//   gpt2:  C->3C qkv, C->C attn proj, C->4C fc, 4C->C mlp proj
//   llama: C->QKV q|k|v with QKV = (NH + 2*NKV) * hs, hs = C / NH (grouped-query attention:
//          NKV key/value heads); C->C o_proj; C->2F gate|up; F->C down_proj
//          (the packed products ztrain runs, src/model/llama.cpp)
//
// FLOP formula (per token, training = forward + backward):
//   N_mm      = sum of in * out over the products above (x L for the blocks) + C * Vp
//               (weights of all matmuls; biases, norms, wpe out)
//               gpt2:  12 * L * C^2 + C * Vp
//               llama: L * (C * QKV + C^2 + 3 * C * F) + C * Vp
//   flops/tok = 6 * N_mm + 12 * L * T * C      (6N: 2 fwd + 4 bwd per weight; attention
//               Q.K^T and P.V: 2*2*T*C per layer forward (C = NH * hs query width; GQA
//               shares k and v but not the products), x3 with backward, full T x T
//               counted, as in the nanoGPT/PaLM MFU formula)
// Two ways to run each product on --threads threads, both timed:
//   pool:  one cblas_sgemm call on OpenBLAS's own thread pool (openblas_set_num_threads);
//   split: --threads OpenMP threads, each calling single-threaded sgemm on one slab of the
//          output along its larger dimension, slab edges multiples of 16: what ztrain's CPU
//          backend does (src/backend/cpu/matmul.cpp, gemm_block). Built without
//          -fopenmp, or with --no-split, only the pool is timed.
// time_i is the median of --reps timed calls of the faster way for shape i (the faster
// median), so the ceiling bounds a trainer using either way.
// The GEMM rate is FLOP-weighted over the shapes: sum(flops_i * n_i) / sum(time_i * n_i). The attention products are assumed to run
// at that same rate (in practice they are smaller and slower). Everything that is not a
// GEMM (layernorm/RMSNorm, GELU/SwiGLU, RoPE, softmax, AdamW, cross-entropy) is counted as
// free, so the tokens/s figure is an upper bound for a trainer on this BLAS.
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
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace {

struct Shape {
    std::string name;
    bool ta;
    bool tb;
    int M, N, K;
    int count;  // occurrences per training step
    std::vector<double> secs;        // pool
    std::vector<double> secs_split;  // split
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
    bool split = true;
    int NH = 12, NKV = 0, F = 0;  // llama only: heads, key/value heads (0: NH), SwiGLU width
    std::string arch = "gpt2";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> int {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return std::atoi(argv[++i]);
        };
        if (a == "--arch") {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "--arch needs a value\n");
                return 2;
            }
            arch = argv[++i];
        } else if (a == "--no-split") split = false;
        else if (a == "--layers") L = next();
        else if (a == "--embd") C = next();
        else if (a == "--bt") BT = next();
        else if (a == "--seq") T = next();
        else if (a == "--heads") NH = next();
        else if (a == "--kv-heads") NKV = next();
        else if (a == "--ffn") F = next();
        else if (a == "--vocab-padded") Vp = next();
        else if (a == "--threads") threads = next();
        else if (a == "--reps") reps = next();
        else {
            std::fprintf(stderr, "usage: %s [--arch gpt2|llama] [--layers L] [--embd C] [--bt B*T] [--seq T] "
                                 "[--vocab-padded Vp] [--threads N] [--reps R] [--no-split]\n"
                                 "       llama: [--heads NH] [--kv-heads NKV] --ffn F\n", argv[0]);
            return 2;
        }
    }
    if (NKV == 0) NKV = NH;
    if (arch != "gpt2" && arch != "llama") {
        std::fprintf(stderr, "--arch: gpt2 or llama, not %s\n", arch.c_str());
        return 2;
    }
    if (arch == "llama" && (F < 1 || NH < 1 || C % NH != 0 || NH % NKV != 0)) {
        std::fprintf(stderr, "--arch llama needs --ffn F >= 1, --heads dividing --embd and --kv-heads "
                             "dividing --heads\n");
        return 2;
    }
#ifndef _OPENMP
    split = false;
#endif
    openblas_set_num_threads(threads);

    std::vector<Shape> shapes;
    struct Lin { const char* name; int in, out, count; };
    const int QKV = (NH + 2 * NKV) * (C / NH);  // llama's q|k|v width
    const std::vector<Lin> lins =
        arch == "llama" ? std::vector<Lin>{{"qkv", C, QKV, L}, {"o_proj", C, C, L}, {"gate_up", C, 2 * F, L},
                                           {"down", F, C, L}, {"lm_head", C, Vp, 1}}
                        : std::vector<Lin>{{"qkv", C, 3 * C, L}, {"attn_proj", C, C, L}, {"fc", C, 4 * C, L},
                                           {"mlp_proj", 4 * C, C, L}, {"lm_head", C, Vp, 1}};
    double n_mm = 0.0;  // weights of all the products (gpt2: 12 * L * C^2 + C * Vp)
    for (const Lin& l : lins) n_mm += 1.0 * l.in * l.out * l.count;
    for (const Lin& l : lins) {
        shapes.push_back({std::string(l.name) + ".fwd", false, true, BT, l.out, l.in, l.count, {}, {}});
        shapes.push_back({std::string(l.name) + ".dgrad", false, false, BT, l.in, l.out, l.count, {}, {}});
        shapes.push_back({std::string(l.name) + ".wgrad", true, false, l.out, l.in, BT, l.count, {}, {}});
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

    // Rows [m0, m1) x columns [n0, n1) of the output (the whole product by default).
    auto call = [&](const Shape& s, int m0 = 0, int m1 = -1, int n0 = 0, int n1 = -1) {
        if (m1 < 0) m1 = s.M;
        if (n1 < 0) n1 = s.N;
        if (m1 <= m0 || n1 <= n0) return;
        // Leading dimensions of the stored (untransposed) operands.
        const int lda = s.ta ? s.M : s.K;
        const int ldb = s.tb ? s.K : s.N;
        const float beta = s.name.find(".fwd") != std::string::npos ? 0.f : 1.f;
        const float* a = s.ta ? A.data() + m0 : A.data() + static_cast<size_t>(m0) * lda;
        const float* b = s.tb ? B.data() + static_cast<size_t>(n0) * ldb : B.data() + n0;
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                    s.tb ? CblasTrans : CblasNoTrans, m1 - m0, n1 - n0, s.K, 1.f, a, lda,
                    b, ldb, beta, Cm.data() + static_cast<size_t>(m0) * s.N + n0, s.N);
    };
    // One slab per OpenMP thread along the larger output dimension (ztrain's gemm_block).
    auto call_split = [&](const Shape& s) {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
        {
            const int part = omp_get_thread_num(), parts = omp_get_num_threads();
            const bool rows = s.M >= s.N;
            const int extent = rows ? s.M : s.N;
            const int chunk = ((extent + parts - 1) / parts + 15) / 16 * 16;
            const int lo = std::min(extent, part * chunk), hi = std::min(extent, lo + chunk);
            if (rows) call(s, lo, hi, 0, s.N);
            else call(s, 0, s.M, lo, hi);
        }
#else
        call(s);
#endif
    };
    auto timed = [](std::vector<double>& out, auto&& f) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        const auto t1 = std::chrono::steady_clock::now();
        out.push_back(std::chrono::duration<double>(t1 - t0).count());
    };

    for (const Shape& s : shapes) call(s);  // warm-up: page in buffers, start the pool
    if (split) {
        openblas_set_num_threads(1);
        for (const Shape& s : shapes) call_split(s);  // start the OpenMP team
    }
    // Rounds over all shapes (rather than all reps of one shape in a row) spread the
    // noise of a shared machine evenly across shapes and both ways.
    // After switching ways, the other way's idle threads still spin for a while (OpenBLAS's
    // pool after a call, libgomp's team after a region) on the cores the next calls need: the
    // first shapes timed after a switch ran far slower. A pause lets them go to sleep before
    // timing starts.
    auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
    for (int r = 0; r < reps; ++r) {
        openblas_set_num_threads(threads);
        settle();
        for (Shape& s : shapes) timed(s.secs, [&] { call(s); });
        if (split) {
            openblas_set_num_threads(1);
            settle();
            for (Shape& s : shapes) timed(s.secs_split, [&] { call_split(s); });
        }
    }

    std::printf("sgemm_ceiling: %s, OpenBLAS %d thread(s), L=%d C=%d B*T=%d T=%d Vp=%d", arch.c_str(), threads,
                L, C, BT, T, Vp);
    if (arch == "llama") std::printf(" NH=%d NKV=%d F=%d", NH, NKV, F);
    std::printf(", median of %d calls per shape and way%s\n", reps, split ? " (pool, split)" : " (pool)");
    std::printf("%-16s %6s %6s %6s %5s %10s %9s %10s %9s\n", "shape", "M", "N", "K", "x", "pool ms", "GFLOP/s",
                "split ms", "GFLOP/s");
    double tot_flops = 0.0, tot_secs = 0.0, pool_secs = 0.0, split_secs = 0.0;
    for (const Shape& s : shapes) {
        const double tp = median(s.secs);
        const double ts = split ? median(s.secs_split) : tp;
        std::printf("%-16s %6d %6d %6d %5d %10.3f %9.1f", s.name.c_str(), s.M, s.N, s.K, s.count, tp * 1e3,
                    s.flops() / tp * 1e-9);
        if (split) std::printf(" %10.3f %9.1f", ts * 1e3, s.flops() / ts * 1e-9);
        std::printf("\n");
        tot_flops += s.flops() * s.count;
        tot_secs += std::min(tp, ts) * s.count;
        pool_secs += tp * s.count;
        split_secs += ts * s.count;
    }
    const double rate = tot_flops / tot_secs;
    std::printf("FLOP-weighted rate: pool %.1f GFLOP/s", tot_flops / pool_secs * 1e-9);
    if (split) std::printf(", split %.1f GFLOP/s", tot_flops / split_secs * 1e-9);
    std::printf("\n");
    const double flops_tok = 6.0 * n_mm + 12.0 * L * T * C;
    const double ceiling = rate / flops_tok;
    std::printf("FLOP-weighted sgemm rate, faster way per shape: %.1f GFLOP/s (matmul FLOPs per step %.1f GFLOP, "
                "%.3f s)\n", rate * 1e-9, tot_flops * 1e-9, tot_secs);
    std::printf("flops/token = 6*N_mm + 12*L*T*C = 6*%.2fM + %.2fM = %.1f MFLOP\n", n_mm * 1e-6,
                12.0 * L * T * C * 1e-6, flops_tok * 1e-6);
    std::printf("tokens/s ceiling (GEMMs only, everything else free): %.1f\n", ceiling);
    std::printf("{\"arch\": \"%s\", \"threads\": %d, \"layers\": %d, \"embd\": %d, \"bt\": %d, \"seq\": %d, "
                "\"vocab_padded\": %d, \"gflops\": %.2f, \"gflops_pool\": %.2f, \"gflops_split\": %.2f, "
                "\"n_mm\": %.0f, \"flops_per_token\": %.0f, \"tokens_per_s_ceiling\": %.2f, \"openblas_core\": \"%s\"}\n",
                arch.c_str(), threads, L, C, BT, T, Vp, rate * 1e-9, tot_flops / pool_secs * 1e-9,
                split ? tot_flops / split_secs * 1e-9 : 0.0, n_mm, flops_tok, ceiling, openblas_get_corename());
    return 0;
}
