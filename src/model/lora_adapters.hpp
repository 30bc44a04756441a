// LoRA (model.lora): which product weights lora.targets names, matched as PEFT matches
// target_modules, and the adapters as the products apply them (LoraAdapters). Private to
// model/.
//
// A product y = x W^T (+ b) with an adapter becomes y += (alpha / r) x A^T B^T, A (r, in), B
// (out, r): two thin products, whose scaled output is added to the adapted weight's output
// features of the product (a packed product such as Llama's q|k|v adapts some of them).
// Not here: where the adapters' tensors lie (LayoutBuilder::add_lora_adapters) and the
// products' own math (parallel_products.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/model/transformer.hpp"

namespace zt {

/// lora.targets' names: the family's PEFT default for "default".
std::vector<std::string> lora_target_names(const ModelConfig& m);
/// What is wrong with lora.targets for `layout` (the family's tensors, without adapters),
/// worded as what was expected; empty when every name matches some product of every block.
std::string lora_targets_problem(const ModelLayout& layout);
/// For each tensor of `layout` (without adapters): whether it is a product weight
/// lora.targets names. InputError when lora_targets_problem is not empty.
std::vector<bool> lora_targeted(const ModelLayout& layout);

/// One adapter as its product applies it.
struct ProductAdapter {
    size_t a_offset = 0;  ///< A (rank, in) in the unit
    size_t b_offset = 0;  ///< B (out_width, rank) in the unit
    int rank = 0;
    int out_begin = 0;    ///< the first of the product's output features it adds to
    int out_width = 0;    ///< how many (the adapted weight's rows)
    int id = 0;           ///< its place among the block's adapters (its dropout masks' key)
};

/// The adapters of a model's blocks (the same in every block, at the same offsets) and the
/// scratch their products share, lent by the driver: u and du (rows, rank), v (rows, the
/// widest adapted weight's rows), and with lora.dropout `dropped` (rows, the widest adapted
/// weight's columns), in the activation dtype. Default: none.
class LoraAdapters {
  public:
    LoraAdapters() = default;
    explicit LoraAdapters(const ModelLayout& layout);
    /// Whether the base is frozen (any adapter): its products compute no weight gradients.
    bool frozen_base() const { return m_on; }
    float scale() const { return m_scale; }
    /// The adapters of the product whose weight (out, in) starts at `w_offset` of a block's
    /// unit, in output order.
    std::vector<ProductAdapter> of_product(size_t w_offset, int in, int out) const;
    /// The scratch's elements for batches of up to `rows` rows (0 without adapters).
    static size_t scratch_elements(const ModelLayout& layout, size_t rows);
    /// The largest rank, the most rows and the most columns of an adapted weight (the
    /// scratch's widths).
    int max_rank() const;
    int widest() const;
    int widest_input() const;

    /// lora.dropout, and what its masks are drawn for: the passes' rows (`T` positions each)
    /// and the block they run (the model's index). dropping(): whether a pass drops anything.
    float dropout() const { return m_dropout; }
    void set_rows(const DropoutRows& rows, int T) {
        m_rows = rows;
        m_T = T;
    }
    void set_block(int block) { m_block = block; }
    bool dropping() const { return m_dropout > 0.f && m_rows.step >= 0; }
    /// The mask of adapter `a`'s input in the current block, over input features from
    /// `feature_offset` (a row-parallel product's slice).
    DropoutMask mask(const ProductAdapter& a, int feature_offset) const;
    struct Scratch {
        ActPtr u;
        ActPtr du;
        ActPtr v;
        ActPtr dropped;
    };
    void set_scratch(Scratch s) { m_scratch = s; }
    const Scratch& scratch() const { return m_scratch; }

    /// Every adapted weight of a block: where it lies in the unit, its input features and
    /// its adapter (out_begin 0).
    struct Entry {
        size_t w_offset;  ///< the adapted weight's offset in the unit
        size_t in;
        ProductAdapter adapter;
    };
    const std::vector<Entry>& entries() const { return m_entries; }
    /// Writes into `merged` (a block unit's elements, backend memory) the unit `w` with every
    /// adapter merged into its weight, W + scale B A; `scaled_b` holds widest() x max_rank()
    /// floats of scratch. For inference paths that run a unit's weights as they are.
    void merge_into(Backend& be, float* merged, const float* w, size_t unit_numel, float* scaled_b) const;

  private:
    bool m_on = false;
    float m_scale = 0.f;
    float m_dropout = 0.f;
    DropoutRows m_rows;
    int m_T = 1;
    int m_block = 0;
    std::vector<Entry> m_entries;
    Scratch m_scratch;
};

}  // namespace zt
