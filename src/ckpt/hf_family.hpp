// The transpose Hugging Face export and import apply. Each family's names, orientation and
// config.json (both directions) are its own (ztrain/model/family.hpp: Family::hf_naming,
// hf_config, hf_metadata, hf_settings). Private to ckpt/.
#pragma once

#include <cstddef>

#include "ztrain/model/family.hpp"

namespace zt {

/// dst (cols, rows) = transpose of src (rows, cols), both row-major; tiled for the cache.
void transpose(const float* src, size_t rows, size_t cols, float* dst);

}  // namespace zt
