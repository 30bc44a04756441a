// Hugging Face model families (hf_family.hpp): GPT-2.
#include "hf_family.hpp"

#include <algorithm>

#include "weights_file.hpp"
#include "ztrain/ckpt/export.hpp"

namespace zt {

std::string HfFamily::ztrain_name(const std::string& file_name) const {
    return file_name.rfind(prefix, 0) == 0 ? file_name.substr(prefix.size()) : file_name;
}

bool HfFamily::transposed(const std::string& ztrain_name) const {
    return std::any_of(transposed_suffixes.begin(), transposed_suffixes.end(),
                       [&](const std::string& s) { return ends_with(ztrain_name, s); });
}

bool HfFamily::ignored(const std::string& ztrain_name) const {
    return std::find(ignored_names.begin(), ignored_names.end(), ztrain_name) != ignored_names.end() ||
           std::any_of(ignored_suffixes.begin(), ignored_suffixes.end(),
                       [&](const std::string& s) { return ends_with(ztrain_name, s); });
}

std::vector<size_t> HfFamily::file_shape(const std::string& ztrain_name, const std::vector<size_t>& shape) const {
    if (transposed(ztrain_name) && shape.size() == 2) return {shape[1], shape[0]};
    return shape;
}

nlohmann::json hf_gpt2_config(long n_layer, long n_head, long n_embd, long n_positions, long vocab_size,
                              DType dtype) {
    const bool gpt2_vocab = vocab_size == 50257;
    nlohmann::json c = {
        {"architectures", {"GPT2LMHeadModel"}},
        {"model_type", "gpt2"},
        {"vocab_size", vocab_size},
        {"n_positions", n_positions},
        {"n_ctx", n_positions},
        {"n_embd", n_embd},
        {"n_layer", n_layer},
        {"n_head", n_head},
        {"n_inner", nullptr},                  // 4 * n_embd, as ztrain's MLP
        {"activation_function", "gelu_new"},   // GELU with the tanh approximation
        {"layer_norm_epsilon", 1e-5},          // ztrain's LayerNorm epsilon
        {"initializer_range", 0.02},
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},                   // ztrain trains without dropout
        {"scale_attn_weights", true},          // scores / sqrt(head size)
        {"tie_word_embeddings", true},         // lm_head is wte
        {"torch_dtype", dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32"},
    };
    c["bos_token_id"] = gpt2_vocab ? nlohmann::json(50256) : nlohmann::json(nullptr);
    c["eos_token_id"] = gpt2_vocab ? nlohmann::json(50256) : nlohmann::json(nullptr);
    return c;
}

const HfFamily& gpt2_family() {
    static const HfFamily family{
        "GPT2LMHeadModel",
        "transformer.",
        {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"},
        // lm_head is tied to wte (Hugging Face re-ties it on load); the attention bias
        // buffers are causal masks some GPT-2 exports include.
        {"lm_head.weight"},
        {".attn.bias", ".attn.masked_bias"},
        [](const ModelConfig& m, DType dtype) {
            return hf_gpt2_config(m.n_layer, m.n_head, m.n_embd, m.seq_len, m.vocab_size, dtype);
        },
        [](const ModelConfig& m) {
            return std::vector<std::pair<std::string, std::string>>{
                {"n_layer", std::to_string(m.n_layer)},
                {"n_head", std::to_string(m.n_head)},
                {"n_embd", std::to_string(m.n_embd)},
                {"n_positions", std::to_string(m.seq_len)},
                {"vocab_size", std::to_string(m.vocab_size)},
                {"tied", "lm_head.weight = transformer.wte.weight"}};
        },
    };
    return family;
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
