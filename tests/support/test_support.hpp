// Helpers shared by the tests: scratch directories and small file utilities.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"

namespace zt::test {

/// A model config for tests that need a small GPT (vocab_pad_to: ModelConfig's default, 64).
inline ModelConfig model_config(int n_layer, int n_head, int n_embd, int seq_len, int vocab_size,
                                int vocab_pad_to = ModelConfig{}.vocab_pad_to) {
    ModelConfig m;
    m.n_layer = n_layer;
    m.n_head = n_head;
    m.n_embd = n_embd;
    m.seq_len = seq_len;
    m.vocab_size = vocab_size;
    m.vocab_pad_to = vocab_pad_to;
    return m;
}

/// The small Llama of the numpy-reference tests (tests/reference/llama_reference.py): 2
/// layers, 4 heads of size 4, SwiGLU 24, vocabulary 37 padded to 40, 8 positions, RoPE base
/// 100 (large angles at 8 positions, so the rotation matters). llama3 scaling: with hs = 4
/// the wavelengths 2 pi and 20 pi against 16 / 4 and 16 / 1 give one medium (smoothed) and
/// one low (divided by the factor) frequency.
inline ModelConfig small_llama(int n_kv_head, bool tied, bool llama3) {
    ModelConfig m = model_config(2, 4, 16, 8, 37, 8);
    m.arch = ModelArch("llama");
    m.n_kv_head = n_kv_head;
    m.ffn_dim = 24;
    m.rope_theta = 100;
    m.tie_embeddings = tied;
    m.norm_eps = 1e-5;
    if (llama3) {
        m.rope_scaling = RopeScaling::kLlama3;
        m.rope_factor = 2;
        m.rope_low_freq_factor = 1;
        m.rope_high_freq_factor = 4;
        m.rope_original_context = 16;
    }
    return m;
}

/// n float64 values from a raw little-endian file (a reference's gradients).
inline std::vector<double> read_f64(const std::string& path, size_t n) {
    std::vector<double> v(n);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(double)));
    EXPECT_TRUE(in.good()) << path;
    return v;
}

/// A Python reference's rows of T + 1 tokens ({"tokens": [[...], ...]}) as next-token
/// inputs and targets, T of each per row.
inline void reference_rows(const nlohmann::json& tokens, int T, std::vector<int32_t>* inputs,
                           std::vector<int32_t>* targets) {
    for (const auto& row : tokens) {
        for (int t = 0; t < T; ++t) {
            inputs->push_back(row.at(static_cast<size_t>(t)).get<int32_t>());
            targets->push_back(row.at(static_cast<size_t>(t + 1)).get<int32_t>());
        }
    }
}

/// The AdamW of the reference tests' 20-step curves (test_llama_reference,
/// test_mistral_reference; their references take the same numbers).
inline TrainConfig reference_adamw() {
    TrainConfig tc;
    tc.lr = 2e-3;
    tc.beta1 = 0.9;
    tc.beta2 = 0.95;
    tc.eps = 1e-8;
    tc.weight_decay = 0.1;
    tc.grad_clip = 1.0;
    return tc;
}

/// The message of the InputError f throws; "WRONG EXCEPTION TYPE: ..." for another exception
/// and "NO ERROR" when it throws none, so a test's find() on the message fails either way.
template <typename F>
std::string input_error_of(F&& f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("WRONG EXCEPTION TYPE: ") + e.what();
    }
    return "NO ERROR";
}

/// Runs f, expecting an InputError whose message contains every one of `parts`; a failure
/// names the part that is missing and shows the whole message.
template <typename F>
void expect_input_error(F&& f, const std::vector<std::string>& parts) {
    const std::string msg = input_error_of(f);
    for (const std::string& p : parts) {
        EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
    }
}

/// Removes the fields of a metrics.jsonl record that differ run to run: tokens_per_s and
/// every *_ms (step and phase times, per-op times), and comm_overlap (which collectives the
/// communication thread had finished before the wait is a matter of timing).
inline void erase_timing_fields(nlohmann::json& j) {
    j.erase("tokens_per_s");
    j.erase("comm_overlap");
    // Memory measurements (the plan includes the process's measured baseline) vary run to run.
    j.erase("predicted_peak");
    j.erase("measured_peak");
    for (auto it = j.begin(); it != j.end();) {
        const std::string& k = it.key();
        it = k.size() > 3 && k.compare(k.size() - 3, 3, "_ms") == 0 ? j.erase(it) : std::next(it);
    }
}

/// Every record of a metrics.jsonl, in order.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
}

/// The per-step records of a metrics.jsonl (those with a loss), in order.
inline std::vector<nlohmann::json> step_records(const std::string& path) {
    std::vector<nlohmann::json> out;
    for (nlohmann::json& j : read_jsonl(path)) {
        if (j.contains("loss")) out.push_back(std::move(j));
    }
    return out;
}

/// A fresh, empty directory under the system temp dir, removed when the object dies.
class ScratchDir {
  public:
    explicit ScratchDir(const std::string& tag);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::string& path() const { return m_path; }
    std::string file(const std::string& name) const { return m_path + "/" + name; }

  private:
    std::string m_path;
};

/// Writes `content` to `path` (binary).
void write_file(const std::string& path, const std::string& content);
/// Reads a whole file (binary).
std::string read_file(const std::string& path);

/// A python with numpy (for the numpy references under tests/reference/): $ZT_PYTHON,
/// python3 on the PATH, or Debian's /usr/bin/python3 (the PATH's may be a pyenv without
/// numpy); "" when none has it.
std::string numpy_python();
/// A .npy file (format 1.0) of little-endian float32 ("<f4") or int32 ("<i4") elements.
void write_npy(const std::string& path, const void* data, const char* descr, size_t elem,
               const std::vector<size_t>& shape);

}  // namespace zt::test
