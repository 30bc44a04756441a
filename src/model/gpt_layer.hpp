// Gpt::Layer: the activations one block saves for its backward. Private to model/ (gpt.cpp
// and llama.cpp both fill it).
#pragma once

#include "ztrain/model/gpt.hpp"

namespace zt {

/// Shapes (B, T, ...) at allocation size. Llama's block uses the same slots: ln1/ln2 hold
/// the RMSNorm outputs (no mean), qkv is (B, T, (NH + 2 NKV) hs) after RoPE, fch the
/// gate|up product (B, T, 2F) and fch_gelu the SwiGLU output (B, T, F).
struct Gpt::Layer {
    float* ln1 = nullptr;       // (B, T, C)
    float* ln1_mean = nullptr;  // (B, T)
    float* ln1_rstd = nullptr;  // (B, T)
    float* qkv = nullptr;       // (B, T, 3C)
    float* atty = nullptr;      // (B, T, C)
    float* att = nullptr;       // (B, NH, T, T)
    float* residual2 = nullptr; // (B, T, C)
    float* ln2 = nullptr;       // (B, T, C)
    float* ln2_mean = nullptr;  // (B, T)
    float* ln2_rstd = nullptr;  // (B, T)
    float* fch = nullptr;       // (B, T, 4C)
    float* fch_gelu = nullptr;  // (B, T, 4C)
    float* residual3 = nullptr; // (B, T, C)  the block's output
};

}  // namespace zt
