// Zero-bubble pipelines' split backward (Qi et al.): while deferral is on, a block's
// backward computes the input gradients only and keeps here what it owes the unit's
// gradient (each product's weight and bias gradients, each norm's parameter gradients);
// the weight pass (run) adds them later, block by block, in the backward's order. Private
// to model/.
//
// Not here: which unit's gradient buffer the weight pass adds into and when (the driver,
// Transformer::backward_weights), the products' arithmetic (parallel_products.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "parallel_products.hpp"

namespace zt {

/// What one backward owes its units' gradients under deferral, and its buffers for the norms'
/// parameter gradients (fp32, kept from one backward to the next: allocated once, grown if
/// needed, freed with it).
class DeferredWeightGrads {
  public:
    explicit DeferredWeightGrads(const TensorParallel& parallel) : m_parallel(parallel) {}
    ~DeferredWeightGrads();
    DeferredWeightGrads(const DeferredWeightGrads&) = delete;
    DeferredWeightGrads& operator=(const DeferredWeightGrads&) = delete;

    /// From now on the backward keeps its weight gradients here (on) or adds them (off).
    void set_on(bool on) { m_on = on; }
    bool on() const { return m_on; }
    /// What follows is block l's backward (kFinalNorm: the final norm's), whose gradients
    /// are owed to that unit.
    void begin_block(int l) { m_block = l; }
    static constexpr int kFinalNorm = -1;

    /// A product's weight gradients, owed: computed in the weight pass from dout (kept by
    /// the caller until then; this rank's rows where the product reads rows) and inp.
    void keep_product(const ParallelLinear& product, ConstActPtr dout, ConstActPtr inp, DType w_dtype, int N) {
        m_products.push_back(DeferredProduct{m_block, &product, dout, inp, w_dtype, N});
    }
    /// A parameter gradient the backward computes itself (a norm's; a LoRA adapter's, whose
    /// products need weights the weight pass may no longer hold), n floats at `offset` of
    /// the unit's, owed: the zeroed piece the backward computes it into; `partial`: a partial
    /// sum over the group (the weight pass sums it first).
    float* keep_grad(Backend& be, size_t offset, size_t n, bool partial);

    /// Adds what the backward owes block l's unit (kFinalNorm: the final norm's) into its
    /// gradient buffer `dw` (zeroed first where dw.zero), in the order the backward left it.
    /// Blocks come in the backward's order; the last one's call leaves nothing owed.
    void run(Backend& be, int l, UnitGrads dw);
    /// Whether a backward's deferred gradients are still owed.
    bool owes() const { return !m_products.empty() || !m_norms.empty(); }

  private:
    struct DeferredProduct {
        int block;  ///< whose unit (begin_block)
        const ParallelLinear* product;
        ConstActPtr dout;  ///< kept
        ConstActPtr inp;
        DType w_dtype;  ///< the weights' (not read for weight gradients, but picking the kernel)
        int N;
    };
    struct DeferredNorm {
        int block;
        size_t offset;  ///< the norm parameters' gradient in the unit's
        size_t n;       ///< floats, in the piece of the same index (m_pieces)
        bool partial;   ///< summed over the group before it is added
    };
    /// A norm's deferred parameter gradient.
    struct NormPiece {
        float* data = nullptr;
        size_t n = 0;
    };
    /// Piece k, at least n floats.
    float* norm_piece(size_t k, size_t n, Backend& be);

    const TensorParallel& m_parallel;
    bool m_on = false;
    int m_block = -1;
    std::vector<DeferredProduct> m_products;
    std::vector<DeferredNorm> m_norms;
    size_t m_next_product = 0;  ///< run's place in m_products
    size_t m_next_norm = 0;     ///< and in m_norms
    std::vector<NormPiece> m_pieces;  ///< one per norm of a backward
    Backend* m_pieces_backend = nullptr;
};

}  // namespace zt
