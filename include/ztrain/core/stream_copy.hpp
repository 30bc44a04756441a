// A host memory copy that writes past the CPU caches.
#pragma once

#include <cstddef>

namespace zt {

/// Copies `bytes` bytes from `src` to `dst` (not overlapping) with non-temporal stores where
/// the CPU has them (SSE2: every x86-64), memcpy elsewhere. For large copies whose
/// destination is read much later, by another thread (a checkpoint snapshot): the stores
/// skip reading each destination line first, a third of a copy's memory traffic, and leave
/// the cache to the training that runs next (the measurement is in bench/cpu_notes.md).
void copy_past_cache(void* dst, const void* src, size_t bytes);

}  // namespace zt
