#include "ztrain/parallel/zero_memory.hpp"

#include "ztrain/core/error.hpp"

namespace zt {

ZeroMemoryFormulas zero_memory_formulas(int stage, int world, size_t n_params, DType work) {
    ZT_REQUIRE(stage >= 0 && stage <= 3 && world >= 1, "zero_memory_formulas: stage ", stage, ", world ", world);
    const bool f32 = work == DType::kF32;
    // Which kinds are sharded at each stage: optimizer state from 1, grads from 2, params at 3.
    const char* kParams[4] = {f32 ? "4P" : "2P", f32 ? "4P" : "2P", f32 ? "4P" : "2P", f32 ? "4P/N" : "2P/N"};
    const char* kGrads[4] = {f32 ? "4P" : "2P", f32 ? "4P" : "2P", f32 ? "4P/N" : "2P/N", f32 ? "4P/N" : "2P/N"};
    const char* kMaster[4] = {f32 ? "0" : "4P", f32 ? "0" : "4P/N", f32 ? "0" : "4P/N", f32 ? "0" : "4P/N"};
    static const char* const kOptim[4] = {"8P", "8P/N", "8P/N", "8P/N"};
    const char* kTotal[4] = {"16P", f32 ? "8P + 8P/N" : "4P + 12P/N", f32 ? "4P + 12P/N" : "2P + 14P/N", "16P/N"};

    const double P = static_cast<double>(n_params);
    const double N = world;
    const double w = static_cast<double>(dtype_size(work));
    const double m = f32 ? 0.0 : 4.0;
    ZeroMemoryFormulas f;
    f.params = {kParams[stage], stage >= 3 ? P * w / N : P * w};
    f.grads = {kGrads[stage], stage >= 2 ? P * w / N : P * w};
    f.master = {kMaster[stage], stage >= 1 ? P * m / N : P * m};
    f.optimizer = {kOptim[stage], stage >= 1 ? P * 8 / N : P * 8};
    // The total keeps its own grouping (params, grads, master, Adam per stage), so the
    // printed sum is exactly what the start-up table has always shown.
    const double total[4] = {P * (2 * w + m + 8), P * (2 * w + (m + 8) / N), P * (w + (w + m + 8) / N),
                             P * (2 * w + m + 8) / N};
    f.model_state = {kTotal[stage], total[stage]};
    return f;
}

}  // namespace zt
