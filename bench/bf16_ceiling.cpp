// bf16_ceiling: the oneDNN bf16 GEMM rate at the matrix shapes of GPT-2 or Llama training,
// and the tokens/s a bf16 trainer could reach doing nothing but those GEMMs at that rate:
// sgemm_ceiling.cpp's figure for the products a bf16 run of ztrain makes on the CPU's bf16
// instructions (src/backend/cpu/bf16_products.cpp).
//
// Build:  g++ -O2 -fopenmp bf16_ceiling.cpp -ldnnl
// Run:    ./a.out with sgemm_ceiling's arguments: [--arch gpt2|llama] [--layers L] [--embd C]
//         [--bt B*T] [--seq T] [--vocab-padded Vp] [--threads N] [--reps R]
//         llama: [--heads NH] [--kv-heads NKV] --ffn F
//
// Shapes and the FLOP formula are sgemm_ceiling.cpp's (forward, dgrad, wgrad of each linear,
// x n_layer, and the LM head). Each product: bf16 inputs already in bf16 (the conversion
// ztrain still does from its fp32 buffers is not counted: this is the products' ceiling),
// fp32 output, accumulating (dgrad, wgrad) as the backward does; oneDNN's matmul with the
// same strides ztrain passes, primitive made once per shape, OpenMP team of --threads.
// time_i = the median of --reps calls; rate = sum(flops_i * n_i) / sum(time_i * n_i).
// --reduction-slice S (0: off): an input gradient (dgrad) whose reduction is 2 S long or
// longer (the LM head's) runs as ztrain's CPU backend runs it, slices of S accumulated into C
// (cpu/matmul.cpp); its row is then named .dgrad/S.
// The last line of stdout is a JSON object (gflops, tokens_per_s_ceiling, isa).
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Shape {
    std::string name;
    bool ta, tb;
    int M, N, K;
    int count;
    bool accumulate;
    std::vector<double> secs;
    int slice = 0;  ///< > 0: the reduction (K) in slices of this many
    double flops() const { return 2.0 * M * N * K; }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* isa_name(dnnl::cpu_isa isa) {
    switch (isa) {
        case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
        case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core: return "avx512_core";
        case dnnl::cpu_isa::avx2: return "avx2";
        default: return "other";
    }
}

}  // namespace

int main(int argc, char** argv) {
    int L = 12, C = 768, BT = 256, T = 64, Vp = 50304, threads = 2, reps = 5, NH = 12, NKV = 0, F = 0, slice = 0;
    std::string arch = "gpt2";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "%s needs a value\n", a.c_str());
            return 2;
        }
        const char* v = argv[++i];
        if (a == "--arch") arch = v;
        else if (a == "--layers") L = std::atoi(v);
        else if (a == "--embd") C = std::atoi(v);
        else if (a == "--bt") BT = std::atoi(v);
        else if (a == "--seq") T = std::atoi(v);
        else if (a == "--heads") NH = std::atoi(v);
        else if (a == "--kv-heads") NKV = std::atoi(v);
        else if (a == "--ffn") F = std::atoi(v);
        else if (a == "--vocab-padded") Vp = std::atoi(v);
        else if (a == "--threads") threads = std::atoi(v);
        else if (a == "--reps") reps = std::atoi(v);
        else if (a == "--reduction-slice") slice = std::atoi(v);
        else {
            std::fprintf(stderr, "bf16_ceiling: unknown argument %s (sgemm_ceiling's arguments, no --no-split)\n",
                         a.c_str());
            return 2;
        }
    }
    if (NKV == 0) NKV = NH;
    if ((arch != "gpt2" && arch != "llama") || (arch == "llama" && (F < 1 || C % NH != 0 || NH % NKV != 0))) {
        std::fprintf(stderr, "bf16_ceiling: --arch gpt2, or llama with --ffn F, --heads dividing --embd and "
                             "--kv-heads dividing --heads\n");
        return 2;
    }
    omp_set_num_threads(threads);
    struct Lin { const char* name; int in, out, count; };
    const int QKV = (NH + 2 * NKV) * (C / NH);
    const std::vector<Lin> lins =
        arch == "llama" ? std::vector<Lin>{{"qkv", C, QKV, L}, {"o_proj", C, C, L}, {"gate_up", C, 2 * F, L},
                                           {"down", F, C, L}, {"lm_head", C, Vp, 1}}
                        : std::vector<Lin>{{"qkv", C, 3 * C, L}, {"attn_proj", C, C, L}, {"fc", C, 4 * C, L},
                                           {"mlp_proj", 4 * C, C, L}, {"lm_head", C, Vp, 1}};
    double n_mm = 0.0;
    std::vector<Shape> shapes;
    for (const Lin& l : lins) {
        n_mm += 1.0 * l.in * l.out * l.count;
        shapes.push_back({std::string(l.name) + ".fwd", false, true, BT, l.out, l.in, l.count, false, {}});
        const bool sliced = slice > 0 && l.out >= 2 * slice;
        shapes.push_back({std::string(l.name) + ".dgrad" + (sliced ? "/" + std::to_string(slice) : ""), false, false,
                          BT, l.in, l.out, l.count, true, {}, sliced ? slice : 0});
        shapes.push_back({std::string(l.name) + ".wgrad", true, false, l.out, l.in, BT, l.count, true, {}});
    }
    size_t maxA = 0, maxB = 0, maxC = 0;
    for (const Shape& s : shapes) {
        maxA = std::max(maxA, static_cast<size_t>(s.M) * s.K);
        maxB = std::max(maxB, static_cast<size_t>(s.K) * s.N);
        maxC = std::max(maxC, static_cast<size_t>(s.M) * s.N);
    }
    std::vector<uint16_t> A(maxA, 0x3c00), B(maxB, 0x3c00);  // bf16 0.0078125
    std::vector<float> Cm(maxC, 0.f);

    using dnnl::memory;
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    struct Prim { dnnl::matmul mm; memory::desc a, b, c; };
    // Row-major with the stored leading dimensions ztrain uses: A (M, K) or (K, M), B (K, N) or
    // (N, K); a slice of k of a reduction K long keeps A's leading dimension K.
    auto make = [&](const Shape& s, int k) {
        const memory::desc a({s.M, k}, memory::data_type::bf16, s.ta ? memory::dims{1, s.M} : memory::dims{s.K, 1});
        const memory::desc b({k, s.N}, memory::data_type::bf16, s.tb ? memory::dims{1, s.K} : memory::dims{s.N, 1});
        const memory::desc c({s.M, s.N}, memory::data_type::f32, memory::dims{s.N, 1});
        dnnl::primitive_attr attr;
        if (s.accumulate) {
            dnnl::post_ops ops;
            ops.append_sum(1.f);
            attr.set_post_ops(ops);
        }
        return Prim{dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine)), a, b, c};
    };
    std::vector<std::vector<Prim>> prims;  // per shape: one, or a slice's and the ragged last slice's
    for (const Shape& s : shapes) {
        std::vector<Prim> p{make(s, s.slice > 0 ? s.slice : s.K)};
        if (s.slice > 0 && s.K % s.slice != 0) p.push_back(make(s, s.K % s.slice));
        prims.push_back(std::move(p));
    }
    auto call = [&](size_t i) {
        const Shape& s = shapes[i];
        const int step = s.slice > 0 ? s.slice : s.K;
        for (int k0 = 0; k0 < s.K; k0 += step) {
            const Prim& p = prims[i][k0 + step <= s.K ? 0 : 1];
            memory a(p.a, engine, A.data() + k0), b(p.b, engine, B.data() + static_cast<size_t>(k0) * s.N),
                c(p.c, engine, Cm.data());
            p.mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
        }
        stream.wait();
    };
    for (size_t i = 0; i < shapes.size(); ++i) call(i);  // warm-up
    for (int r = 0; r < reps; ++r) {
        for (size_t i = 0; i < shapes.size(); ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            call(i);
            shapes[i].secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    }
    const char* isa = isa_name(dnnl::get_effective_cpu_isa());
    std::printf("bf16_ceiling: %s, oneDNN on %s, %d thread(s), L=%d C=%d B*T=%d T=%d Vp=%d, median of %d calls\n",
                arch.c_str(), isa, threads, L, C, BT, T, Vp, reps);
    std::printf("%-16s %6s %6s %6s %5s %10s %9s\n", "shape", "M", "N", "K", "x", "ms", "GFLOP/s");
    double tot_flops = 0.0, tot_secs = 0.0;
    for (const Shape& s : shapes) {
        const double t = median(s.secs);
        std::printf("%-16s %6d %6d %6d %5d %10.3f %9.1f\n", s.name.c_str(), s.M, s.N, s.K, s.count, t * 1e3,
                    s.flops() / t * 1e-9);
        tot_flops += s.flops() * s.count;
        tot_secs += t * s.count;
    }
    const double rate = tot_flops / tot_secs;
    const double flops_tok = 6.0 * n_mm + 12.0 * L * T * C;
    std::printf("FLOP-weighted bf16 rate %.1f GFLOP/s; tokens/s ceiling (GEMMs only) %.1f\n", rate * 1e-9,
                rate / flops_tok);
    std::printf("{\"arch\": \"%s\", \"threads\": %d, \"gflops\": %.2f, \"n_mm\": %.0f, \"flops_per_token\": %.0f, "
                "\"tokens_per_s_ceiling\": %.2f, \"isa\": \"%s\"}\n",
                arch.c_str(), threads, rate * 1e-9, n_mm, flops_tok, rate / flops_tok, isa);
    return 0;
}
