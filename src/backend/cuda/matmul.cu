// Matrix products through cuBLASLt: fp32, bf16 or fp16 operands, always fp32 accumulate
// (CUBLAS_COMPUTE_32F: true fp32 for fp32 operands, no TF32), with the bias and GELU
// epilogues fused where asked (or, where cuBLASLt has no fused algorithm or the shape breaks
// its EPILOGUE_AUX_LD rule, a plain product then one bias/GELU kernel). Attention's
// strided-batched products use the same path.
//
// Alignment: cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise,
// and a kernel picked on that assumption reads wrongly from a less aligned pointer. Each
// call therefore states the real alignment of every operand (pointer, leading dimension
// and batch stride in bytes), which matters for attention's per-head views into qkv.
//
// Typed activations (the Backend's matmul with bf16/fp16 buffers, typed_matmul_*): the
// product runs with 16-bit A and B on the tensor cores, fp32 accumulate, and D either in
// the activation dtype (rounded once by cuBLASLt, after the bias and a residual as C were
// added in fp32) or fp32 (parameter gradients, fp32 outputs). An operand stored in another
// dtype than the product's is converted into scratch first (see product_dtype).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
    switch (t) {
        case DType::kF32: return CUDA_R_32F;
        case DType::kBF16: return CUDA_R_16BF;
        case DType::kF16: return CUDA_R_16F;
    }
    return CUDA_R_32F;
}

/// The largest power of two (<= 256) dividing the operand's address, ld and stride in bytes.
uint32_t alignment_of(const void* p, int64_t ld, int64_t stride, size_t elem) {
    const uint64_t v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) |
                       static_cast<uint64_t>(ld) * elem | static_cast<uint64_t>(stride) * elem | 256u;
    return static_cast<uint32_t>(v & (~v + 1));
}

/// Owns the cuBLASLt descriptors of one call (destroyed on every path, also on throw).
struct LtDescs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtDescs() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

void make_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int rows, int cols, int64_t ld,
                 int batch, int64_t stride) {
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows),
                                               static_cast<uint64_t>(cols), ld));
    if (batch > 1) {
        ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                         sizeof(batch)));
        ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &stride, sizeof(stride)));
    }
}

void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, uint32_t value) {
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

/// Plain cuBLAS for a product without epilogue that cuBLASLt has no algorithm for.
void gemm_classic(const Blas& blas, const Gemm& g, cudaStream_t stream) {
    ZT_REQUIRE(g.c == nullptr || g.c == g.d.ptr, "gemm: a separate C needs cuBLASLt (gemm_lt)");
    const cudaDataType_t t = cuda_type(g.dtype);
    const cudaDataType_t out_t = cuda_type(g.out_dtype);
    ZT_CUBLAS_CHECK(cublasSetStream(blas.classic, stream));
    ZT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas.classic, g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n,
        g.k, &g.alpha, g.a.ptr, t, static_cast<int>(g.a.ld), g.a.stride, g.b.ptr, t, static_cast<int>(g.b.ld),
        g.b.stride, &g.beta, g.d.ptr, out_t, static_cast<int>(g.d.ld), g.d.stride, g.batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
}

__device__ inline float load_float(const float* p) { return *p; }
__device__ inline float load_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline float load_float(const __half* p) { return __half2float(*p); }
__device__ inline void store_float(float* p, float v) { *p = v; }
__device__ inline void store_float(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ inline void store_float(__half* p, float v) { *p = __float2half(v); }

/// The fused epilogue's meaning over an already computed D (m, n, batch), in place:
/// x = D + bias (per row i); aux = x when wanted; D = gelu ? GELU(x) : x. The bias is
/// shared by the batch; aux has D's leading dimension and batch stride, as in the fused case.
/// (The products of one dtype, matmul_forward_ex: D was rounded by the product already.)
template <typename T>
__global__ void bias_gelu_kernel(T* d, T* aux, const T* bias, bool gelu, int m, int n, int batch, int64_t ld,
                                 int64_t stride) {
    const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t per_batch = static_cast<size_t>(m) * static_cast<size_t>(n);
    if (idx >= per_batch * static_cast<size_t>(batch)) return;
    const int64_t bt = static_cast<int64_t>(idx / per_batch);
    const size_t rest = idx % per_batch;
    const int64_t i = static_cast<int64_t>(rest % static_cast<size_t>(m));
    const int64_t j = static_cast<int64_t>(rest / static_cast<size_t>(m));
    const int64_t at = bt * stride + i + j * ld;
    float x = load_float(d + at);
    if (bias != nullptr) x += load_float(bias + i);
    if (aux != nullptr) store_float(aux + at, x);
    store_float(d + at, gelu ? gelu_value(x) : x);
}

template <typename T>
void launch_bias_gelu(const Gemm& g, cudaStream_t stream) {
    const size_t count = static_cast<size_t>(g.m) * static_cast<size_t>(g.n) * static_cast<size_t>(g.batch);
    bias_gelu_kernel<T><<<grid_for(count, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(g.d.ptr), static_cast<T*>(g.gelu_aux), static_cast<const T*>(g.bias), g.gelu, g.m, g.n,
        g.batch, g.d.ld, g.d.stride);
    ZT_KERNEL_CHECK("gemm bias/GELU epilogue");
}

/// The separate path: a plain product (cuBLASLt, or classic cuBLAS when it has none), then
/// the bias/GELU kernel over D.
void gemm_separate_epilogue(const Blas& blas, const Gemm& g, cudaStream_t stream) {
    ZT_REQUIRE(g.out_dtype == g.dtype && (g.bias == nullptr || g.bias_dtype == g.dtype),
               "gemm: the separate bias/GELU epilogue takes products of one dtype");
    Gemm plain = g;
    plain.bias = nullptr;
    plain.gelu = false;
    plain.gelu_aux = nullptr;
    gemm(blas, plain, stream);
    switch (g.dtype) {
        case DType::kF32: launch_bias_gelu<float>(g, stream); break;
        case DType::kBF16: launch_bias_gelu<__nv_bfloat16>(g, stream); break;
        case DType::kF16: launch_bias_gelu<__half>(g, stream); break;
    }
}

}  // namespace

bool gemm_lt(const Blas& blas, const Gemm& g, cudaStream_t stream) {
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return true;
    ZT_REQUIRE(g.k > 0, "gemm: empty inner dimension (k = ", g.k, ")");
    const cudaDataType_t t = cuda_type(g.dtype);
    const cudaDataType_t out_t = cuda_type(g.out_dtype);
    const size_t elem = dtype_size(g.dtype);
    const size_t out_elem = dtype_size(g.out_dtype);
    LtDescs ds;
    ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (g.gelu) {
        if (g.gelu_aux != nullptr) {
            epilogue = g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        } else {
            epilogue = g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        }
    } else if (g.bias != nullptr) {
        epilogue = CUBLASLT_EPILOGUE_BIAS;
    }
    ZT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (g.bias != nullptr) {
        ZT_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
        if (g.bias_dtype != g.out_dtype) {
            // An fp32 bias on a 16-bit D (the Backend's biases are fp32); the default is D's type.
            const int32_t bias_type = cuda_type(g.bias_dtype);
            ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                           sizeof(bias_type)));
        }
    }
    if (g.gelu_aux != nullptr) {
        ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                       &g.gelu_aux, sizeof(g.gelu_aux)));
        ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g.d.ld,
                                                       sizeof(g.d.ld)));
        if (g.batch > 1) {
            ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                                           &g.d.stride, sizeof(g.d.stride)));
        }
    }
    // Stored shapes: op(A) is (m, k), so A is (k, m) when transposed; likewise B.
    make_layout(&ds.a, t, g.a.trans ? g.k : g.m, g.a.trans ? g.m : g.k, g.a.ld, g.batch, g.a.stride);
    make_layout(&ds.b, t, g.b.trans ? g.n : g.k, g.b.trans ? g.k : g.n, g.b.ld, g.batch, g.b.stride);
    make_layout(&ds.d, out_t, g.m, g.n, g.d.ld, g.batch, g.d.stride);

    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&ds.pref));
    const uint64_t ws_bytes = blas.workspace_bytes;
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &ws_bytes, sizeof(ws_bytes)));
    const void* c = g.c != nullptr ? g.c : g.d.ptr;
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.a.ptr, g.a.ld, g.a.stride, elem));
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.b.ptr, g.b.ld, g.b.stride, elem));
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(c, g.d.ld, g.d.stride, out_elem));
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
             alignment_of(g.d.ptr, g.d.ld, g.d.stride, out_elem));

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    // "Not supported" (no heuristic for this configuration) is an answer, not a failure; so
    // is "invalid value" for the mixed configurations of the typed products (an fp32 bias or
    // D with 16-bit operands, a separate C) and for the fused epilogues, which every caller
    // has another way to compute.
    const bool mixed = g.out_dtype != g.dtype || (g.bias != nullptr && g.bias_dtype != g.out_dtype) ||
                       (g.c != nullptr && g.c != g.d.ptr);
    const bool fused = epilogue != CUBLASLT_EPILOGUE_DEFAULT;
    const cublasStatus_t heuristic_status =
        cublasLtMatmulAlgoGetHeuristic(blas.lt, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &result, &found);
    const bool no_algorithm = heuristic_status == CUBLAS_STATUS_NOT_SUPPORTED ||
                              ((mixed || fused) && heuristic_status == CUBLAS_STATUS_INVALID_VALUE);
    if (!no_algorithm) ZT_CUBLAS_CHECK(heuristic_status);
    if (no_algorithm || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;
    // C is D unless told otherwise: beta = 1 then accumulates in place. An algorithm the
    // heuristic offered may still refuse the call (a separate C, an fp32 bias on a 16-bit D):
    // that too leaves the product to the caller's other way, before anything was written.
    const cublasStatus_t cublaslt_matmul_status = cublasLtMatmul(blas.lt, ds.op, &g.alpha, g.a.ptr, ds.a, g.b.ptr, ds.b, &g.beta, c,
                                              ds.d, g.d.ptr, ds.d, &result.algo, blas.workspace,
                                              blas.workspace_bytes, stream);
    if (cublaslt_matmul_status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    ZT_CUBLAS_CHECK(cublaslt_matmul_status);
    return true;
}

void gemm(const Blas& blas, const Gemm& g, cudaStream_t stream) {
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return;
    ZT_REQUIRE(g.k > 0, "gemm: empty inner dimension (k = ", g.k, ")");
    const EpiloguePath path = epilogue_path(g);
    if (path == EpiloguePath::kSeparate) {
        gemm_separate_epilogue(blas, g, stream);
        return;
    }
    if (gemm_lt(blas, g, stream)) return;
    // No fused algorithm for this bias/GELU configuration: the same result in two steps.
    if (path == EpiloguePath::kFused) {
        gemm_separate_epilogue(blas, g, stream);
    } else {
        gemm_classic(blas, g, stream);
    }
}

void matmul_forward(const Blas& blas, void* out, const void* inp, const void* weight, const void* bias, int N,
                    int C, int OC, DType dtype, bool gelu, void* pre_gelu, cudaStream_t stream) {
    Gemm g = matmul_forward_gemm(out, inp, weight, N, C, OC);
    set_dtype(g, dtype);
    g.bias = bias;
    g.gelu = gelu;
    g.gelu_aux = pre_gelu;
    gemm(blas, g, stream);
}

void matmul_backward(const Blas& blas, void* dinp, void* dweight, const void* dout, const void* inp,
                     const void* weight, int N, int C, int OC, DType dtype, cudaStream_t stream) {
    if (dinp != nullptr) {
        Gemm g = matmul_dinp_gemm(dinp, dout, weight, N, C, OC);
        set_dtype(g, dtype);
        gemm(blas, g, stream);
    }
    if (dweight != nullptr) {
        Gemm g = matmul_dweight_gemm(dweight, dout, inp, N, C, OC);
        set_dtype(g, dtype);
        gemm(blas, g, stream);
    }
}

namespace {

/// The dtype a typed product multiplies in: that of the first 16-bit buffer of `dtypes`
/// (the output first, so D is always in it or fp32), fp32 when there is none.
DType product_dtype(std::initializer_list<DType> dtypes) {
    for (DType t : dtypes) {
        if (t != DType::kF32) return t;
    }
    return DType::kF32;
}

/// x (n elements) as the product reads it, in dtype p: x itself, or x converted into
/// `scratch` (rounded to nearest even: exact for an fp32 weight holding 16-bit values, the
/// fp32 view of a 16-bit run's weights; else what the CPU's bf16 products do with it).
const void* operand_in(ConstActPtr x, size_t n, DType p, Workspace& scratch, cudaStream_t stream) {
    if (x.dtype == p) return x.data;
    void* converted = scratch.get(std::max<size_t>(n, 1) * dtype_size(p), stream);
    cast(converted, p, x.data, x.dtype, n, stream);
    return converted;
}

/// out (N, OC) = round(product (fp32) + bias + residual), each row's bias per column. product
/// may be out's own memory (fp32 out): every element is read before it is written, by the
/// thread that writes it.
template <typename A>
__global__ void bias_residual_kernel(typename A::Dst out, const float* product, const float* bias,
                                     typename A::Src residual, bool has_residual, int N, int OC) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<size_t>(N) * OC) return;
    float x = product[i];
    if (bias != nullptr) x += bias[i % static_cast<size_t>(OC)];
    if (has_residual) x += residual[i];
    out.store(i, x);
}

}  // namespace

void typed_matmul_forward(const Blas& blas, ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                          ConstActPtr residual, int N, int C, int OC, MatmulScratch& scratch, cudaStream_t stream) {
    const size_t n_out = static_cast<size_t>(N) * static_cast<size_t>(OC);
    if (n_out == 0) return;
    const bool has_residual = residual.data != nullptr;
    const DType p = product_dtype({out.dtype, inp.dtype, weight.dtype});
    const void* w = operand_in(weight, static_cast<size_t>(OC) * C, p, scratch.weight, stream);
    const void* x = operand_in(inp, static_cast<size_t>(N) * C, p, scratch.inp, stream);
    // One cuBLASLt call where it has an algorithm: the bias epilogue and the residual as C
    // (beta 1) are added to the fp32 sum and D is rounded once.
    if (!has_residual || residual.dtype == out.dtype) {
        Gemm g = matmul_forward_gemm(out.data, x, w, N, C, OC);
        g.dtype = p;
        g.out_dtype = out.dtype;
        g.bias = bias;
        g.bias_dtype = DType::kF32;
        if (has_residual) {
            g.c = residual.data;
            g.beta = 1.f;
        }
        if (gemm_lt(blas, g, stream)) return;
    }
    // Otherwise an fp32 product (in out itself when out is fp32), then one kernel adds the
    // bias and the residual and rounds once: a 16-bit out is never rounded twice.
    float* product = out.f32() ? out.as_f32()
                               : static_cast<float*>(scratch.product.get(n_out * sizeof(float), stream));
    Gemm g = matmul_forward_gemm(product, x, w, N, C, OC);
    g.dtype = p;
    g.out_dtype = DType::kF32;
    gemm(blas, g, stream);
    with_access({out.dtype, residual.dtype}, [&](auto access) {
        using A = decltype(access);
        bias_residual_kernel<A><<<grid_for(n_out, kBlock), kBlock, 0, stream>>>(
            typename A::Dst(out), product, bias, typename A::Src(residual), has_residual, N, OC);
        ZT_KERNEL_CHECK("matmul bias/residual epilogue");
    });
}

void typed_matmul_backward(const Blas& blas, ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp,
                           ConstActPtr weight, int N, int C, int OC, MatmulScratch& scratch, cudaStream_t stream) {
    const size_t n_dout = static_cast<size_t>(N) * static_cast<size_t>(OC);
    if (dinp.data != nullptr) {
        // dinp += dout @ weight with C = D = dinp (beta 1): a 16-bit dinp is read, the sum
        // taken in fp32 and rounded once.
        const DType p = product_dtype({dinp.dtype, dout.dtype, weight.dtype});
        const void* dy = operand_in(dout, n_dout, p, scratch.dout, stream);
        const void* w = operand_in(weight, static_cast<size_t>(OC) * C, p, scratch.weight, stream);
        Gemm g = matmul_dinp_gemm(dinp.data, dy, w, N, C, OC);
        g.dtype = p;
        g.out_dtype = dinp.dtype;
        gemm(blas, g, stream);
    }
    if (dweight != nullptr) {
        // dweight (fp32) += dout^T @ inp.
        const DType p = product_dtype({dout.dtype, inp.dtype});
        const void* dy = operand_in(dout, n_dout, p, scratch.dout, stream);
        const void* x = operand_in(inp, static_cast<size_t>(N) * C, p, scratch.inp, stream);
        Gemm g = matmul_dweight_gemm(dweight, dy, x, N, C, OC);
        g.dtype = p;
        g.out_dtype = DType::kF32;
        gemm(blas, g, stream);
    }
}

}  // namespace zt::cuda
