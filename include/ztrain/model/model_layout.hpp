// The model's base, what every layer above the model depends on: the parameter layout
// (units + tensor manifest), its counter-based initialization, and UnitStore, the face
// through which the model reads weights and writes gradients.
//
// Parameters live in flat per-unit buffers: unit 0 = the embeddings (GPT-2: token +
// position; Llama: token, plus lm_head when untied; a tied token embedding doubles as the
// LM head), units 1..L = transformer blocks, unit L+1 = the final norm. A tensor is (unit,
// offset, shape). The model reads weights and writes gradients only through a UnitStore,
// which decides where those buffers live (replicated, sharded and gathered on demand, ...);
// the model never knows the parallel strategy.
//
// Under LoRA (lora.rank > 0) every targeted product weight of a block has two more tensors at
// the end of its block's unit, named as PEFT names them ("h.3.attn.c_attn.lora_A.weight" (r,
// in), "...lora_B.weight" (out, r)), and the rest of the model is frozen (ParamSpec::trainable);
// with rank 0 the layout is the family's, unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"

namespace zt {

/// This rank's part of a tensor-parallel model (parallel.tensor, parallel/device_mesh.hpp):
/// `size` ranks split every block's products, this one holds slice `rank` of each split
/// tensor. {1, 0}: the whole model.
struct TensorSplit {
    int size = 1;
    int rank = 0;
};

/// Where a tensor of a split layout lies in the unsplit tensor: dimension `dim` of the
/// unsplit shape is `blocks` equal blocks (GPT-2's q|k|v rows: 3), each cut into `parts`
/// equal slices, and this tensor is slice `part` of every block, blocks in order. dim -1:
/// the whole tensor (replicated over the tensor group: norms, row-parallel biases,
/// positions, and k and v of a single KV head shared by every rank).
struct TensorSlice {
    int dim = -1;
    int parts = 1;
    int part = 0;
    int blocks = 1;
    /// Ranks of the tensor group holding this same slice: T / parts when a tensor has fewer
    /// slices than the group has ranks (Llama's k and v with fewer KV heads than T, each
    /// head held by T / n_kv_head consecutive ranks), else 1.
    int copies = 1;
    std::vector<size_t> global_shape;  ///< the unsplit tensor's
    bool split() const { return dim >= 0 && parts > 1; }
    /// The row-major offset in the unsplit tensor of element i of this slice (of shape
    /// `local_shape`).
    size_t global_offset(size_t i, const std::vector<size_t>& local_shape) const;
};

/// One tensor of the manifest.
struct ParamSpec {
    std::string name;          ///< Hugging Face names: "h.3.attn.c_attn.weight" (GPT-2),
                               ///< "model.layers.3.self_attn.q_proj.weight" (Llama)
    int unit = 0;
    size_t offset = 0;         ///< element offset inside the unit's buffer
    std::vector<size_t> shape; ///< ztrain orientation: matrices are (out, in)
    size_t numel = 0;
    bool decay = false;        ///< AdamW weight decay applies
    float init_std = 0.f;      ///< normal(0, init_std); 0 means constant init_value
    float init_value = 0.f;
    /// > 0: uniform(-init_bound, init_bound) instead (LoRA's A: PEFT's kaiming_uniform_(a =
    /// sqrt(5)), bound 1 / sqrt(fan_in))
    float init_bound = 0.f;
    /// Whether training updates it: false for a frozen base under LoRA (no gradient is
    /// computed for it and AdamW skips it); true otherwise.
    bool trainable = true;
    /// A LoRA adapter's A or B (not in a base model's files: initialized, never imported).
    bool adapter = false;
    size_t global_index = 0;   ///< index of the unsplit tensor's first element in the
                               ///< model-wide enumeration (the same for every TensorSplit)
    size_t init_numel = 0;     ///< leading elements of the unsplit tensor that get the init;
                               ///< the rest stay 0 (the padded vocabulary rows of wte)
    TensorSlice slice;         ///< the slice of the unsplit tensor held (dim -1: all of it)
};

/// The pipeline stage a layout describes (stage_layout); size 1: the whole model.
struct PipelineStage {
    int size = 1;
    int rank = 0;
    /// Units held as a copy of another stage's (unit 0 on the last stage, which the first
    /// holds too): that stage alone counts them in the gradient norm and saves them.
    std::vector<int> mirrored;
    bool mirrors(int unit) const;
};

/// Units and the tensor manifest; a pure function of the model config.
struct ModelLayout {
    ModelConfig model;                ///< the configuration the layout was made from
    TensorSplit split;                ///< the tensor-parallel part it describes
    PipelineStage stage;              ///< the pipeline stage it describes
    std::vector<ParamSpec> params;
    std::vector<size_t> unit_numel;   ///< elements per unit (unpadded)
    size_t total_numel = 0;
    size_t head_offset = 0;           ///< the LM head inside unit 0 (0: tied to the token embedding)
    int num_units() const { return static_cast<int>(unit_numel.size()); }
    const ParamSpec& find(const std::string& name) const;
};

/// The layout of cfg.arch's family (each family's file lists its tensors: gpt2_block.cpp,
/// llama_block.cpp), or of one rank's slices of it under tensor parallelism: column-parallel
/// matrices (q/k/v, c_fc, gate/up, the embedding and LM head) split by rows, row-parallel
/// ones (the attention and MLP output projections) by columns, the rest whole.
ModelLayout make_model_layout(const ModelConfig& cfg, TensorSplit split = {});

/// Per unit, where the part of it that trains starts: 0 when all of it trains (no frozen
/// base); under LoRA the offset of the unit's first adapter (they are its tail), or its
/// numel when it holds none. A layout whose trained tensors are not a tail of their unit
/// gets 0 there (all of the unit keeps state: correct, only larger).
std::vector<size_t> trainable_begins(const ModelLayout& layout);

/// A run of elements of a split layout's unit that are consecutive in the unsplit layout's
/// unit too: elements [local, local + length) of the one are [whole, whole + length) of the
/// other.
struct SliceRun {
    size_t local = 0;
    size_t whole = 0;
    size_t length = 0;
};
/// The runs of unit `unit` of `part` (a split layout, or the unsplit one) in `whole` (the
/// unsplit layout of the same model), in the order of the part's elements: one per tensor
/// when whole, one per block of rows (row slices), one per row (column slices). The
/// alignment gaps between tensors belong to no run.
std::vector<SliceRun> slice_runs(const ModelLayout& part, const ModelLayout& whole, int unit);
/// The parts of `runs` inside [begin, end) of their local coordinates (`local_side`) or of
/// their whole ones, each cut on both sides alike.
std::vector<SliceRun> runs_within(const std::vector<SliceRun>& runs, size_t begin, size_t end, bool local_side);

/// `count` runs of `length` elements at fixed steps on both sides, as a column slice's rows:
/// the i-th is [local + i * local_pitch, + length) of the part, [whole + i * whole_pitch,
/// + length) of the whole. One strided copy moves them all (a device copies one run per call
/// otherwise).
struct StridedRuns {
    size_t local = 0;
    size_t whole = 0;
    size_t length = 0;
    size_t count = 1;
    size_t local_pitch = 0;
    size_t whole_pitch = 0;
};
/// `runs` in order, each consecutive stretch of equal lengths at equal steps (both at least
/// the length, so no two runs overlap) merged into one StridedRuns.
std::vector<StridedRuns> strided_runs(const std::vector<SliceRun>& runs);

/// A pipeline stage's part of `whole`: every unit keeps its id, and those not in `held` are
/// empty (no tensors, no elements), so a state made from it allocates, updates and saves the
/// stage's units only (`stage.mirrored` ones are saved by another stage).
ModelLayout stage_layout(const ModelLayout& whole, const std::vector<int>& held, PipelineStage stage);
/// The layout `part` is a stage of: the model's at part's tensor split (part itself when it
/// is no pipeline stage).
ModelLayout all_stages(const ModelLayout& part);

/// Fills `out` (unit_numel[unit] floats) with the initial values of that unit: GPT-2 init
/// (std 0.02, residual projections 0.02/sqrt(2L), LayerNorm 1/0, padded vocab rows 0; Llama:
/// std 0.02 everywhere, RMSNorm 1, as Hugging Face initializes it) from
/// a counter-based generator keyed by each element's global index (in the unsplit tensor),
/// so every rank, every strategy and every tensor split computes identical weights.
void init_unit(const ModelLayout& layout, int unit, uint64_t seed, float* out);
/// Which tensors init_unit_range draws: all, or LoRA's adapters only (the rest 0: a base that
/// model.init_from or a checkpoint overwrites right after, so no draw per element is spent on it).
enum class InitTensors { kAll, kAdaptersOnly };
/// Elements [begin, end) of that unit (end <= unit_numel[unit]) into out[0, end - begin):
/// the same values init_unit gives them, so a unit can be initialized in pieces.
void init_unit_range(const ModelLayout& layout, int unit, uint64_t seed, size_t begin, size_t end, float* out,
                     InitTensors which = InitTensors::kAll);

/// Where the model gets gathered weights and puts gradients. Implemented by the parallel
/// strategy. Calls come in a fixed order per micro-step (see Transformer::forward/backward).
class UnitStore {
  public:
    virtual ~UnitStore() = default;
    /// Full (gathered) parameters of `unit`, valid until release(unit).
    virtual const float* acquire(int unit) = 0;
    /// The parameters of an acquired unit as stored, in the working dtype: what acquire()
    /// widened in a 16-bit run (the same memory for fp32). Valid until release(unit).
    /// Default: none (data null), and the model multiplies by acquire()'s fp32 view.
    virtual ConstActPtr acquired_storage(int unit) {
        (void)unit;
        return {};
    }
    /// The dtype acquired_storage() hands out (fp32 when the store has no 16-bit copy).
    virtual DType stored_dtype() const { return DType::kF32; }
    /// acquire() for a caller whose products read the unit's matrices as stored
    /// (acquired_storage): the fp32 view need hold only the unit's vectors (its 1-D
    /// tensors: norm weights, biases) and a partly frozen unit's trained tensors (LoRA's
    /// adapters, which fp32 activations multiply in fp32), so a 16-bit store widens just
    /// those; the view's other matrix elements are then unspecified. A later acquire() of
    /// the still acquired unit widens the rest. Default: acquire().
    virtual const float* acquire_vectors(int unit) { return acquire(unit); }
    virtual void release(int unit) = 0;
    /// Hint: `unit` will be acquired next; a sharded store may start gathering it.
    virtual void prefetch(int unit) { (void)unit; }
    /// Full-size gradient buffer of `unit`; backward accumulates into it.
    virtual float* grads(int unit) = 0;
    /// Backward has finished adding this micro-step's gradient of `unit`.
    virtual void grads_done(int unit) { (void)unit; }
    /// Asked once per unit per micro-step, after grads(unit): true when the store left that
    /// buffer unzeroed (for this optimizer step, or a gradient scratch just taken) and the
    /// model must zero each gradient tensor right before its first accumulation, or have its
    /// first writer assign it (GradWrite::kAssign): no memset of every gradient at step start
    /// read back from DRAM.
    virtual bool grads_need_zero(int unit) {
        (void)unit;
        return false;
    }
};

}  // namespace zt
