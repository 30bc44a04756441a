// Test-only access to a ModelState's insides (its friend): what the tests inspect and
// perturb, kept off the class's public surface.
#pragma once

#include <cstddef>
#include <vector>

#include "ztrain/parallel/model_state.hpp"

namespace zt {

class ModelStateTestAccess {
  public:
    /// This rank's master weights, AdamW m and v over its owned elements, concatenated.
    static std::vector<float> owned_optimizer_state(ModelState& s) {
        std::vector<float> out;
        for (int u = 0; u < s.m_layout.num_units(); ++u) {
            const size_t b = s.owned_begin(u);
            const size_t e = s.owned_end(u);
            // Through the backend: the buffers may be device memory.
            auto append = [&](const float* base) {
                const size_t at_end = out.size();
                out.resize(at_end + (e - b));
                s.copy_to_host(out.data() + at_end, base + b, e - b);
            };
            append(s.m_optim.master_base(u));
            append(s.m_optim.m_base(u));
            append(s.m_optim.v_base(u));
        }
        return out;
    }
    /// Writes +inf into this rank's first owned gradient element (overflow injection).
    static void poison_owned_grad(ModelState& s) { s.m_grads.poison_owned(); }
    /// fp32 working copy of an unsharded working copy only: direct access to a unit's full
    /// parameters (tests that perturb weights).
    static float* unit_params(ModelState& s, int unit) { return s.m_params.unit_params(unit); }
    /// DDP gradient buckets (units grouped where gradients are all-reduced; 0 otherwise).
    static size_t num_grad_buckets(const ModelState& s) { return s.m_grads.num_buckets(); }
    /// Bytes of per-unit scratch allocated so far (pooled: the high-water mark held).
    static size_t dynamic_scratch_held(const ModelState& s) { return s.m_pool.held(); }
    /// The planned peak of that scratch (included in bytes().scratch).
    static size_t dynamic_scratch_planned(const ModelState& s) { return s.dynamic_scratch_planned(); }
};

}  // namespace zt
