// Token + position embedding, forward and a deterministic backward.
//
// dwte is a scatter by token: two rows with the same token add into the same row of dwte.
// Instead of float atomics (run-to-run differences), the batch's tokens are copied to the
// host (B*T ints, once per backward), bucketed by token there, and one block per distinct
// token adds its rows in ascending row order: the same order as the CPU twin, so the two
// agree bit for bit. dwpe sums over the batch with one thread per (t, c), b in order.
// A token < 0 (another rank's vocabulary slice under tensor parallelism) has no wte row:
// its out row is wpe[t] alone (zeros without wpe), and it is left out of the buckets, so
// it adds nothing to dwte (its dout still goes into dwpe).
// Typed out / dout through typed.cuh (the tables and their gradients stay fp32).
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

#include <algorithm>

namespace zt::cuda {
namespace {

template <typename A>
__global__ void encoder_forward_kernel(typename A::Dst out, const int32_t* tokens, const float* wte,
                                       const float* wpe, int N, int T, int C) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<size_t>(N) * C) return;
    const int r = static_cast<int>(i / C);
    const int c = static_cast<int>(i % C);
    const int t = r % T;
    const int token = tokens[r];
    if (token < 0) {  // another rank's vocabulary: the position row alone
        out.store(i, wpe != nullptr ? wpe[static_cast<size_t>(t) * C + c] : 0.f);
        return;
    }
    const float e = wte[static_cast<size_t>(token) * C + c];
    out.store(i, wpe != nullptr ? e + wpe[static_cast<size_t>(t) * C + c] : e);
}

template <typename A>
__global__ void encoder_dwpe_kernel(float* dwpe, typename A::Src dout, int B, int T, int C) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<size_t>(T) * C) return;
    const size_t tc = static_cast<size_t>(T) * C;
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc = acc + dout[b * tc + i];
    dwpe[i] = acc;
}

/// Block k adds the rows of bucket k (rows[offsets[k] .. offsets[k+1])) into dwte[token[k]].
template <typename A>
__global__ void encoder_dwte_kernel(float* dwte, typename A::Src dout, const int32_t* offsets,
                                    const int32_t* bucket_token, const int32_t* rows, int C) {
    const int k = blockIdx.x;
    const int begin = offsets[k];
    const int end = offsets[k + 1];
    float* g = dwte + static_cast<size_t>(bucket_token[k]) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = g[c];
        for (int j = begin; j < end; ++j) acc = acc + dout[static_cast<size_t>(rows[j]) * C + c];
        g[c] = acc;
    }
}

}  // namespace

void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream) {
    const size_t n = static_cast<size_t>(B) * T * C;
    if (n == 0) return;
    with_access({out.dtype}, [&](auto access) {
        using A = decltype(access);
        encoder_forward_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(typename A::Dst(out), tokens, wte,
                                                                              wpe, B * T, T, C);
        ZT_KERNEL_CHECK("encoder_forward");
    });
}

void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T, int C,
                      EncoderScratch& host, Workspace& ws, cudaStream_t stream) {
    const int N = B * T;
    if (N <= 0 || C <= 0) return;
    if (dwpe != nullptr) {
        with_access({dout.dtype}, [&](auto access) {
            using A = decltype(access);
            encoder_dwpe_kernel<A><<<grid_for(static_cast<size_t>(T) * C, kBlock), kBlock, 0, stream>>>(
                dwpe, typename A::Src(dout), B, T, C);
            ZT_KERNEL_CHECK("encoder_dwpe");
        });
    }
    if (dwte == nullptr) return;
    host.tokens.resize(static_cast<size_t>(N));
    ZT_CUDA_CHECK(cudaMemcpyAsync(host.tokens.data(), tokens, static_cast<size_t>(N) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    // The rows with a token of this rank's vocabulary (>= 0), sorted by (token, row): a
    // stable sort keeps each bucket's rows ascending.
    std::vector<int32_t> order;
    order.reserve(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) {
        if (host.tokens[static_cast<size_t>(r)] >= 0) order.push_back(r);
    }
    if (order.empty()) return;  // every token on another rank: no bucket (a zero grid is a launch error)
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return host.tokens[static_cast<size_t>(a)] < host.tokens[static_cast<size_t>(b)];
    });
    const int rows = static_cast<int>(order.size());
    std::vector<int32_t> offsets;
    std::vector<int32_t> bucket_token;
    for (int j = 0; j < rows; ++j) {
        const int32_t tok = host.tokens[static_cast<size_t>(order[static_cast<size_t>(j)])];
        if (j == 0 || tok != bucket_token.back()) {
            offsets.push_back(j);
            bucket_token.push_back(tok);
        }
    }
    offsets.push_back(rows);
    const size_t nb = bucket_token.size();
    host.index.clear();
    host.index.insert(host.index.end(), offsets.begin(), offsets.end());
    host.index.insert(host.index.end(), bucket_token.begin(), bucket_token.end());
    host.index.insert(host.index.end(), order.begin(), order.end());
    auto* dev = static_cast<int32_t*>(ws.get(host.index.size() * sizeof(int32_t), stream));
    // host.index outlives the asynchronous copy: it is only rewritten after the next sync.
    ZT_CUDA_CHECK(cudaMemcpyAsync(dev, host.index.data(), host.index.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
    with_access({dout.dtype}, [&](auto access) {
        using A = decltype(access);
        encoder_dwte_kernel<A><<<static_cast<unsigned>(nb), kBlock, 0, stream>>>(
            dwte, typename A::Src(dout), dev, dev + nb + 1, dev + 2 * nb + 1, C);
        ZT_KERNEL_CHECK("encoder_dwte");
    });
}

}  // namespace zt::cuda
