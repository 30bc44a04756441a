// The ZeRO paper's model-state memory per rank, per buffer kind, for a stage, a world size
// N, P parameters and a working dtype: what ModelState should allocate (up to padding), and
// the formula text the start-up table prints next to what it did allocate.
//
// Mixed precision (bf16/fp16): working params and grads 2 bytes each (grads 4 when
// accumulated in fp32, precision.grad_dtype), fp32 master 4, AdamW m and v 8; fp32 has no
// separate master copy (the parameters are the master). Sharded kinds
// divide by N. Not here: scratch (gathered units, gradient scratch) and activations, which
// depend on the model's shapes rather than on P alone.
#pragma once

#include <cstddef>
#include <string>

#include "ztrain/core/dtype.hpp"

namespace zt {

/// One buffer kind: its formula in P and N ("2P/N") and its bytes for the given P and N.
struct ZeroMemoryTerm {
    std::string formula;
    double bytes = 0.0;
};

struct ZeroMemoryFormulas {
    ZeroMemoryTerm params;
    ZeroMemoryTerm grads;
    ZeroMemoryTerm master;
    ZeroMemoryTerm optimizer;
    ZeroMemoryTerm model_state;  ///< the four above together ("2P + 14P/N")
};

/// The formulas for `stage` (0 DDP .. 3) at `world` ranks, `n_params` parameters, working
/// dtype `work` and gradients stored in `grads`.
ZeroMemoryFormulas zero_memory_formulas(int stage, int world, size_t n_params, DType work, DType grads);
/// Gradients stored in the working dtype.
inline ZeroMemoryFormulas zero_memory_formulas(int stage, int world, size_t n_params, DType work) {
    return zero_memory_formulas(stage, world, n_params, work, work);
}

}  // namespace zt
