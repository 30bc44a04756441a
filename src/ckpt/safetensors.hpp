// The safetensors file format, on its own: a little-endian u64 header length, a JSON header
// ({name: {dtype, shape, data_offsets}}, optional __metadata__ of strings), then the data.
// Names and layouts are the caller's (hf_family.hpp says which); this file only writes and
// reads bytes and checks the structure. Private to ckpt/.
//
// Reading trusts nothing: the header length against the file size and a limit, the JSON,
// every entry's dtype, shape and byte range (inside the data section, sized for its shape,
// no overlaps), each a violation reported as an InputError naming the file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/core/dtype.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; ckpt/ writes and reads host memory as is"
#endif

namespace zt {

/// "F32" | "BF16" | "F16"
const char* safetensors_dtype(DType t);

/// Streams a safetensors file: the header (every tensor's byte range, computed from the
/// list given up front), then each tensor's bytes in that order.
class SafetensorsWriter {
  public:
    struct Tensor {
        std::string name;
        std::vector<size_t> shape;
    };
    /// Creates `file` and writes the header; all tensors are stored in `dtype`. `metadata`
    /// becomes __metadata__ (its values must be strings).
    SafetensorsWriter(const std::string& file, const std::vector<Tensor>& tensors, DType dtype,
                      const nlohmann::ordered_json& metadata);
    ~SafetensorsWriter();
    SafetensorsWriter(const SafetensorsWriter&) = delete;
    SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
    /// The next tensor's data, already in the file's dtype and layout.
    void write(const void* data, size_t bytes);
    /// Flushes and closes; throws Error when the data did not reach the file.
    void close();

  private:
    std::string m_file;
    std::FILE* m_out = nullptr;
};

/// One header entry of a safetensors file, validated against the file.
struct SafetensorsEntry {
    std::string dtype;  ///< the safetensors name: "F32", "BF16", ...
    std::vector<size_t> shape;
    uint64_t begin = 0;  ///< byte range inside the data section
    uint64_t end = 0;
};

/// An open safetensors file whose header passed every check.
class SafetensorsReader {
  public:
    explicit SafetensorsReader(const std::string& file);
    const std::string& file() const { return m_file; }
    /// Every tensor, by its name in the file (__metadata__ excluded).
    const std::map<std::string, SafetensorsEntry>& entries() const { return m_entries; }
    /// An entry's elements as fp32 (its dtype must be F32, BF16 or F16); `name` is the file's
    /// name, for messages.
    void read_f32(const std::string& name, const SafetensorsEntry& e, std::vector<float>& out);
    /// Elements [first, first + count) of an entry (row-major, as stored) as fp32 into `out`.
    void read_f32_range(const std::string& name, const SafetensorsEntry& e, size_t first, size_t count, float* out);

  private:
    std::string m_file;
    std::ifstream m_in;
    uint64_t m_data_start = 0;
    std::map<std::string, SafetensorsEntry> m_entries;
    std::vector<uint16_t> m_half;
};

/// A sharded model's model.safetensors.index.json: {"metadata": {...}, "weight_map":
/// {tensor: shard file name}}. Returns weight_map after checking it is an object of strings,
/// names no tensor twice and names plain files (the shards sit next to the index: no
/// directories, no "..", no NUL, so a downloaded index cannot point elsewhere). Whether the shards
/// exist and hold what it says is the caller's check. Throws InputError naming the file.
std::map<std::string, std::string> read_safetensors_index(const std::string& index_file);

/// The DType of a safetensors dtype name ztrain reads ("F32", "BF16", "F16"); false for others.
bool safetensors_float_dtype(const std::string& name, DType* out);

}  // namespace zt
