// The layout machinery every family's manifest is built with (LayoutBuilder), and the
// counter-based initialization of any layout.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/model_layout.hpp"
#include "model_family.hpp"

namespace zt {

namespace {
constexpr size_t kTensorAlign = 16;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

void LayoutBuilder::add(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                        float init_value, size_t init_numel) {
    add_at(name, std::move(shape), decay, init_std, init_value, init_numel, kTensorAlign);
}

void LayoutBuilder::add_packed(const std::string& name, std::vector<size_t> shape, bool decay, float init_std) {
    add_at(name, std::move(shape), decay, init_std, 0.f, SIZE_MAX, 1);
}

void LayoutBuilder::add_at(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                           float init_value, size_t init_numel, size_t align) {
    ParamSpec p;
    p.name = name;
    p.unit = static_cast<int>(m_layout.unit_numel.size()) - 1;
    p.shape = std::move(shape);
    p.numel = 1;
    for (size_t d : p.shape) p.numel *= d;
    size_t& unit_size = m_layout.unit_numel.back();
    p.offset = align_up(unit_size, align);
    unit_size = p.offset + p.numel;
    p.decay = decay;
    p.init_std = init_std;
    p.init_value = init_value;
    p.init_numel = init_numel < p.numel ? init_numel : p.numel;
    p.global_index = m_next_global;
    m_next_global += p.numel;
    m_layout.params.push_back(std::move(p));
}

void LayoutBuilder::finish() {
    m_layout.total_numel = 0;
    for (size_t n : m_layout.unit_numel) m_layout.total_numel += n;
}

const ParamSpec& ModelLayout::find(const std::string& name) const {
    for (const ParamSpec& p : params) {
        if (p.name == name) return p;
    }
    throw Error(str("no parameter named '", name, "' in the model layout"));
}

ModelLayout make_model_layout(const ModelConfig& cfg) { return family_traits(cfg).layout(cfg); }

void init_unit(const ModelLayout& layout, int unit, uint64_t seed, float* out) {
    ZT_REQUIRE(unit >= 0 && unit < layout.num_units(), "unit ", unit);
    init_unit_range(layout, unit, seed, 0, layout.unit_numel[static_cast<size_t>(unit)], out);
}

void init_unit_range(const ModelLayout& layout, int unit, uint64_t seed, size_t begin, size_t end, float* out) {
    ZT_REQUIRE(unit >= 0 && unit < layout.num_units(), "unit ", unit);
    const size_t n = layout.unit_numel[static_cast<size_t>(unit)];
    ZT_REQUIRE(begin <= end && end <= n, "init range [", begin, ", ", end, ") of unit ", unit, " (", n, " elements)");
    for (size_t i = 0; i < end - begin; ++i) out[i] = 0.f;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != unit) continue;
        // The part of this tensor inside [begin, end), in tensor-relative indices.
        const size_t lo = std::max(p.offset, begin) - p.offset;
        const size_t hi = std::min(p.offset + p.numel, end);
        if (hi <= p.offset + lo) continue;
        const size_t count = hi - (p.offset + lo);
        float* dst = out + (p.offset + lo - begin);
        if (p.init_std == 0.f) {
            for (size_t i = 0; i < count; ++i) dst[i] = p.init_value;
            continue;
        }
        // Padded vocabulary rows of the token embedding stay zero: they are never an input
        // and never predicted, so they must not disturb the tied LM head. Every element's
        // value depends only on its global index, so any range gives the same values.
        const size_t live = std::min(p.init_numel, lo + count);
        const long long first = static_cast<long long>(lo);
        const long long last = static_cast<long long>(std::max(live, lo));
        #pragma omp parallel for schedule(static)
        for (long long i = first; i < last; ++i) {
            dst[i - first] = static_cast<float>(
                p.init_std * random_normal(seed, static_cast<uint64_t>(RandomStream::kInit),
                                           p.global_index + static_cast<uint64_t>(i)));
        }
    }
}

}  // namespace zt
