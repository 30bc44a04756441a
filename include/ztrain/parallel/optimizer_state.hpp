// fp32 master weights and AdamW moments over the elements this rank owns (part of
// ModelState): the whole model under DDP, the rank's shard slice under ZeRO-1/2/3. In fp32
// the master weights are the parameters' working copy (no second copy); 16-bit runs keep
// their own fp32 master here.
#pragma once

#include <algorithm>
#include <optional>
#include <utility>
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
    /// With `muon`, the blocks' matrices (muon_matrices) take Muon's step, their momentum in
    /// m; they keep no v (second_moment_floats), and Muon's buffers count as optimizer bytes
    /// (muon_bytes).
    /// Under tensor parallelism (`tensor`: the group, size > 1) Muon all-gathers each split
    /// matrix's update over it and orthogonalizes the whole matrix on every rank of it.
    OptimizerState(const StateContext& ctx, ParameterStore& params, size_t* master_bytes, size_t* optimizer_bytes,
                   const std::optional<MuonSettings>& muon = std::nullopt, Communicator* tensor = nullptr);
    ~OptimizerState();
    OptimizerState(const OptimizerState&) = delete;
    OptimizerState& operator=(const OptimizerState&) = delete;

    /// Initial master values (16-bit runs): elements [lo, hi) of `unit`, host fp32.
    void write_initial(int unit, size_t lo, size_t hi, const float* host);
    /// AdamW over the owned elements from the reducer's final gradients (under Muon, those
    /// outside its matrices, which take Muon's step at step.lr x lr_ratio); a 16-bit working
    /// copy's owned elements get the new master, rounded, in the same pass.
    void update(const AdamWStep& step, GradientReducer& grads);

    /// Muon's buffers: one matrix's update and its Newton-Schulz work (the whole matrix's
    /// under tensor parallelism, and its slices gathered from the tensor group), and under
    /// sharded optimizer state a whole unit's update, gathered from the group (each rank
    /// computes its shard's momentum; the orthogonalization needs every row).
    static size_t muon_bytes(const ModelLayout& layout, const ShardPlan& plan);
    /// The floats of `rank`'s AdamW second moment for `unit`: its stored optimizer range, or
    /// under Muon only the owned elements outside Muon's matrices (which keep momentum alone).
    static size_t second_moment_floats(const ModelLayout& layout, const ShardPlan& plan, int unit, int rank,
                                       bool muon);

    /// Base pointers: base[e] is unit element e, valid for owned elements.
    float* master_base(int unit);
    float* m_base(int unit);
    /// v's base pointer; only where v covers every stored element (not under Muon).
    float* v_base(int unit);
    /// fn(element, v, n) for each run of unit elements [from, to) that keeps a second
    /// moment, v pointing at the element's; the elements between keep none (Muon's matrices).
    template <typename Fn>
    void for_second_moment_within(int unit, size_t from, size_t to, Fn&& fn) {
        float* v = m_v[static_cast<size_t>(unit)];
        for (const SecondMomentRun& r : m_v_runs[static_cast<size_t>(unit)]) {
            const size_t b = std::max(r.begin, from);
            const size_t e = std::min(r.end, to);
            if (e > b) fn(b, v + r.at + (b - r.begin), e - b);
        }
    }
    /// The owned elements of each unit split where weight decay starts or stops.
    const std::vector<std::vector<DecaySegment>>& segments() const { return m_segments; }

  private:
    /// A matrix split over the tensor group: its whole shape, and per tensor rank the runs of
    /// its slice (local: from the slice's first element; whole: from the matrix's).
    struct TensorMatrix {
        int rows = 0;
        int cols = 0;
        std::vector<std::vector<StridedRuns>> runs;  // per tensor rank; empty: not split
    };
    static std::vector<std::vector<TensorMatrix>> tensor_matrices(const ModelLayout& layout);
    /// The floats of Muon's buffers: the largest (whole) matrix's update plus its
    /// Newton-Schulz work, the largest split matrix's gathered slices, and (sharded state) the
    /// largest unit holding matrices, padded.
    struct MuonFloats {
        size_t matrix = 0;
        size_t slices = 0;
        size_t unit = 0;
    };
    static MuonFloats muon_floats(const ModelLayout& layout, const ShardPlan& plan,
                                  const std::vector<std::vector<TensorMatrix>>& tensor);
    /// Unit elements [begin, end) whose second moments lie from `at` of the unit's v buffer.
    struct SecondMomentRun {
        size_t begin = 0;
        size_t end = 0;
        size_t at = 0;
    };
    static std::vector<SecondMomentRun> second_moment_runs(const ModelLayout& layout, const ShardPlan& plan,
                                                           int unit, int rank, bool muon);
    static size_t floats_of(const std::vector<SecondMomentRun>& runs);
    /// The second moment of unit element `element`, which AdamW updates.
    float* second_moment_at(int unit, size_t element);
    /// Where buffers holding the owned elements start: 0 (DDP, whole units) or the shard.
    size_t state_shift(int unit) const;
    void adamw_update(const AdamWStep& step, GradientReducer& grads);
    /// Muon over unit's matrices that meet its owned elements: their momentum, then each
    /// one's whole update orthogonalized and the owned part applied at `rate` with `decay`.
    void muon_unit(int unit, const MuonStep& ms, double rate, float decay, GradientReducer& grads);
    /// Orthogonalizes matrix `index` of `unit` whose update is at `x` (this rank's slice under
    /// tensor parallelism: gathered, assembled, orthogonalized whole, and its slice taken back)
    /// and returns its rate's multiplier shape (the whole matrix's rows and cols).
    std::pair<int, int> orthogonalize(int unit, size_t index, float* x, const MuonStep& ms);

    StateContext m_ctx;
    ParameterStore& m_params;
    std::vector<float*> m_master;  // 16-bit only
    std::vector<float*> m_m;
    std::vector<float*> m_v;  // packed along m_v_runs
    std::vector<std::vector<SecondMomentRun>> m_v_runs;
    std::vector<std::vector<DecaySegment>> m_segments;
    /// AdamW's part of m_segments: all of it, or without Muon's matrices.
    std::vector<std::vector<DecaySegment>> m_adamw_segments;
    std::optional<MuonSettings> m_muon;
    std::vector<std::vector<MuonMatrix>> m_matrices;  // per unit, under Muon
    /// Under tensor parallelism, per unit and matrix: the whole matrix, and where each tensor
    /// rank's slice lies in it (empty: the matrix is whole on every rank).
    std::vector<std::vector<TensorMatrix>> m_tensor_matrices;
    Communicator* m_tensor = nullptr;
    float* m_muon_matrix = nullptr;  // one (whole) matrix's update, then its Newton-Schulz work
    float* m_muon_slices = nullptr;  // a split matrix's slices gathered from the tensor group
    float* m_muon_unit = nullptr;    // a whole unit's gathered update (sharded state only)
};

}  // namespace zt
