// Causal grouped-query attention (GPT-2's multi-head attention is NKV = NH), llm.c's
// unfused form: cuBLASLt strided-batched products plus a causal softmax kernel. Correctness
// first: att (B, NH, T, T) is materialized because the interface saves it for backward (a
// flash-style kernel is the follow-up).
//
// The six products and their layout are in gemm_plan.hpp (unit-tested on the host). The
// full T x T scores are computed and the softmax zeroes the part above the diagonal, so
// the P.V products need no masking.
//
// Segmented (packed examples, block-diagonal causal, a sliding window): the same products on
// bands, one per block of kAttentionBandRows queries, from the first key any of them attends
// to up to the block's last query (score_bands): a window of w costs O(T (w + block)), as the
// CPU's kernel, not O(T^2). The softmax zeroes the band's keys outside each query's
// [attend_from, t], so a band holds zeros there; scores outside every band are neither
// written nor read. The backward reads att only in [attend_from, t] (the CPU's att is
// unspecified before the key blocks it skips), and a zero probability gives zero dV, dS, dQ
// and dK terms. The bands' products are small for short windows; a flash-style kernel would
// keep them on chip.
//
// Typed buffers (bf16/fp16 qkv, out, att, dout, dqkv): one batch element at a time, its
// 16-bit rows are widened into fp32 scratch, the fp32 products and kernels above run on
// them, and what they wrote is rounded once into the typed buffers: the CPU twin's
// arithmetic (fp32 products of widened heads, the fp32 probabilities multiplying V, dq/dk/dv
// accumulated over the whole group in fp32 before one rounding). The backward reads a 16-bit
// att directly (its causal copy is fp32 already). The products run in fp32, not on 16-bit
// tensor cores: exactness first, a fused 16-bit kernel is the flash-attention follow-up.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

#include <algorithm>
#include <cmath>

namespace zt::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarpSize;

/// The score columns [lo, hi) the kernels write in query t's row: the whole row (plain
/// causal: band_from null) or its band, from band_from[t] to its block's last query.
__device__ inline int2 band_columns(int t, int T, const int32_t* band_from) {
    if (band_from == nullptr) return make_int2(0, T);
    return make_int2(band_from[t], min(T, (t / kAttentionBandRows + 1) * kAttentionBandRows));
}

/// In place on each score row (b, h, t): softmax over [from, t], zeros in the rest of its
/// columns (band_columns), where from = attend_from[b * T + t] ((B, T) device memory, as
/// band_from), or 0 without attend_from (plain causal). One warp a row.
__global__ void causal_softmax_kernel(float* att, int rows, int T, int NH, const int32_t* attend_from,
                                      const int32_t* band_from) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) return;
    const int t = row % T;
    const int len = t + 1;
    // row = (b * NH + h) * T + t
    const size_t bt = static_cast<size_t>(row / (NH * T)) * T + t;
    const int from = attend_from == nullptr ? 0 : attend_from[bt];
    const int2 cols = band_columns(t, T, band_from == nullptr ? nullptr : band_from + (bt - t));
    float* p = att + static_cast<size_t>(row) * T;
    float maxv = -INFINITY;
    for (int i = from + lane; i < len; i += kWarpSize) maxv = fmaxf(maxv, p[i]);
    maxv = warp_max(maxv);
    float sum = 0.f;
    for (int i = from + lane; i < len; i += kWarpSize) {
        const float e = expf(p[i] - maxv);
        p[i] = e;
        sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (int i = cols.x + lane; i < cols.y; i += kWarpSize) p[i] = i >= from && i < len ? p[i] * inv : 0.f;
}

/// Per row (h, t) of one batch element: pc = the copy of P over keys [from, t] (att outside is
/// unspecified, so it is never trusted), ds = P * (dP - sum_j P_j dP_j) in place on dP, zeros
/// in the rest of the row's columns (band_columns); from = attend_from[t] ((T) device memory,
/// as band_from), or 0 without it (plain causal).
template <typename A>
__global__ void softmax_backward_kernel(float* ds, float* pc, typename A::Src att, int rows, int T,
                                        const int32_t* attend_from, const int32_t* band_from) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) return;
    const int t = row % T;
    const int len = t + 1;
    const int from = attend_from == nullptr ? 0 : attend_from[t];
    const int2 cols = band_columns(t, T, band_from);
    const size_t off = static_cast<size_t>(row) * T;
    float dot = 0.f;
    for (int i = from + lane; i < len; i += kWarpSize) dot += att[off + i] * ds[off + i];
    dot = warp_sum(dot);
    for (int i = cols.x + lane; i < cols.y; i += kWarpSize) {
        const float p = i >= from && i < len ? att[off + i] : 0.f;
        pc[off + i] = p;
        ds[off + i] = p * (ds[off + i] - dot);
    }
}

/// Batch element b's bands: the segments' (score_bands), or the whole square (plain causal).
const std::vector<ScoreBand>& bands_of(const AttentionSegments* seg, int b, const std::vector<ScoreBand>& whole) {
    return seg != nullptr ? seg->bands[static_cast<size_t>(b)] : whole;
}
/// A (B, T) device array of the segments from batch element b on (null: plain causal).
const int32_t* rows_from(const int32_t* rows, int b, int T) {
    return rows != nullptr ? rows + static_cast<size_t>(b) * static_cast<size_t>(T) : nullptr;
}

/// The forward of batch elements [b0, b0 + nb) on fp32 buffers (pointers at b0), plain
/// causal (seg null) or segmented.
void forward_f32(const Blas& blas, float* out, float* att, const float* qkv, const AttentionSegments* seg, int b0,
                 int nb, const AttentionDims& d, cudaStream_t stream) {
    const int T = d.T;
    const size_t qkv_b = static_cast<size_t>(T) * d.W;
    const size_t att_b = static_cast<size_t>(d.NH) * d.tt;
    const size_t out_b = static_cast<size_t>(T) * d.O;
    const std::vector<ScoreBand> whole{whole_scores(d)};
    for (int b = 0; b < nb; ++b) {
        for (const ScoreBand& band : bands_of(seg, b0 + b, whole)) {
            for (int g = 0; g < d.G; ++g) {
                gemm(blas, attention_scores_gemm(d, att + b * att_b, qkv + b * qkv_b, g, band), stream);
            }
        }
    }
    const int rows = nb * d.NH * T;
    causal_softmax_kernel<<<grid_for(static_cast<size_t>(rows), kRowsPerBlock), kBlock, 0, stream>>>(
        att, rows, T, d.NH, rows_from(seg != nullptr ? seg->attend_from : nullptr, b0, T),
        rows_from(seg != nullptr ? seg->band_from : nullptr, b0, T));
    ZT_KERNEL_CHECK("causal_softmax");
    for (int b = 0; b < nb; ++b) {
        for (const ScoreBand& band : bands_of(seg, b0 + b, whole)) {
            for (int g = 0; g < d.G; ++g) {
                gemm(blas, attention_out_gemm(d, out + b * out_b, att + b * att_b, qkv + b * qkv_b, g, band), stream);
            }
        }
    }
}

/// x (n elements) as fp32: x itself, or widened into `scratch`.
float* widened(ConstActPtr x, size_t n, Workspace& scratch, cudaStream_t stream) {
    if (x.f32()) return const_cast<float*>(x.as_f32());
    auto* wide = static_cast<float*>(scratch.get(std::max<size_t>(n, 1) * sizeof(float), stream));
    cast(wide, DType::kF32, x.data, x.dtype, n, stream);
    return wide;
}
/// fp32 scratch for a result of n elements that goes to x: x itself when fp32.
float* result_buffer(ActPtr x, size_t n, Workspace& scratch, cudaStream_t stream) {
    if (x.f32()) return x.as_f32();
    return static_cast<float*>(scratch.get(std::max<size_t>(n, 1) * sizeof(float), stream));
}
/// x = wide rounded once (nothing when x is fp32: wide is x).
void store_result(ActPtr x, const float* wide, size_t n, cudaStream_t stream) {
    if (!x.f32()) cast(x.data, x.dtype, wide, DType::kF32, n, stream);
}

/// The forward with any typed buffer: one batch element at a time through fp32 scratch.
void forward_typed(const Blas& blas, ActPtr out, ActPtr att, ConstActPtr qkv, const AttentionSegments* seg, int B,
                   const AttentionDims& d, AttentionScratch& scratch, cudaStream_t stream) {
    const size_t qkv_b = static_cast<size_t>(d.T) * d.W;
    const size_t att_b = static_cast<size_t>(d.NH) * d.tt;
    const size_t out_b = static_cast<size_t>(d.T) * d.O;
    for (int b = 0; b < B; ++b) {
        const size_t bs = static_cast<size_t>(b);
        const float* q = widened(qkv.offset(bs * qkv_b), qkv_b, scratch.qkv, stream);
        const ActPtr att_here = att.offset(bs * att_b);
        const ActPtr out_here = out.offset(bs * out_b);
        float* p = result_buffer(att_here, att_b, scratch.scores, stream);
        float* o = result_buffer(out_here, out_b, scratch.out, stream);
        forward_f32(blas, o, p, q, seg, b, 1, d, stream);
        store_result(att_here, p, att_b, stream);
        store_result(out_here, o, out_b, stream);
    }
}

/// The forward, plain causal (seg null) or segmented.
void attention_forward(const Blas& blas, ActPtr out, ActPtr att, ConstActPtr qkv, const AttentionSegments* seg, int B,
                       int T, int NH, int NKV, int hs, AttentionScratch& scratch, cudaStream_t stream) {
    const AttentionDims d = gqa_attention_dims(T, NH, NKV, hs);
    if (B <= 0 || T <= 0) return;
    if (all_f32({out.dtype, att.dtype, qkv.dtype})) {
        forward_f32(blas, out.as_f32(), att.as_f32(), qkv.as_f32(), seg, 0, B, d, stream);
    } else {
        forward_typed(blas, out, att, qkv, seg, B, d, scratch, stream);
    }
}

/// One batch element's backward on fp32 q/k/v, dout and dq/dk/dv (att_b in any dtype);
/// pc and ds: the NH heads' causal copy of P and dP -> dS, over its bands; from and
/// band_from: its attend_from and band starts (T), or null (plain causal, one whole band).
void backward_one_f32(const Blas& blas, float* dq, float* pc, float* ds, const float* dout_b, const float* q,
                      ConstActPtr att_b, const int32_t* from, const int32_t* band_from,
                      const std::vector<ScoreBand>& bands, const AttentionDims& d, cudaStream_t stream) {
    for (const ScoreBand& band : bands) {
        for (int g = 0; g < d.G; ++g) gemm(blas, attention_dp_gemm(d, ds, dout_b, q, g, band), stream);
    }
    const int rows = d.NH * d.T;
    with_access({att_b.dtype}, [&](auto access) {
        using A = decltype(access);
        softmax_backward_kernel<A><<<grid_for(static_cast<size_t>(rows), kRowsPerBlock), kBlock, 0, stream>>>(
            ds, pc, typename A::Src(att_b), rows, d.T, from, band_from);
        ZT_KERNEL_CHECK("softmax_backward");
    });
    // The G group positions (and the bands, whose keys overlap) accumulate into the same dk
    // and dv one after the other (one stream, beta 1): a fixed order, no atomics.
    for (const ScoreBand& band : bands) {
        for (int g = 0; g < d.G; ++g) {
            gemm(blas, attention_dv_gemm(d, dq, dout_b, pc, g, band), stream);
            gemm(blas, attention_dq_gemm(d, dq, q, ds, g, band), stream);
            gemm(blas, attention_dk_gemm(d, dq, q, ds, g, band), stream);
        }
    }
}

}  // namespace

void gqa_attention_forward(const Blas& blas, ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                           int hs, AttentionScratch& scratch, cudaStream_t stream) {
    attention_forward(blas, out, att, qkv, nullptr, B, T, NH, NKV, hs, scratch, stream);
}

AttentionSegments attention_segments(const int32_t* attend_from, int B, int T, Workspace& from_ws,
                                     Workspace& band_ws, std::vector<int32_t>& band_host, cudaStream_t stream) {
    AttentionSegments seg;
    const size_t n = static_cast<size_t>(std::max(B, 0)) * static_cast<size_t>(std::max(T, 0));
    band_host.assign(n, 0);
    for (int b = 0; b < B; ++b) {
        const size_t row = static_cast<size_t>(b) * static_cast<size_t>(T);
        seg.bands.push_back(score_bands(attend_from + row, T, kAttentionBandRows));
        for (const ScoreBand& band : seg.bands.back()) {
            for (int t = band.q0; t < band.q1; ++t) band_host[row + static_cast<size_t>(t)] = band.k0;
        }
    }
    auto* from = static_cast<int32_t*>(from_ws.get(std::max<size_t>(n, 1) * sizeof(int32_t), stream));
    auto* band = static_cast<int32_t*>(band_ws.get(std::max<size_t>(n, 1) * sizeof(int32_t), stream));
    if (n > 0) {
        ZT_CUDA_CHECK(cudaMemcpyAsync(from, attend_from, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
        ZT_CUDA_CHECK(cudaMemcpyAsync(band, band_host.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    }
    seg.attend_from = from;
    seg.band_from = band;
    return seg;
}

void gqa_attention_forward_segmented(const Blas& blas, ActPtr out, ActPtr att, ConstActPtr qkv,
                                     const AttentionSegments& segments, int B, int T, int NH, int NKV, int hs,
                                     AttentionScratch& scratch, cudaStream_t stream) {
    ZT_REQUIRE(segments.attend_from != nullptr && segments.bands.size() == static_cast<size_t>(std::max(B, 0)),
               "gqa_attention_forward_segmented needs the segments of its ", B, " rows");
    attention_forward(blas, out, att, qkv, &segments, B, T, NH, NKV, hs, scratch, stream);
}

void gqa_attention_backward(const Blas& blas, ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                            ConstActPtr att, const AttentionSegments* segments, int B, int T, int NH, int NKV,
                            int hs, AttentionScratch& wide, cudaStream_t stream) {
    const AttentionDims d = gqa_attention_dims(T, NH, NKV, hs);
    if (B <= 0 || T <= 0) return;
    const size_t qkv_b = static_cast<size_t>(T) * d.W;
    const size_t att_b = static_cast<size_t>(NH) * d.tt;
    const size_t out_b = static_cast<size_t>(T) * d.O;
    float* pc = scratch;
    float* ds = scratch + att_b;
    const std::vector<ScoreBand> whole{whole_scores(d)};
    const int32_t* from = segments != nullptr ? segments->attend_from : nullptr;
    const int32_t* band_from = segments != nullptr ? segments->band_from : nullptr;
    for (int b = 0; b < B; ++b) {
        const size_t bs = static_cast<size_t>(b);
        // fp32 buffers are used in place; 16-bit ones widened (dqkv: read, accumulated in
        // fp32 over every head of the group, rounded once when stored back).
        const float* q = widened(qkv.offset(bs * qkv_b), qkv_b, wide.qkv, stream);
        const float* dout_b = widened(dout.offset(bs * out_b), out_b, wide.dout, stream);
        const ActPtr dqkv_here = dqkv.offset(bs * qkv_b);
        float* dq = widened(dqkv_here, qkv_b, wide.dqkv, stream);
        backward_one_f32(blas, dq, pc, ds, dout_b, q, att.offset(bs * att_b), rows_from(from, b, T),
                         rows_from(band_from, b, T), bands_of(segments, b, whole), d, stream);
        store_result(dqkv_here, dq, qkv_b, stream);
    }
}

}  // namespace zt::cuda
