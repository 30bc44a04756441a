// What consolidation (consolidate.cpp) and weight import (import_weights.cpp) share: the
// file format an extension asks for, and shape arithmetic. Private to ckpt/.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/ckpt/model_source.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/model_layout.hpp"

namespace zt {

enum class WeightsFormat { kH5, kSafetensors };

/// The format an output or init_from file name asks for; `what` names the option.
inline WeightsFormat weights_format_of(const std::string& path, const std::string& what) {
    const std::string ext = std::filesystem::path(path).extension().string();
    if (ext == ".h5" || ext == ".hdf5") return WeightsFormat::kH5;
    if (ext == ".safetensors") return WeightsFormat::kSafetensors;
    throw InputError(str(what, ": '", path, "' has an unknown extension '", ext, "' (use .h5 or .safetensors)"));
}

/// "[2, 3]"
inline std::string shape_str(const std::vector<size_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += str(i ? ", " : "", shape[i]);
    return s + "]";
}

inline size_t shape_numel(const std::vector<size_t>& shape) {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    return n;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Unit ranges of the weights a file holds (model.init_from's formats: .h5, .safetensors or
/// a Hugging Face directory, checked as import checks them) in `layout`'s coordinates: the
/// frozen base of a LoRA checkpoint, which its shards do not hold. A tensor is read whole
/// when a range first touches it and kept for the next range (ranges come in order);
/// padded rows, alignment gaps and adapters read zero. `layout` must outlive it.
class WeightsRanges {
  public:
    WeightsRanges(std::string path, const ModelLayout& layout, const ModelConfig& cfg);
    ~WeightsRanges();
    WeightsRanges(const WeightsRanges&) = delete;
    WeightsRanges& operator=(const WeightsRanges&) = delete;
    void read(int unit, size_t begin, size_t end, float* out);

  private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

/// A Hugging Face directory's tensors into `put` (import_weights.cpp; model_source.hpp's
/// read_model_weights for a directory): config.json checked against cfg first.
void read_hf_weights(const std::string& dir, const ModelLayout& layout, const ModelConfig& cfg,
                     const WeightSink& put);

}  // namespace zt
