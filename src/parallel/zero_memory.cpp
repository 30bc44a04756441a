#include "ztrain/parallel/zero_memory.hpp"

#include "ztrain/core/error.hpp"

namespace zt {

namespace {
/// "bP" (whole) or "bP/N" (sharded); "0" for no bytes.
std::string term_text(int bytes_each, bool sharded) {
    if (bytes_each == 0) return "0";
    return std::to_string(bytes_each) + (sharded ? "P/N" : "P");
}
}  // namespace

ZeroMemoryFormulas zero_memory_formulas(int stage, int world, size_t n_params, DType work, DType grads) {
    ZT_REQUIRE(stage >= 0 && stage <= 3 && world >= 1, "zero_memory_formulas: stage ", stage, ", world ", world);
    // Bytes per parameter of each kind, and which are sharded at each stage: optimizer state
    // (and master) from 1, grads from 2, params at 3.
    const int w = static_cast<int>(dtype_size(work));
    const int g = static_cast<int>(dtype_size(grads));
    const int m = work == DType::kF32 ? 0 : 4;  // fp32: the parameters are the master
    const bool params_sharded = stage >= 3;
    const bool grads_sharded = stage >= 2;
    const bool state_sharded = stage >= 1;
    const double P = static_cast<double>(n_params);
    const double N = world;
    auto term = [&](int bytes_each, bool sharded) {
        return ZeroMemoryTerm{term_text(bytes_each, sharded), sharded ? P * bytes_each / N : P * bytes_each};
    };
    ZeroMemoryFormulas f;
    f.params = term(w, params_sharded);
    f.grads = term(g, grads_sharded);
    f.master = term(m, state_sharded);
    f.optimizer = term(8, state_sharded);
    // The total groups the whole kinds and the sharded ones: "aP + bP/N".
    const int whole = (params_sharded ? 0 : w) + (grads_sharded ? 0 : g) + (state_sharded ? 0 : m + 8);
    const int split = (params_sharded ? w : 0) + (grads_sharded ? g : 0) + (state_sharded ? m + 8 : 0);
    std::string text = whole > 0 ? term_text(whole, false) : "";
    if (split > 0) text += (text.empty() ? "" : " + ") + term_text(split, true);
    f.model_state = {text, P * whole + P * split / N};
    return f;
}

}  // namespace zt
