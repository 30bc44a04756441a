// LoRA's targets (PEFT's target_modules matching over the family's Hugging Face module paths)
// and the adapters of a layout's blocks as the products apply them (lora_adapters.hpp).
#include "lora_adapters.hpp"

#include <algorithm>
#include <map>

#include "ztrain/core/comma_list.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"

namespace zt {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const std::string kWeight = ".weight";

/// Whether tensor p is a block's product weight (a matrix of units 1..n_layer).
bool product_weight(const ModelLayout& layout, const ParamSpec& p) {
    return p.unit >= 1 && p.unit <= layout.model.n_layer && p.slice.global_shape.size() == 2 &&
           ends_with(p.name, kWeight);
}

/// The module path inside its block ("attn.c_attn" of "h.3.attn.c_attn.weight"): what follows
/// the block's index.
std::string block_module(const ParamSpec& p) {
    const std::string index = str(".", p.unit - 1, ".");
    const size_t at = p.name.find(index);
    const std::string module = p.name.substr(0, p.name.size() - kWeight.size());
    return at == std::string::npos ? module : module.substr(at + index.size());
}

/// PEFT's match of a target_modules name: the module's whole path, or its end after a dot.
bool peft_match(const std::string& path, const std::string& target) {
    return path == target || ends_with(path, "." + target);
}

/// The family's module names of a block, as PEFT's examples write them ("c_attn, c_proj").
std::string module_names(const ModelLayout& layout) {
    std::vector<std::string> names;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != 1 || !product_weight(layout, p)) continue;
        const std::string m = block_module(p);
        const std::string leaf = m.substr(m.rfind('.') + 1);
        if (std::find(names.begin(), names.end(), leaf) == names.end()) names.push_back(leaf);
    }
    std::string out;
    for (const std::string& n : names) out += str(out.empty() ? "" : ",", n);
    return out;
}

}  // namespace

std::vector<std::string> lora_target_names(const ModelConfig& m) {
    const std::string text = m.lora.targets == "default" ? model_family(m).lora_default_targets() : m.lora.targets;
    return text.empty() ? std::vector<std::string>{} : split_comma_list(text);
}

std::string lora_targets_problem(const ModelLayout& layout) {
    const std::string prefix = model_family(layout.model).hf_naming().prefix;
    const std::string family = str(layout.model.arch.name(), "'s module names: ", module_names(layout),
                                   " (a name matches every module whose path ends in it, as PEFT's target_modules)");
    // Blocks adapting each module of a block: every block or none.
    std::map<std::string, int> blocks;
    const std::vector<std::string> targets = lora_target_names(layout.model);
    for (const std::string& target : targets) {
        bool found = false;
        for (const ParamSpec& p : layout.params) {
            if (!product_weight(layout, p)) continue;
            const std::string path = prefix + p.name.substr(0, p.name.size() - kWeight.size());
            if (peft_match(path, target)) found = true;
        }
        if (!found) return str(family, "; '", target, "' matches none");
    }
    for (const ParamSpec& p : layout.params) {
        if (!product_weight(layout, p)) continue;
        const std::string path = prefix + p.name.substr(0, p.name.size() - kWeight.size());
        const bool hit =
            std::any_of(targets.begin(), targets.end(), [&](const std::string& t) { return peft_match(path, t); });
        blocks[block_module(p)] += hit ? 1 : 0;
    }
    for (const auto& [module, count] : blocks) {
        if (count != 0 && count != layout.model.n_layer) {
            return str("names of modules of every block (", module, " is named in ", count, " of the ",
                       layout.model.n_layer, " blocks); ", family);
        }
    }
    return {};
}

std::vector<bool> lora_targeted(const ModelLayout& layout) {
    const std::string problem = lora_targets_problem(layout);
    if (!problem.empty()) throw InputError(str("lora.targets = '", layout.model.lora.targets, "': expected ", problem));
    const std::string prefix = model_family(layout.model).hf_naming().prefix;
    const std::vector<std::string> targets = lora_target_names(layout.model);
    std::vector<bool> out;
    for (const ParamSpec& p : layout.params) {
        const std::string path = prefix + p.name.substr(0, p.name.size() - std::min(p.name.size(), kWeight.size()));
        const bool named =
            std::any_of(targets.begin(), targets.end(), [&](const std::string& t) { return peft_match(path, t); });
        out.push_back(product_weight(layout, p) && named);
    }
    return out;
}

LoraAdapters::LoraAdapters(const ModelLayout& layout) {
    if (!layout.model.lora.on() || layout.model.n_layer < 1) return;
    m_on = true;
    m_scale = static_cast<float>(layout.model.lora.scale());
    m_dropout = static_cast<float>(layout.model.lora.dropout);
    for (const ParamSpec& a : layout.params) {
        if (a.unit != 1 || !ends_with(a.name, ".lora_A.weight")) continue;
        const std::string module = a.name.substr(0, a.name.size() - std::string(".lora_A.weight").size());
        const ParamSpec& w = layout.find(module + kWeight);
        const ParamSpec& b = layout.find(module + ".lora_B.weight");
        const ProductAdapter adapter{a.offset, b.offset, static_cast<int>(a.shape[0]), 0, static_cast<int>(w.shape[0]),
                                     static_cast<int>(m_entries.size())};
        m_entries.push_back({w.offset, w.shape[1], adapter});
    }
}

std::vector<ProductAdapter> LoraAdapters::of_product(size_t w_offset, int in, int out) const {
    std::vector<ProductAdapter> found;
    const size_t end = w_offset + static_cast<size_t>(in) * static_cast<size_t>(out);
    for (const Entry& e : m_entries) {
        if (e.w_offset < w_offset || e.w_offset >= end) continue;
        ZT_REQUIRE(e.in == static_cast<size_t>(in), "LoRA adapter of a ", e.in, "-column weight on a product of ", in,
                   " input features");
        ProductAdapter a = e.adapter;
        a.out_begin = static_cast<int>((e.w_offset - w_offset) / e.in);
        found.push_back(a);
    }
    return found;
}

void LoraAdapters::merge_into(Backend& be, float* merged, const float* w, size_t unit_numel, float* scaled_b) const {
    be.copy(merged, w, unit_numel);
    for (const Entry& e : m_entries) {
        const ProductAdapter& a = e.adapter;
        const size_t b_numel = static_cast<size_t>(a.out_width) * static_cast<size_t>(a.rank);
        // scale B, then W (out, in) += (scale B) (out, r) @ A (r, in): a product's input gradient.
        be.zero(scaled_b, b_numel);
        be.scale_add_columns(ActPtr(scaled_b), a.rank, 0, ConstActPtr(w + a.b_offset), a.rank, 0, a.rank,
                             a.out_width, m_scale);
        be.matmul_backward(ActPtr(merged + e.w_offset), nullptr, nullptr, ConstActPtr(scaled_b), ConstActPtr{},
                           ConstActPtr(w + a.a_offset), a.out_width, static_cast<int>(e.in), a.rank);
    }
}

int LoraAdapters::max_rank() const {
    int r = 0;
    for (const Entry& e : m_entries) r = std::max(r, e.adapter.rank);
    return r;
}

int LoraAdapters::widest() const {
    int w = 0;
    for (const Entry& e : m_entries) w = std::max(w, e.adapter.out_width);
    return w;
}

int LoraAdapters::widest_input() const {
    size_t w = 0;
    for (const Entry& e : m_entries) w = std::max(w, e.in);
    return static_cast<int>(w);
}

DropoutMask LoraAdapters::mask(const ProductAdapter& a, int feature_offset) const {
    return DropoutMask{dropout_key(m_rows.seed, static_cast<uint64_t>(m_rows.step), m_block, a.id),
                       m_rows.first_sample,
                       m_T,
                       feature_offset,
                       m_dropout,
                       m_rows.sample_of,
                       m_rows.position_of};
}

size_t LoraAdapters::scratch_elements(const ModelLayout& layout, size_t rows) {
    if (!layout.model.lora.on()) return 0;
    size_t rank = 0;
    size_t widest = 0;
    size_t widest_in = 0;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != 1) continue;
        if (ends_with(p.name, ".lora_A.weight")) rank = std::max(rank, p.shape[0]);
        if (ends_with(p.name, ".lora_A.weight")) widest_in = std::max(widest_in, p.shape[1]);
        if (ends_with(p.name, ".lora_B.weight")) widest = std::max(widest, p.shape[0]);
    }
    return rows * (2 * rank + widest + (layout.model.lora.dropout > 0 ? widest_in : 0));
}

}  // namespace zt
