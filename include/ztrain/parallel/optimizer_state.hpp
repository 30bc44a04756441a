// fp32 master weights and AdamW moments over the elements this rank owns (part of
// ModelState): the whole model under DDP, the rank's shard slice under ZeRO-1/2/3. In fp32
// the master weights are the parameters' working copy (no second copy); 16-bit runs keep
// their own fp32 master here.
#pragma once

#include <vector>

#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/gradient_reducer.hpp"
#include "ztrain/parallel/parameter_store.hpp"
#include "ztrain/parallel/state_context.hpp"

namespace zt {

class OptimizerState {
  public:
    /// Allocates master (16-bit) and m, v (zeroed); bytes go to *master_bytes and
    /// *optimizer_bytes. `params` provides the fp32 master where the working copy is it.
    OptimizerState(const StateContext& ctx, ParameterStore& params, size_t* master_bytes, size_t* optimizer_bytes);
    ~OptimizerState();
    OptimizerState(const OptimizerState&) = delete;
    OptimizerState& operator=(const OptimizerState&) = delete;

    /// Initial master values (16-bit runs): elements [lo, hi) of `unit`, host fp32.
    void write_initial(int unit, size_t lo, size_t hi, const float* host);
    /// AdamW over the owned elements from the reducer's final gradients; a 16-bit working
    /// copy's owned elements get the new master, rounded, in the same pass.
    void update(const AdamWStep& step, GradientReducer& grads);

    /// Base pointers: base[e] is unit element e, valid for owned elements.
    float* master_base(int unit);
    float* m_base(int unit);
    float* v_base(int unit);
    /// The owned elements of each unit split where weight decay starts or stops.
    const std::vector<std::vector<DecaySegment>>& segments() const { return m_segments; }

  private:
    /// Where buffers holding the owned elements start: 0 (DDP, whole units) or the shard.
    size_t state_shift(int unit) const;

    StateContext m_ctx;
    ParameterStore& m_params;
    std::vector<float*> m_master;  // 16-bit only
    std::vector<float*> m_m;
    std::vector<float*> m_v;
    std::vector<std::vector<DecaySegment>> m_segments;
};

}  // namespace zt
