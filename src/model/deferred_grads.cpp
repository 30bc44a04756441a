// Zero-bubble's deferred weight gradients: what a backward keeps and the weight pass adds
// (deferred_grads.hpp).
#include "deferred_grads.hpp"

#include "ztrain/core/error.hpp"

namespace zt {

DeferredWeightGrads::~DeferredWeightGrads() {
    for (const NormPiece& p : m_pieces) {
        if (p.data != nullptr && m_pieces_backend != nullptr) m_pieces_backend->free(p.data);
    }
}

float* DeferredWeightGrads::norm_piece(size_t k, size_t n, Backend& be) {
    if (k == m_pieces.size()) m_pieces.push_back(NormPiece{});
    NormPiece& p = m_pieces[k];
    if (p.n < n) {
        if (p.data != nullptr) be.free(p.data);
        p.data = be.alloc_floats(n);
        p.n = n;
        m_pieces_backend = &be;
    }
    return p.data;
}

float* DeferredWeightGrads::keep_grad(Backend& be, size_t offset, size_t n, bool partial) {
    float* piece = norm_piece(m_norms.size(), n, be);
    be.zero(piece, n);
    m_norms.push_back(DeferredNorm{m_block, offset, n, partial});
    return piece;
}

void DeferredWeightGrads::run(Backend& be, int l, UnitGrads dw) {
    const bool owed = (m_next_product < m_products.size() && m_products[m_next_product].block == l) ||
                      (m_next_norm < m_norms.size() && m_norms[m_next_norm].block == l);
    // A unit that owes nothing (LoRA's frozen final norm) may have no gradient buffer.
    if (!owed) return;
    ZT_REQUIRE(dw.base != nullptr, "run_deferred: no gradient buffer for block ", l);
    for (; m_next_product < m_products.size() && m_products[m_next_product].block == l; ++m_next_product) {
        const DeferredProduct& d = m_products[m_next_product];
        d.product->weight_grads(be, dw, d.dout, d.inp, d.w_dtype, d.N);
    }
    for (; m_next_norm < m_norms.size() && m_norms[m_next_norm].block == l; ++m_next_norm) {
        const DeferredNorm& d = m_norms[m_next_norm];
        float* piece = m_pieces[m_next_norm].data;
        // Under sequence parallelism each rank's piece covers its rows (a head norm's, its
        // heads): summed over the group.
        if (d.partial) m_parallel.sum_floats(piece, d.n);
        float* g = dw.base + d.offset;
        zero_grad_if(be, dw.zero, g, d.n);
        be.accumulate(g, DType::kF32, piece, d.n);
    }
    if (m_next_product == m_products.size() && m_next_norm == m_norms.size()) {
        m_products.clear();
        m_norms.clear();
        m_next_product = m_next_norm = 0;
    }
}

}  // namespace zt
