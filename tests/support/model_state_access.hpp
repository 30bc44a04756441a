// Test-only access to a ModelState's insides (its friend): what the tests inspect and
// perturb, kept off the class's public surface.
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "ztrain/core/error.hpp"

#include "ztrain/parallel/model_state.hpp"

namespace zt {

class ModelStateTestAccess {
  public:
    /// This rank's master weights, AdamW m and v over its owned elements, concatenated.
    static std::vector<float> owned_optimizer_state(ModelState& s) {
        std::vector<float> out;
        for (int u = 0; u < s.m_layout.num_units(); ++u) {
            const size_t b = s.shards().owned_begin(u);
            const size_t e = s.shards().owned_end(u);
            // Through the backend: the buffers may be device memory.
            auto append = [&](const float* base) {
                const size_t at_end = out.size();
                out.resize(at_end + (e - b));
                s.shards().copy_to_host(out.data() + at_end, base + b, e - b);
            };
            append(s.m_optim.master_base(u));
            append(s.m_optim.m_base(u));
            append(s.m_optim.v_base(u));
        }
        return out;
    }
    /// Writes +inf into this rank's first owned gradient element (overflow injection).
    static void poison_owned_grad(ModelState& s) {
        GradientReducer& g = s.m_grads;
        const StateContext& ctx = g.m_ctx;
        g.complete_all();
        for (int u = 0; u < ctx.num_units(); ++u) {
            const size_t b = ctx.owned_begin(u);
            if (ctx.owned_end(u) <= b) continue;
            const float inf = std::numeric_limits<float>::infinity();
            if (ctx.grads == DType::kF32) {
                ctx.backend.to_device(g.grad_ptr(u, b), &inf, sizeof(float));
            } else {
                // Up as fp32 into the conversion buffer (16-bit runs have one), then cast.
                ctx.backend.to_device(ctx.f32_tmp, &inf, sizeof(float));
                ctx.backend.cast(g.grad_ptr(u, b), ctx.grads, ctx.f32_tmp, DType::kF32, 1);
            }
            return;
        }
    }
    /// Direct access to a unit's full fp32 working copy (tests that perturb weights); only
    /// where the working copy is whole (ZeRO stage <= 2) and fp32.
    static float* unit_params(ModelState& s, int unit) {
        ParameterStore& p = s.m_params;
        ZT_REQUIRE(!p.m_ctx.plan.params_gathered_per_unit() && p.m_ctx.work == DType::kF32,
                   "unit_params() needs a full fp32 working copy (ZeRO stage <= 2, fp32)");
        p.wait_gather(unit);
        return static_cast<float*>(p.m_params.at(static_cast<size_t>(unit)));
    }
    /// DDP gradient buckets (units grouped where gradients are all-reduced; 0 otherwise).
    static size_t num_grad_buckets(const ModelState& s) { return s.m_grads.m_buckets.size(); }
    /// Bytes of per-unit scratch allocated so far (pooled: the high-water mark held).
    static size_t dynamic_scratch_held(const ModelState& s) { return s.m_pool.held(); }
    /// The planned peak of that scratch (included in bytes().scratch).
    static size_t dynamic_scratch_planned(const ModelState& s) { return s.dynamic_scratch_planned(); }
    /// This rank's final (reduced) gradients over its owned elements, units concatenated:
    /// read from their storage in their stored dtype, widened on the host.
    static std::vector<float> owned_grads(ModelState& s) {
        GradientReducer& g = s.m_grads;
        g.complete_all();
        const DType t = g.m_ctx.grads;
        std::vector<float> out;
        for (int u = 0; u < s.m_layout.num_units(); ++u) {
            const size_t b = s.shards().owned_begin(u);
            const size_t n = s.shards().owned_end(u) - b;
            std::vector<unsigned char> raw(n * dtype_size(t));
            s.m_backend.to_host(raw.data(), g.grad_ptr(u, b), raw.size());
            const size_t at_end = out.size();
            out.resize(at_end + n);
            convert_to_f32(raw.data(), out.data() + at_end, n, t);
        }
        return out;
    }
    /// Units whose parameters the store holds gathered now (acquired or started ahead).
    static size_t resident_units(const ModelState& s) { return s.m_params.m_resident.size(); }
};

}  // namespace zt
