// The rotary position embedding table (RoPE) that Backend::rope_forward/rope_backward read:
// host functions that build it once; the caller uploads it to backend memory (to_device).
//
// Conventions are Hugging Face's Llama (transformers' modeling_rope_utils): for head size hs,
// inv_freq[i] = theta^(-2i/hs), i < hs/2, and the angle at position t is t * inv_freq[i];
// rope_type = llama3 (Llama 3.1 and later) rescales inv_freq as _compute_llama3_parameters
// does. What differs from HF on purpose: every value is computed in double and rounded to
// float once at the end (HF computes inv_freq in fp32), so the table is the exact angle's
// cos/sin to within float rounding. Not implemented: the other HF rope types (linear,
// dynamic, yarn, longrope), whose attention_factor is not 1.
#pragma once

#include <vector>

namespace zt {

/// Llama 3.1's frequency scaling (config.json rope_scaling with rope_type "llama3").
struct RopeLlama3Scaling {
    double factor = 8.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    double original_max_position_embeddings = 8192.0;
};

/// What the table depends on besides its size.
struct RopeOptions {
    double theta = 10000.0;          ///< config.json rope_theta
    bool llama3_scaling = false;     ///< apply `llama3` below
    RopeLlama3Scaling llama3;
};

/// inv_freq (hs/2) in double: theta^(-2i/hs), rescaled when options.llama3_scaling.
/// Throws unless hs is even and positive and the options are valid (theta > 1, factor > 0,
/// high_freq_factor > low_freq_factor > 0, original_max_position_embeddings > 0).
std::vector<double> rope_inv_freq(int hs, const RopeOptions& options);

/// The table (T, hs) the backend's rope ops read: row t = [cos(t * inv_freq) (hs/2) |
/// sin(t * inv_freq) (hs/2)], computed in double, stored as float.
std::vector<float> rope_table(int T, int hs, const RopeOptions& options);

}  // namespace zt
