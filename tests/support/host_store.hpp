// A UnitStore with every unit whole in host memory (the CPU backend's), for tests that run
// the model without a parallel strategy: it records which units the model reads or writes,
// and hands out gradient buffers full of garbage where the model must zero them itself.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ztrain/model/model_layout.hpp"

namespace zt::test {

/// The pipeline tests' model: n_layer blocks of width 8 (2 heads), 6 positions, vocabulary 11
/// padded to 16; Llama with one KV head, a 12-wide MLP and RoPE theta 10 (so rotation matters
/// at 6 positions); Mistral the same with a sliding window of 3.
inline ModelConfig tiny_stage_model(ModelArch arch, int n_layer, bool tied = true) {
    ModelConfig m;
    m.n_layer = n_layer;
    m.n_head = 2;
    m.n_embd = 8;
    m.seq_len = 6;
    m.vocab_size = 11;
    m.vocab_pad_to = 8;
    if (arch == ModelArch("llama") || arch == ModelArch("mistral")) {
        m.arch = arch;
        m.sliding_window = arch == ModelArch("mistral") ? 3 : 0;  // half the rows
        m.n_kv_head = 1;
        m.ffn_dim = 12;
        m.rope_theta = 10;
        m.tie_embeddings = tied;
    }
    return m;
}

class HostStore final : public UnitStore {
  public:
    HostStore(const ModelLayout& layout, uint64_t seed) {
        for (int u = 0; u < layout.num_units(); ++u) {
            const size_t n = layout.unit_numel[static_cast<size_t>(u)];
            params.emplace_back(n);
            m_grads.emplace_back(n, 0.f);
            init_unit(layout, u, seed, params.back().data());
        }
        begin_step();
    }
    /// A new optimizer step: each unit's gradient is to be zeroed by its first use again.
    void begin_step() { m_zero_pending.assign(m_grads.size(), true); }
    const float* acquire(int unit) override {
        touched.insert(unit);
        return params[static_cast<size_t>(unit)].data();
    }
    void release(int unit) override { (void)unit; }
    float* grads(int unit) override {
        touched.insert(unit);
        return m_grads[static_cast<size_t>(unit)].data();
    }
    /// The first time per step: the buffer is filled with 7s, which the model must zero.
    bool grads_need_zero(int unit) override {
        const size_t u = static_cast<size_t>(unit);
        if (!m_zero_pending[u]) return false;
        m_zero_pending[u] = false;
        std::fill(m_grads[u].begin(), m_grads[u].end(), 7.f);
        return true;
    }
    const std::vector<float>& grad(int unit) const { return m_grads[static_cast<size_t>(unit)]; }
    std::vector<float>& grad(int unit) { return m_grads[static_cast<size_t>(unit)]; }

    std::vector<std::vector<float>> params;
    std::set<int> touched;

  private:
    std::vector<std::vector<float>> m_grads;
    std::vector<bool> m_zero_pending;
};

/// Unit `unit`'s gradient `have` against `want`, tensor by tensor: bit for bit, except a
/// norm's parameter gradient when `norms_rounded` (zero-bubble's weight pass adds a norm's
/// per micro-batch sum where a plain backward adds row by row): within 1e-6 of its largest
/// element.
inline void expect_unit_grads(const ModelLayout& layout, int unit, const std::vector<float>& want,
                              const std::vector<float>& have, bool norms_rounded, const std::string& what) {
    ASSERT_EQ(have.size(), want.size()) << what << ", unit " << unit;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != unit) continue;
        const bool norm = p.name.find("ln") != std::string::npos || p.name.find("norm") != std::string::npos;
        size_t differ = 0;
        double worst = 0;  // the largest difference
        double scale = 0;  // the largest gradient element
        for (size_t i = p.offset; i < p.offset + p.numel; ++i) {
            differ += have[i] != want[i] ? 1 : 0;
            worst = std::max(worst, std::fabs(static_cast<double>(have[i]) - want[i]));
            scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
        }
        if (norm && norms_rounded) {
            EXPECT_LE(worst, 1e-6 * scale) << what << ", " << p.name << ": largest difference (its largest "
                                           << "gradient element " << scale << ")";
        } else {
            EXPECT_EQ(differ, 0u) << what << ", " << p.name << ": " << differ << " of " << p.numel
                                  << " gradient elements differ";
        }
    }
}

}  // namespace zt::test
