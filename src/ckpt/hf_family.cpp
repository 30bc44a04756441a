// The transpose (hf_family.hpp) and GPT-2's config.json for given dimensions (export.hpp).
#include "hf_family.hpp"

#include <algorithm>

#include "ztrain/ckpt/export.hpp"

namespace zt {

nlohmann::json hf_gpt2_config(long n_layer, long n_head, long n_embd, long n_positions, long vocab_size,
                              DType dtype) {
    ModelConfig m;
    m.n_layer = static_cast<int>(n_layer);
    m.n_head = static_cast<int>(n_head);
    m.n_embd = static_cast<int>(n_embd);
    m.seq_len = static_cast<int>(n_positions);
    m.vocab_size = static_cast<int>(vocab_size);
    return model_family(m).hf_config(m, dtype);
}

void transpose(const float* src, size_t rows, size_t cols, float* dst) {
    constexpr size_t kTile = 32;
    const long long row_tiles = static_cast<long long>((rows + kTile - 1) / kTile);
    #pragma omp parallel for schedule(static)
    for (long long rt = 0; rt < row_tiles; ++rt) {
        const size_t r0 = static_cast<size_t>(rt) * kTile;
        const size_t r1 = std::min(rows, r0 + kTile);
        for (size_t c0 = 0; c0 < cols; c0 += kTile) {
            const size_t c1 = std::min(cols, c0 + kTile);
            for (size_t r = r0; r < r1; ++r) {
                for (size_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
}

}  // namespace zt
