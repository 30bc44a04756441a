// Shared by the fuzz targets: a private scratch folder (on tmpfs when there is one) and
// whole-file writes. The parsers under test take file paths, so every input goes through a
// small file; /dev/shm keeps that in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ztrain/config/config.hpp"

namespace zt::fuzz {

/// This process's scratch folder: /dev/shm/ztfuzz.PID (or $TMPDIR/ztfuzz.PID without
/// /dev/shm), created on first use, removed at exit.
const std::string& scratch_dir();

/// scratch_dir() + "/" + name.
std::string scratch_file(const std::string& name);

/// Writes `n` bytes to `path` (truncating); aborts on failure (a harness failure, not a
/// finding in the code under test).
void write_file(const std::string& path, const void* data, size_t n);
inline void write_file(const std::string& path, const std::string& s) { write_file(path, s.data(), s.size()); }

/// Silences HDF5's automatic error-stack printing.
void quiet_hdf5();

/// The tiny GPT-2 the checkpoint and weight-import targets (and their seeds) use:
/// 1 layer, 1 head, width 4, 4 positions, vocabulary 10 padded to 16.
ModelConfig tiny_model();

/// Writes `text` as a checkpoint's meta.h5 exactly as save_checkpoint does (/meta_json:
/// uint8, chunked, Fletcher32, with its FNV-1a 64 attribute), so a fuzzed manifest gets
/// past the checksums. Aborts on an HDF5 failure.
void write_meta_h5(const std::string& path, const std::string& text);

}  // namespace zt::fuzz
