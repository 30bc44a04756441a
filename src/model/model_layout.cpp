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

/// init_unit_range's values for elements [lo, lo + count) of a tensor: each keyed by its
/// offset in the unsplit tensor (itself when whole), so every split holds the unsplit
/// model's values; elements past init_numel (padded vocabulary rows) are 0.
void init_tensor_range(const ParamSpec& p, uint64_t seed, size_t lo, size_t count, float* dst) {
    const long long n = static_cast<long long>(count);
    #pragma omp parallel for schedule(static)
    for (long long i = 0; i < n; ++i) {
        const size_t g = p.slice.global_offset(lo + static_cast<size_t>(i), p.shape);
        const uint64_t stream = static_cast<uint64_t>(RandomStream::kInit);
        if (p.init_bound > 0.f) {
            // Counters past every normal draw's (2 per element of the tensors before it).
            const double u = random_uniform(seed, stream, 2 * (p.global_index + g));
            dst[i] = static_cast<float>(p.init_bound * (2.0 * u - 1.0));
            continue;
        }
        dst[i] = g < p.init_numel ? static_cast<float>(p.init_std * random_normal(seed, stream, p.global_index + g))
                                  : 0.f;
    }
}
}  // namespace

size_t TensorSlice::global_offset(size_t i, const std::vector<size_t>& local_shape) const {
    if (!split()) return i;
    size_t numel = 1;
    for (size_t d : local_shape) numel *= d;
    const size_t rows = local_shape[0];
    const size_t inner = numel / rows;
    const size_t r = i / inner;
    const size_t c = i % inner;
    if (dim == 0) {
        const size_t block = rows / static_cast<size_t>(blocks);  // this slice's rows per block
        const size_t global_row = r / block * block * static_cast<size_t>(parts) +
                                  static_cast<size_t>(part) * block + r % block;
        return global_row * inner + c;
    }
    // Columns of a matrix: row r of the slice is columns [part * inner, ...) of row r.
    return r * inner * static_cast<size_t>(parts) + static_cast<size_t>(part) * inner + c;
}

void LayoutBuilder::add(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                        float init_value, size_t init_numel, SplitAlong split) {
    add_at(last_unit(), name, std::move(shape), decay, init_std, init_value, init_numel, kTensorAlign, split);
}

void LayoutBuilder::add_packed(const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                               SplitAlong split) {
    add_at(last_unit(), name, std::move(shape), decay, init_std, 0.f, SIZE_MAX, 1, split);
}

void LayoutBuilder::add_at(int unit, const std::string& name, std::vector<size_t> shape, bool decay, float init_std,
                           float init_value, size_t init_numel, size_t align, SplitAlong split) {
    ParamSpec p;
    p.name = name;
    p.unit = unit;
    size_t global_numel = 1;
    for (size_t d : shape) global_numel *= d;
    const TensorSplit& ts = m_layout.split;
    p.slice.global_shape = shape;
    const int parts = split.max_parts > 0 && split.max_parts < ts.size ? split.max_parts : ts.size;
    if (split.dim >= 0 && parts > 1) {
        const size_t dim = static_cast<size_t>(split.dim);
        const size_t cut = static_cast<size_t>(parts) * static_cast<size_t>(split.blocks);
        ZT_REQUIRE(dim < shape.size() && shape[dim] % cut == 0 && ts.size % parts == 0, "tensor ", name,
                   ": dimension ", dim, " cannot be cut into ", cut, " equal slices for ", ts.size, " ranks");
        ZT_REQUIRE(split.dim == 0 || split.blocks == 1, "tensor ", name, ": blocks along rows only");
        const int copies = ts.size / parts;
        p.slice = TensorSlice{split.dim, parts, ts.rank / copies, split.blocks, copies, shape};
        shape[dim] /= static_cast<size_t>(parts);
    }
    p.shape = std::move(shape);
    p.numel = 1;
    for (size_t d : p.shape) p.numel *= d;
    size_t& unit_size = m_layout.unit_numel[static_cast<size_t>(unit)];
    p.offset = align_up(unit_size, align);
    unit_size = p.offset + p.numel;
    p.decay = decay;
    p.init_std = init_std;
    p.init_value = init_value;
    p.init_numel = init_numel < global_numel ? init_numel : global_numel;
    p.global_index = m_next_global;
    m_next_global += global_numel;
    m_layout.params.push_back(std::move(p));
}

void LayoutBuilder::add_lora_adapters() {
    const std::vector<bool> targeted = lora_targeted(m_layout);
    std::vector<ParamSpec> base;
    base.swap(m_layout.params);
    const size_t r = static_cast<size_t>(m_layout.model.lora.rank);
    // Each unit's tensors, then its adapters: the manifest stays grouped by unit.
    for (size_t i = 0; i < base.size(); ++i) {
        base[i].trainable = false;
        m_layout.params.push_back(base[i]);
        const bool unit_ends = i + 1 == base.size() || base[i + 1].unit != base[i].unit;
        if (!unit_ends) continue;
        for (size_t j = 0; j < base.size(); ++j) {
            const ParamSpec& w = base[j];
            if (w.unit != base[i].unit || !targeted[j]) continue;
            const size_t out = w.slice.global_shape[0];
            const size_t in = w.slice.global_shape[1];
            // A reads the product's input, B writes its output: B is cut as the weight's rows
            // are (a column-parallel product), A as its columns (a row-parallel one).
            const SplitAlong a_split = w.slice.dim == 1 ? SplitAlong{1, 1, w.slice.parts} : kWhole;
            const SplitAlong b_split = w.slice.dim == 0 ? SplitAlong{0, w.slice.blocks, w.slice.parts} : kWhole;
            const std::string module = w.name.substr(0, w.name.size() - std::string(".weight").size());
            add_at(w.unit, module + ".lora_A.weight", {r, in}, true, 0.f, 0.f, SIZE_MAX, kTensorAlign, a_split);
            m_layout.params.back().init_bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)));
            m_layout.params.back().adapter = true;
            add_at(w.unit, module + ".lora_B.weight", {out, r}, true, 0.f, 0.f, SIZE_MAX, kTensorAlign, b_split);
            m_layout.params.back().adapter = true;
        }
    }
}

void LayoutBuilder::finish() {
    if (m_layout.model.lora.on()) add_lora_adapters();
    m_layout.total_numel = 0;
    for (size_t n : m_layout.unit_numel) m_layout.total_numel += n;
}

const ParamSpec& ModelLayout::find(const std::string& name) const {
    for (const ParamSpec& p : params) {
        if (p.name == name) return p;
    }
    throw Error(str("no parameter named '", name, "' in the model layout"));
}

ModelLayout make_model_layout(const ModelConfig& cfg, TensorSplit split) {
    ZT_REQUIRE(split.size >= 1 && split.rank >= 0 && split.rank < split.size, "tensor split rank ", split.rank,
               " of ", split.size);
    return family_traits(cfg).layout(cfg, split);
}

bool PipelineStage::mirrors(int unit) const {
    return std::find(mirrored.begin(), mirrored.end(), unit) != mirrored.end();
}

ModelLayout all_stages(const ModelLayout& part) {
    return part.stage.size > 1 ? make_model_layout(part.model, part.split) : part;
}

ModelLayout stage_layout(const ModelLayout& whole, const std::vector<int>& held, PipelineStage stage) {
    std::vector<bool> keep(whole.unit_numel.size(), false);
    for (int u : held) {
        ZT_REQUIRE(u >= 0 && u < whole.num_units(), "stage_layout: unit ", u, " of ", whole.num_units());
        keep[static_cast<size_t>(u)] = true;
    }
    ModelLayout out = whole;
    out.params.clear();
    for (const ParamSpec& p : whole.params) {
        if (keep[static_cast<size_t>(p.unit)]) out.params.push_back(p);
    }
    out.total_numel = 0;
    for (size_t u = 0; u < keep.size(); ++u) {
        if (!keep[u]) out.unit_numel[u] = 0;
        out.total_numel += out.unit_numel[u];
    }
    for (int u : stage.mirrored) {
        ZT_REQUIRE(u >= 0 && u < whole.num_units() && keep[static_cast<size_t>(u)], "stage_layout: mirrors unit ", u,
                   ", which it does not hold");
    }
    out.stage = std::move(stage);
    return out;
}

std::vector<SliceRun> slice_runs(const ModelLayout& part, const ModelLayout& whole, int unit) {
    ZT_REQUIRE(part.params.size() == whole.params.size(), "slice_runs: layouts of different models");
    std::vector<SliceRun> runs;
    for (size_t i = 0; i < part.params.size(); ++i) {
        const ParamSpec& p = part.params[i];
        if (p.unit != unit) continue;
        const ParamSpec& w = whole.params[i];
        ZT_REQUIRE(p.name == w.name && w.unit == unit, "slice_runs: ", p.name, " is not ", w.name);
        const TensorSlice& s = p.slice;
        if (!s.split()) {
            runs.push_back({p.offset, w.offset, p.numel});
            continue;
        }
        // (A slice held by several ranks maps the same way on each.)
        const size_t rows = p.shape[0];
        const size_t inner = p.numel / rows;
        const size_t parts = static_cast<size_t>(s.parts);
        const size_t mine = static_cast<size_t>(s.part);
        if (s.dim == 0) {
            const size_t band = rows / static_cast<size_t>(s.blocks);  // rows of one block's slice
            for (size_t b = 0; b < static_cast<size_t>(s.blocks); ++b) {
                runs.push_back({p.offset + b * band * inner, w.offset + (b * band * parts + mine * band) * inner,
                                band * inner});
            }
        } else {
            for (size_t r = 0; r < rows; ++r) {
                runs.push_back({p.offset + r * inner, w.offset + (r * parts + mine) * inner, inner});
            }
        }
    }
    return runs;
}

std::vector<StridedRuns> strided_runs(const std::vector<SliceRun>& runs) {
    std::vector<StridedRuns> out;
    for (const SliceRun& r : runs) {
        if (!out.empty()) {
            StridedRuns& g = out.back();
            const size_t next_local = g.local + g.count * g.local_pitch;
            const size_t next_whole = g.whole + g.count * g.whole_pitch;
            if (r.length == g.length && g.count > 1 && r.local == next_local && r.whole == next_whole) {
                ++g.count;
                continue;
            }
            // A second run sets the steps, if they keep the runs apart.
            if (r.length == g.length && g.count == 1 && r.local >= g.local + g.length &&
                r.whole >= g.whole + g.length) {
                g.local_pitch = r.local - g.local;
                g.whole_pitch = r.whole - g.whole;
                g.count = 2;
                continue;
            }
        }
        out.push_back({r.local, r.whole, r.length, 1, r.length, r.length});
    }
    return out;
}

std::vector<SliceRun> runs_within(const std::vector<SliceRun>& runs, size_t begin, size_t end, bool local_side) {
    std::vector<SliceRun> out;
    for (const SliceRun& r : runs) {
        const size_t at = local_side ? r.local : r.whole;
        const size_t lo = std::max(at, begin);
        const size_t hi = std::min(at + r.length, end);
        if (hi > lo) out.push_back({r.local + (lo - at), r.whole + (lo - at), hi - lo});
    }
    return out;
}

void init_unit(const ModelLayout& layout, int unit, uint64_t seed, float* out) {
    ZT_REQUIRE(unit >= 0 && unit < layout.num_units(), "unit ", unit);
    init_unit_range(layout, unit, seed, 0, layout.unit_numel[static_cast<size_t>(unit)], out);
}

void init_unit_range(const ModelLayout& layout, int unit, uint64_t seed, size_t begin, size_t end, float* out,
                     InitTensors which) {
    ZT_REQUIRE(unit >= 0 && unit < layout.num_units(), "unit ", unit);
    const size_t n = layout.unit_numel[static_cast<size_t>(unit)];
    ZT_REQUIRE(begin <= end && end <= n, "init range [", begin, ", ", end, ") of unit ", unit, " (", n, " elements)");
    for (size_t i = 0; i < end - begin; ++i) out[i] = 0.f;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != unit || (which == InitTensors::kAdaptersOnly && !p.adapter)) continue;
        // The part of this tensor inside [begin, end), in tensor-relative indices.
        const size_t lo = std::max(p.offset, begin) - p.offset;
        const size_t hi = std::min(p.offset + p.numel, end);
        if (hi <= p.offset + lo) continue;
        const size_t count = hi - (p.offset + lo);
        float* dst = out + (p.offset + lo - begin);
        if (p.init_std == 0.f && p.init_bound == 0.f) {
            for (size_t i = 0; i < count; ++i) dst[i] = p.init_value;
            continue;
        }
        // Padded vocabulary rows of the token embedding stay zero: they are never an input
        // and never predicted, so they must not disturb the tied LM head. Every element's
        // value depends only on its global index, so any range gives the same values.
        init_tensor_range(p, seed, lo, count, dst);
    }
}

std::vector<size_t> trainable_begins(const ModelLayout& layout) {
    const size_t U = layout.unit_numel.size();
    std::vector<size_t> begin(U);
    std::vector<size_t> frozen_end(U, 0);  // the end of the unit's last frozen tensor
    for (size_t u = 0; u < U; ++u) begin[u] = layout.unit_numel[u];
    for (const ParamSpec& p : layout.params) {
        const size_t u = static_cast<size_t>(p.unit);
        if (p.trainable) {
            begin[u] = std::min(begin[u], p.offset);
        } else {
            frozen_end[u] = std::max(frozen_end[u], p.offset + p.numel);
        }
    }
    for (size_t u = 0; u < U; ++u) {
        // Nothing frozen, or a trained tensor before a frozen one: all of it keeps state.
        if (frozen_end[u] == 0 || frozen_end[u] > begin[u]) begin[u] = 0;
    }
    return begin;
}

}  // namespace zt
