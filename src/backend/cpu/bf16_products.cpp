// bf16 matrix products on the CPU's bf16 instructions through oneDNN (cpu_bf16.hpp says when
// they are used), and the decision itself.
//
// What it implements
//  - Bf16Products::gemm: C (fp32) = or += bf16(op(A)) @ bf16(op(B)), accumulated in fp32 by
//    oneDNN's matmul. The fp32 operands are rounded to bf16 (to nearest even, as
//    zt::f32_to_bf16) into scratch first; in a bf16 run they already hold bf16 values (the
//    activations are rounded by the model's ops, the parameters are widened bf16), so the
//    rounding changes nothing and the product differs from sgemm's only by summation order.
//  - Transposes are strides in the memory descriptors, as sgemm's flags are: no copies.
//  - One oneDNN primitive per product shape (transposes, sizes, leading dimensions, and
//    whether it accumulates), made on first use and kept: choosing the kernels costs far more
//    than a small product.
//  - Threads: Debian's oneDNN uses the OpenMP runtime, so its team is the calling thread's
//    omp_get_max_threads(), which the CPU backend sets to its thread count: oneDNN follows
//    ztrain's thread setting without a call of its own.
//
// What it does not do
//  - No bf16 output buffers yet: results are fp32 and the model's ops round them as the
//    fp32-buffer emulation does (activation_rounding.hpp).
//  - No fp16 products (no AVX512-FP16 on the CPUs this targets).
#include "ops.hpp"
#include "cpu_common.hpp"

#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#if ZT_HAVE_ONEDNN_BUILD
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace zt {

#if ZT_HAVE_ONEDNN_BUILD
namespace {

const char* isa_name(dnnl::cpu_isa isa) {
    switch (isa) {
        case dnnl::cpu_isa::all: return "all";
        case dnnl::cpu_isa::sse41: return "sse41";
        case dnnl::cpu_isa::avx: return "avx";
        case dnnl::cpu_isa::avx2: return "avx2";
        case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
        case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
        case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
        case dnnl::cpu_isa::avx512_core: return "avx512_core";
        case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    }
    return "unknown";
}

bool isa_has_bf16(dnnl::cpu_isa isa) {
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace
#endif

CpuBf16Products decide_cpu_bf16_products(const char* setting) {
    const std::string mode = setting != nullptr ? setting : "auto";
    if (mode != "auto" && mode != "on" && mode != "off" && !mode.empty()) {
        throw InputError(str("environment variable ZT_CPU_BF16=", mode, ": expected auto, on or off"));
    }
    CpuBf16Products p;
#if ZT_HAVE_ONEDNN_BUILD
    const dnnl::version_t* v = dnnl::version();
    p.onednn_version = str(v->major, ".", v->minor, ".", v->patch);
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    p.isa = isa_name(isa);
    if (mode == "off") {
        p.fallback_reason = "ZT_CPU_BF16=off";
    } else if (!isa_has_bf16(isa)) {
        p.fallback_reason = str("the CPU has no bf16 instructions oneDNN uses (it dispatches to ", p.isa, ")");
    } else {
        p.native = true;
    }
#else
    p.fallback_reason = mode == "off" ? "ZT_CPU_BF16=off" : "this build has no oneDNN (libdnnl-dev)";
#endif
    if (mode == "on" && !p.native) {
        throw InputError(str("environment variable ZT_CPU_BF16=on, but bf16 products are impossible here: ",
                             p.fallback_reason));
    }
    return p;
}

const CpuBf16Products& cpu_bf16_products() {
    static const CpuBf16Products decided = decide_cpu_bf16_products(std::getenv("ZT_CPU_BF16"));
    return decided;
}

std::string cpu_bf16_products_report() {
#if ZT_HAVE_ONEDNN_BUILD
    CpuBf16Products p;
    try {
        p = cpu_bf16_products();
    } catch (const InputError& e) {
        return e.what();
    }
    return str("oneDNN ", p.onednn_version, ", dispatches to ", p.isa, "; bf16 products ",
               p.native ? "native" : str("in fp32 (", p.fallback_reason, ")"));
#else
    return "none (built without oneDNN: bf16 products in fp32)";
#endif
}

namespace cpu {

#if ZT_HAVE_ONEDNN_BUILD

namespace {

/// dst[i] = f32_to_bf16(src[i]) over [0, n), on the team when n is large.
ZT_VEC_CLONES
void to_bf16_kernel(uint16_t* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        dst[i] = f32_to_bf16(src[i]);
    }
}

void to_bf16(uint16_t* dst, const float* src, size_t n, int threads) {
    parallel_chunks(n, threads, [&](size_t b, size_t e) { to_bf16_kernel(dst + b, src + b, e - b); });
}

using dnnl::memory;

}  // namespace

struct Bf16Products::Impl {
    /// transposes, M, N, K, lda, ldb, ldc, accumulate: everything a primitive is made for.
    using Key = std::array<int, 9>;

    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    /// A primitive and the operand descriptors it was made for.
    struct Entry {
        dnnl::matmul matmul;
        memory::desc a;
        memory::desc b;
        memory::desc c;
    };
    std::map<Key, Entry> primitives;
    std::vector<uint16_t> a16;
    std::vector<uint16_t> b16;

    const Entry& primitive(const Bf16Gemm& g) {
        const Key key{g.trans_a, g.trans_b, g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.accumulate};
        auto it = primitives.find(key);
        if (it != primitives.end()) return it->second;
        // op(A) (M, K): A row-major (M, K) with ld lda, or transposed (K, M) read by strides.
        const memory::dims a_strides = g.trans_a ? memory::dims{1, g.lda} : memory::dims{g.lda, 1};
        const memory::dims b_strides = g.trans_b ? memory::dims{1, g.ldb} : memory::dims{g.ldb, 1};
        const memory::desc a_md({g.M, g.K}, memory::data_type::bf16, a_strides);
        const memory::desc b_md({g.K, g.N}, memory::data_type::bf16, b_strides);
        const memory::desc c_md({g.M, g.N}, memory::data_type::f32, memory::dims{g.ldc, 1});
        dnnl::primitive_attr attr;
        if (g.accumulate) {
            // C += product: the sum post-op adds the old C in fp32, as sgemm's beta = 1.
            dnnl::post_ops ops;
            ops.append_sum(1.f);
            attr.set_post_ops(ops);
        }
        const dnnl::matmul::desc desc(a_md, b_md, c_md);
        const dnnl::matmul::primitive_desc pd(desc, attr, engine);
        return primitives.emplace(key, Entry{dnnl::matmul(pd), a_md, b_md, c_md}).first->second;
    }
};

Bf16Products::Bf16Products(int threads) : m_threads(threads) {
    try {
        m_impl = std::make_unique<Impl>();
    } catch (const dnnl::error& e) {
        throw Error(str("oneDNN: cannot make a CPU engine: ", e.what()));
    }
}

Bf16Products::~Bf16Products() = default;

void Bf16Products::gemm(const Bf16Gemm& g) {
    if (g.M <= 0 || g.N <= 0) return;
    if (g.K <= 0) {
        // An empty product: C stays (accumulate) or becomes 0, as sgemm() treats it.
        if (!g.accumulate) {
            for (int m = 0; m < g.M; ++m) std::memset(g.C + static_cast<size_t>(m) * g.ldc, 0, g.N * sizeof(float));
        }
        return;
    }
    // The stored extents of A and B: rows x ld, whichever way they are read.
    const size_t a_numel = static_cast<size_t>(g.trans_a ? g.K : g.M) * g.lda;
    const size_t b_numel = static_cast<size_t>(g.trans_b ? g.N : g.K) * g.ldb;
    Impl& im = *m_impl;
    if (im.a16.size() < a_numel) im.a16.resize(a_numel);
    if (im.b16.size() < b_numel) im.b16.resize(b_numel);
    to_bf16(im.a16.data(), g.A, a_numel, m_threads);
    to_bf16(im.b16.data(), g.B, b_numel, m_threads);
    try {
        const Impl::Entry& e = im.primitive(g);
        memory a(e.a, im.engine, im.a16.data());
        memory b(e.b, im.engine, im.b16.data());
        memory c(e.c, im.engine, g.C);
        e.matmul.execute(im.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
        im.stream.wait();
    } catch (const dnnl::error& err) {
        throw Error(str("oneDNN bf16 product (M=", g.M, " N=", g.N, " K=", g.K, " trans_a=", g.trans_a,
                        " trans_b=", g.trans_b, "): ", err.what()));
    }
}

#else  // no oneDNN: never made (cpu_bf16_products().native is false)

struct Bf16Products::Impl {};
Bf16Products::Bf16Products(int threads) : m_threads(threads) {
    throw Error("bf16 products: this build has no oneDNN");
}
Bf16Products::~Bf16Products() = default;
void Bf16Products::gemm(const Bf16Gemm&) { throw Error("bf16 products: this build has no oneDNN"); }

#endif

}  // namespace cpu
}  // namespace zt
