// The RoPE table (backend/rope.hpp): Hugging Face's default and llama3 inverse frequencies,
// in double.
#include "ztrain/backend/rope.hpp"

#include <cmath>

#include "ztrain/core/error.hpp"

namespace zt {

std::vector<double> rope_inv_freq(int hs, const RopeOptions& options) {
    ZT_REQUIRE(hs > 0 && hs % 2 == 0, "rope: head size ", hs, " must be even and positive");
    ZT_REQUIRE(options.theta > 1.0, "rope: theta ", options.theta, " must be > 1");
    const int half = hs / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i) {
        inv_freq[static_cast<size_t>(i)] = std::pow(options.theta, -2.0 * i / static_cast<double>(hs));
    }
    if (!options.llama3_scaling) return inv_freq;

    // transformers' _compute_llama3_parameters: wavelengths shorter than
    // original_max / high_freq_factor are kept, longer than original_max / low_freq_factor
    // divided by factor, and those between interpolated smoothly in 1/wavelength.
    const RopeLlama3Scaling& s = options.llama3;
    ZT_REQUIRE(s.factor > 0.0, "rope llama3 scaling: factor ", s.factor, " must be > 0");
    ZT_REQUIRE(s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor,
               "rope llama3 scaling: need 0 < low_freq_factor < high_freq_factor (got ", s.low_freq_factor, ", ",
               s.high_freq_factor, ")");
    ZT_REQUIRE(s.original_max_position_embeddings > 0.0, "rope llama3 scaling: original_max_position_embeddings ",
               s.original_max_position_embeddings, " must be > 0");
    const double pi = std::acos(-1.0);
    const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    for (double& f : inv_freq) {
        const double wavelen = 2.0 * pi / f;
        if (wavelen < high_freq_wavelen) continue;
        if (wavelen > low_freq_wavelen) {
            f = f / s.factor;
            continue;
        }
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
    return inv_freq;
}

std::vector<float> rope_table(int T, int hs, const RopeOptions& options) {
    ZT_REQUIRE(T >= 0, "rope: table length ", T, " must not be negative");
    const std::vector<double> inv_freq = rope_inv_freq(hs, options);
    const size_t half = inv_freq.size();
    std::vector<float> table(static_cast<size_t>(T) * static_cast<size_t>(hs));
    for (int t = 0; t < T; ++t) {
        float* row = table.data() + static_cast<size_t>(t) * static_cast<size_t>(hs);
        for (size_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(t) * inv_freq[i];
            row[i] = static_cast<float>(std::cos(angle));
            row[half + i] = static_cast<float>(std::sin(angle));
        }
    }
    return table;
}

}  // namespace zt
