// bf16 matrix products on the CPU's bf16 instructions through oneDNN (cpu_bf16.hpp says when
// they are used), and the decision itself.
//
// What it implements
//  - Bf16Products::gemm: C = or += alpha bf16(op(A)) @ bf16(op(B)) [+ bias] [+ add], accumulated
//    in fp32 by oneDNN's matmul, C stored fp32 or bf16 and rounded once. bf16 operands (the
//    typed activations of a bf16 run) are read as they are; fp32 ones are rounded to bf16
//    (to nearest even, as zt::f32_to_bf16) into scratch first. In a bf16 run those already
//    hold bf16 values (the parameters are widened bf16), so the rounding changes nothing.
//  - The bias and a residual (`add`) are the primitive's bias and a binary post-op, added
//    to the fp32 sum before C is rounded, as the fp32 forms followed by a rounding add them.
//  - Transposes are strides in the memory descriptors, as sgemm's flags are: no copies.
//  - One oneDNN primitive per product shape (transposes, sizes, leading dimensions, dtypes,
//    bias, accumulate, alpha), made on first use and kept with its memory objects: choosing
//    the kernels costs far more than a small product. Each object has its own scratchpad
//    (user mode), so objects on different threads run at once (attention, one per thread).
//  - Threads: Debian's oneDNN uses the OpenMP runtime, so its team is the calling thread's
//    omp_get_max_threads(), which the CPU backend sets to its thread count: oneDNN follows
//    ztrain's thread setting without a call of its own.
//
// What it does not do
//  - No fp16 products (no AVX512-FP16 on the CPUs this targets): fp16 storage takes the
//    widened fp32 products (matmul.cpp).
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
#include <unordered_map>
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
ZT_MAP_CLONES
void to_bf16_kernel(uint16_t* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        dst[i] = f32_to_bf16(src[i]);
    }
}

void to_bf16(uint16_t* dst, const float* src, size_t n, int threads) {
    parallel_chunks(n, threads, [&](size_t b, size_t e) { to_bf16_kernel(dst + b, src + b, e - b); });
}

using dnnl::memory;

memory::data_type onednn_type(DType t) {
    return t == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
}

}  // namespace

struct Bf16Products::Impl {
    /// Everything a primitive is made for: transposes, sizes, leading dimensions, whether it
    /// accumulates, the dtypes of C and of the added operand (-1: none), whether it has a
    /// bias, alpha's bits.
    using Key = std::array<int, 13>;

    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    /// A primitive and its arguments, kept with it: a product only points them at its
    /// buffers (set_data_handle), since making memory objects per call costs about as much
    /// as a small attention product.
    struct Entry {
        dnnl::matmul matmul;
        std::unordered_map<int, memory> args;
    };
    std::map<Key, Entry> primitives;
    std::vector<uint16_t> a16;
    std::vector<uint16_t> b16;
    /// The primitives' scratchpad (user mode): this object's own, so objects used on
    /// different threads at once share nothing.
    std::vector<uint8_t> scratchpad;

    Entry& primitive(const Bf16Gemm& g) {
        const bool add = g.add.data != nullptr;
        int alpha_bits = 0;
        std::memcpy(&alpha_bits, &g.alpha, sizeof(alpha_bits));
        const Key key{g.trans_a, g.trans_b, g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.accumulate,
                      static_cast<int>(g.C.dtype), add ? static_cast<int>(g.add.dtype) : -1, g.bias != nullptr,
                      alpha_bits};
        auto it = primitives.find(key);
        if (it != primitives.end()) return it->second;
        // op(A) (M, K): A row-major (M, K) with ld lda, or transposed (K, M) read by strides.
        const memory::dims a_strides = g.trans_a ? memory::dims{1, g.lda} : memory::dims{g.lda, 1};
        const memory::dims b_strides = g.trans_b ? memory::dims{1, g.ldb} : memory::dims{g.ldb, 1};
        const memory::desc a_md({g.M, g.K}, memory::data_type::bf16, a_strides);
        const memory::desc b_md({g.K, g.N}, memory::data_type::bf16, b_strides);
        const memory::desc c_md({g.M, g.N}, onednn_type(g.C.dtype), memory::dims{g.ldc, 1});
        const memory::desc bias_md = g.bias != nullptr
                                         ? memory::desc({1, g.N}, memory::data_type::f32, memory::dims{g.N, 1})
                                         : memory::desc();
        const memory::desc add_md =
            add ? memory::desc({g.M, g.N}, onednn_type(g.add.dtype), memory::dims{g.ldc, 1}) : memory::desc();
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        // alpha scales the product before the post-ops, as sgemm's alpha (the old C is not
        // scaled).
        if (g.alpha != 1.f) attr.set_output_scales(0, {g.alpha});
        dnnl::post_ops ops;
        if (g.accumulate) {
            // C += product: the sum post-op adds the old C in fp32, as sgemm's beta = 1.
            ops.append_sum(1.f);
        }
        if (add) ops.append_binary(dnnl::algorithm::binary_add, add_md);
        if (g.accumulate || add) attr.set_post_ops(ops);
        const dnnl::matmul::desc desc = g.bias != nullptr ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md)
                                                         : dnnl::matmul::desc(a_md, b_md, c_md);
        const dnnl::matmul::primitive_desc pd(desc, attr, engine);
        const size_t pad = pd.scratchpad_desc().get_size();
        if (scratchpad.size() < pad) scratchpad.resize(pad);
        Entry e{dnnl::matmul(pd), {}};
        e.args.emplace(DNNL_ARG_SRC, memory(a_md, engine, nullptr));
        e.args.emplace(DNNL_ARG_WEIGHTS, memory(b_md, engine, nullptr));
        e.args.emplace(DNNL_ARG_DST, memory(c_md, engine, nullptr));
        e.args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), engine, nullptr));
        if (g.bias != nullptr) e.args.emplace(DNNL_ARG_BIAS, memory(bias_md, engine, nullptr));
        // The binary post-op's index: after the sum post-op when there is one.
        if (add) e.args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(g.accumulate ? 1 : 0) | DNNL_ARG_SRC_1,
                                memory(add_md, engine, nullptr));
        return primitives.emplace(key, std::move(e)).first->second;
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

namespace {

/// An operand as oneDNN reads it: bf16 storage as it is, fp32 rounded to bf16 into scratch.
const void* bf16_operand(ConstActPtr x, size_t numel, std::vector<uint16_t>& scratch, int threads) {
    if (x.dtype == DType::kBF16) return x.data;
    ZT_REQUIRE(x.f32(), "bf16 products: a ", dtype_name(x.dtype), " operand (fp32 or bf16 expected)");
    if (scratch.size() < numel) scratch.resize(numel);
    to_bf16(scratch.data(), x.as_f32(), numel, threads);
    return scratch.data();
}

}  // namespace

void Bf16Products::gemm(const Bf16Gemm& g) {
    if (g.M <= 0 || g.N <= 0) return;
    ZT_REQUIRE(g.C.f32() || g.C.dtype == DType::kBF16, "bf16 products: a ", dtype_name(g.C.dtype), " output");
    if (g.K <= 0) {
        // An empty product: C stays (accumulate) or becomes bias + add, rounded once, as
        // the sgemm forms treat it.
        if (g.accumulate) return;
        std::vector<float> row(static_cast<size_t>(g.N));
        std::vector<float> add(row.size(), 0.f);
        for (int m = 0; m < g.M; ++m) {
            const size_t at = static_cast<size_t>(m) * static_cast<size_t>(g.ldc);
            if (g.add.data != nullptr) widen(g.add, at, add.size(), add.data());
            for (int n = 0; n < g.N; ++n) row[n] = (g.bias != nullptr ? g.bias[n] : 0.f) + add[n];
            narrow(row.data(), g.C, at, row.size());
        }
        return;
    }
    // The stored extents of A and B: rows x ld, whichever way they are read.
    const size_t a_numel = static_cast<size_t>(g.trans_a ? g.K : g.M) * g.lda;
    const size_t b_numel = static_cast<size_t>(g.trans_b ? g.N : g.K) * g.ldb;
    Impl& im = *m_impl;
    const void* a16 = bf16_operand(g.A, a_numel, im.a16, m_threads);
    const void* b16 = bf16_operand(g.B, b_numel, im.b16, m_threads);
    try {
        Impl::Entry& e = im.primitive(g);
        // The scratchpad may have grown (and moved) since this entry was made.
        e.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(im.scratchpad.data());
        e.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(a16));
        e.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(b16));
        e.args.at(DNNL_ARG_DST).set_data_handle(g.C.data);
        if (g.bias != nullptr) e.args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<float*>(g.bias));
        if (g.add.data != nullptr) {
            e.args.at(DNNL_ARG_ATTR_MULTIPLE_POST_OP(g.accumulate ? 1 : 0) | DNNL_ARG_SRC_1)
                .set_data_handle(const_cast<void*>(g.add.data));
        }
        e.matmul.execute(im.stream, e.args);
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
