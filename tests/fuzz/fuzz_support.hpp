// Shared by the fuzz targets: a private scratch folder (on tmpfs when there is one),
// whole-file writes, and the tiny models the import targets write into. The parsers under
// test take file paths, so every input goes through a small file; /dev/shm keeps that in
// memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"

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

/// A tiny Llama for the Hugging Face directory target and its seeds: 1 layer, 2 query heads
/// sharing 1 key/value head, width 8, SwiGLU width 8, 4 positions, vocabulary 10 padded to
/// 16, untied head, llama3 RoPE scaling (every config.json field ztrain reads is present).
ModelConfig tiny_llama_model();

/// A one-rank ModelState (ZeRO stage 0, CPU backend) of `model`: what the import and load
/// targets write into.
struct TinyState {
    explicit TinyState(const ModelConfig& model);
    ModelConfig cfg;
    ModelLayout layout;
    std::unique_ptr<Backend> backend;
    ModelState state;
};

/// The tiny GPT-2's TinyState, built on first use (one per process).
TinyState& tiny_state();

/// Sets every owned master element to `value`: an import must then overwrite or zero each.
void fill_master(TinyState& m, float value);

/// Aborts, naming `target`, when a padded vocabulary element (beyond init_numel) of any
/// tensor's master weights is not zero: an accepted import must zero them.
void require_zero_padding(TinyState& m, const char* target);

/// fuzz_hf_dir's input is a Hugging Face model directory's files joined by this separator
/// (config.json, the index, then the weights files; fuzz_hf_dir.cpp), and with an index the
/// k-th of n weights files is hf_shard_name(k, n): "model-0000k-of-0000n.safetensors".
inline const std::string kHfDirSeparator{"\0ZTFUZZ-FILE\0", 13};
std::string hf_shard_name(size_t k, size_t n);

/// Writes `text` as a checkpoint's meta.h5 exactly as save_checkpoint does (/meta_json:
/// uint8, chunked, Fletcher32, with its FNV-1a 64 attribute), so a fuzzed manifest gets
/// past the checksums. Aborts on an HDF5 failure.
void write_meta_h5(const std::string& path, const std::string& text);

}  // namespace zt::fuzz
