// The safetensors format (safetensors.hpp): streaming writer and validating reader.
#include "safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "weights_file.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

namespace {

/// A safetensors header larger than this is refused before it is read: GPT-2 XL's header
/// is ~30 KB; the reference implementation's own limit is 100 MB.
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& file, const std::string& what) {
    uint64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw InputError(str(file, ": ", what, " overflows"));
    return r;
}

/// Bytes per element of every safetensors dtype (0: unknown), so the byte ranges of tensors
/// ztrain ignores (e.g. the attention mask buffers of some GPT-2 exports) are checked too.
uint64_t element_bytes(const std::string& dt) {
    return dt == "F64" || dt == "I64" || dt == "U64" ? 8
           : dt == "F32" || dt == "I32" || dt == "U32" ? 4
           : dt == "F16" || dt == "BF16" || dt == "I16" || dt == "U16" ? 2
           : dt == "BOOL" || dt == "U8" || dt == "I8" || dt == "F8_E4M3" || dt == "F8_E5M2" ? 1
           : 0;
}

/// One header entry, checked against the data section's size.
SafetensorsEntry parse_entry(const std::string& file, const std::string& key, const nlohmann::json& v,
                             uint64_t data_size) {
    const std::string where = str(file, ": tensor ", key);
    ZT_INPUT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where,
                   ": entry lacks dtype, shape or data_offsets");
    ZT_INPUT_CHECK(v["dtype"].is_string(), where, ": dtype is not a string");
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    const uint64_t esize = element_bytes(e.dtype);
    ZT_INPUT_CHECK(esize > 0, where, ": unknown dtype ", e.dtype);
    ZT_INPUT_CHECK(v["shape"].is_array() && v["shape"].size() <= 8, where, ": shape is not a list of at most 8 sizes");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
        ZT_INPUT_CHECK(d.is_number_unsigned(), where, ": shape ", v["shape"].dump(), " holds a non-size");
        e.shape.push_back(static_cast<size_t>(d.get<uint64_t>()));
        numel = checked_mul(numel, d.get<uint64_t>(), file, str("the element count of ", key));
    }
    const nlohmann::json& off = v["data_offsets"];
    ZT_INPUT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                   where, ": data_offsets is not [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    ZT_INPUT_CHECK(e.begin <= e.end && e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
                   "] out of range (the data section holds ", data_size, " bytes)");
    ZT_INPUT_CHECK(e.end - e.begin == checked_mul(numel, esize, file, str("the byte size of ", key)), where,
                   ": data_offsets cover ", e.end - e.begin, " bytes, shape ", shape_str(e.shape), " of ", e.dtype,
                   " needs ", numel * esize);
    return e;
}

}  // namespace

const char* safetensors_dtype(DType t) {
    switch (t) {
        case DType::kF32: return "F32";
        case DType::kBF16: return "BF16";
        case DType::kF16: return "F16";
    }
    return "?";
}

bool safetensors_float_dtype(const std::string& name, DType* out) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        if (name == safetensors_dtype(t)) {
            *out = t;
            return true;
        }
    }
    return false;
}

// ---------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(const std::string& file, const std::vector<Tensor>& tensors, DType dtype,
                                     const nlohmann::ordered_json& metadata)
    : m_file(file) {
    // The header holds every tensor's byte range, so it is computed first; the data then
    // streams in the same order, each range following the previous one.
    const size_t esize = dtype_size(dtype);
    nlohmann::ordered_json header;
    uint64_t offset = 0;
    for (const Tensor& t : tensors) {
        const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * esize;
        header[t.name] = {{"dtype", safetensors_dtype(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    header["__metadata__"] = metadata;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
    m_out = std::fopen(file.c_str(), "wb");
    if (!m_out) throw Error(str(file, ": cannot create: ", std::strerror(errno)));
    write(len, sizeof len);
    write(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() {
    if (m_out) std::fclose(m_out);
}

void SafetensorsWriter::write(const void* data, size_t bytes) {
    if (bytes > 0 && std::fwrite(data, 1, bytes, m_out) != bytes) throw Error(str(m_file, ": write failed (disk full?)"));
}

void SafetensorsWriter::close() {
    if (std::fflush(m_out) != 0 || std::ferror(m_out)) throw Error(str(m_file, ": write failed (disk full?)"));
    const int rc = std::fclose(m_out);
    m_out = nullptr;
    if (rc != 0) throw Error(str(m_file, ": close failed (disk full?)"));
}

// ---------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(const std::string& file) : m_file(file) {
    std::error_code ec;
    const uint64_t file_size = fs::file_size(file, ec);
    ZT_INPUT_CHECK(!ec, file, ": cannot read: ", ec.message());
    ZT_INPUT_CHECK(file_size >= 8, file, ": ", file_size, " bytes: too short for a safetensors file");
    m_in.open(file, std::ios::binary);
    ZT_INPUT_CHECK(m_in.good(), file, ": cannot open");
    unsigned char len[8];
    m_in.read(reinterpret_cast<char*>(len), sizeof len);
    ZT_INPUT_CHECK(m_in.good(), file, ": cannot read the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    ZT_INPUT_CHECK(n <= file_size - 8, file, ": header length ", n, " exceeds the file size (", file_size,
                   " bytes): truncated or not a safetensors file");
    ZT_INPUT_CHECK(n <= kMaxSafetensorsHeader, file, ": header length ", n, " exceeds the ", kMaxSafetensorsHeader,
                   "-byte limit: not a safetensors file");
    std::string text(static_cast<size_t>(n), '\0');
    m_in.read(text.data(), static_cast<std::streamsize>(n));
    ZT_INPUT_CHECK(m_in.good(), file, ": cannot read the ", n, "-byte header");
    m_data_start = 8 + n;
    const uint64_t data_size = file_size - m_data_start;

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        throw InputError(str(file, ": the header is not valid JSON: ", e.what()));
    }
    ZT_INPUT_CHECK(header.is_object(), file, ": the header is not a JSON object");
    // Every entry is validated, used or not: a file with one bad entry is a bad file.
    for (auto it = header.begin(); it != header.end(); ++it) {
        const nlohmann::json& v = it.value();
        if (it.key() == "__metadata__") {
            ZT_INPUT_CHECK(v.is_object(), file, ": __metadata__ is not an object");
            for (const auto& kv : v.items()) {
                ZT_INPUT_CHECK(kv.value().is_string(), file, ": __metadata__ value '", kv.key(), "' is not a string");
            }
            continue;
        }
        m_entries.emplace(it.key(), parse_entry(file, it.key(), v, data_size));
    }
    // Byte ranges must not overlap (the format requires them to tile the data section).
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& kv : m_entries) ranges.emplace_back(kv.second.begin, kv.second.end);
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
        ZT_INPUT_CHECK(ranges[i].first >= ranges[i - 1].second, file, ": tensor byte ranges overlap at offset ",
                       ranges[i].first);
    }
}

std::map<std::string, std::string> read_safetensors_index(const std::string& index_file) {
    // Real indexes are tens of KB (one line per tensor); a larger file is not one.
    constexpr uint64_t kMaxIndexBytes = 64ull << 20;
    std::error_code ec;
    const uint64_t size = fs::file_size(index_file, ec);
    ZT_INPUT_CHECK(!ec, index_file, ": cannot read: ", ec.message());
    ZT_INPUT_CHECK(size <= kMaxIndexBytes, index_file, ": ", size, " bytes exceeds the ", kMaxIndexBytes,
                   "-byte limit of a safetensors index");
    std::ifstream in(index_file, std::ios::binary);
    std::string text(static_cast<size_t>(size), '\0');
    in.read(text.data(), static_cast<std::streamsize>(size));
    ZT_INPUT_CHECK(in.good() || size == 0, index_file, ": cannot read");
    // JSON objects may repeat a key (the parser keeps the last): a tensor listed twice in
    // weight_map is caught while parsing, where the repetition is still visible.
    std::string top_key;
    std::string duplicate;
    std::set<std::string> listed;
    const nlohmann::json::parser_callback_t watch = [&](int depth, nlohmann::json::parse_event_t event,
                                                        nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
            if (depth == 1) top_key = parsed.get<std::string>();
            if (depth == 2 && top_key == "weight_map" && !listed.insert(parsed.get<std::string>()).second &&
                duplicate.empty()) {
                duplicate = parsed.get<std::string>();
            }
        }
        return true;
    };
    nlohmann::json index;
    try {
        index = nlohmann::json::parse(text, watch);
    } catch (const std::exception& e) {
        throw InputError(str(index_file, ": not valid JSON: ", e.what()));
    }
    ZT_INPUT_CHECK(duplicate.empty(), index_file, ": weight_map lists tensor ", duplicate, " twice");
    ZT_INPUT_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_file,
                   ": expected an object with a weight_map object (tensor name -> shard file)");
    std::map<std::string, std::string> out;
    for (const auto& kv : index["weight_map"].items()) {
        ZT_INPUT_CHECK(kv.value().is_string(), index_file, ": weight_map[", kv.key(), "] = ", kv.value().dump(),
                       ": expected a shard file name");
        const std::string shard = kv.value().get<std::string>();
        // A NUL ends the name the file system sees: "model.safetensors\u0000x" would open
        // model.safetensors under another name.
        ZT_INPUT_CHECK(shard.find('\0') == std::string::npos, index_file, ": weight_map[", kv.key(),
                       "] = ", kv.value().dump(), ": a file name cannot contain a NUL character");
        ZT_INPUT_CHECK(!shard.empty() && shard != "." && shard != ".." && shard.find('/') == std::string::npos &&
                           shard.find('\\') == std::string::npos,
                       index_file, ": weight_map[", kv.key(), "] = '", shard,
                       "': expected a file name next to the index (no directories)");
        out.emplace(kv.key(), shard);
    }
    ZT_INPUT_CHECK(!out.empty(), index_file, ": weight_map is empty");
    return out;
}

void SafetensorsReader::read_f32(const std::string& name, const SafetensorsEntry& e, std::vector<float>& out) {
    DType dtype = DType::kF32;
    ZT_REQUIRE(safetensors_float_dtype(e.dtype, &dtype), "read_f32 of a ", e.dtype, " tensor");
    out.resize(static_cast<size_t>((e.end - e.begin) / dtype_size(dtype)));
    read_f32_range(name, e, 0, out.size(), out.data());
}

void SafetensorsReader::read_f32_range(const std::string& name, const SafetensorsEntry& e, size_t first,
                                       size_t count, float* out) {
    DType dtype = DType::kF32;
    ZT_REQUIRE(safetensors_float_dtype(e.dtype, &dtype), "read_f32 of a ", e.dtype, " tensor");
    const size_t w = dtype_size(dtype);
    ZT_REQUIRE((first + count) * w <= e.end - e.begin, "read_f32_range past the end of ", name);
    m_in.clear();
    m_in.seekg(static_cast<std::streamoff>(m_data_start + e.begin + first * w));
    if (dtype == DType::kF32) {
        m_in.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(count * w));
    } else {
        // 16-bit values are staged a piece at a time: the staging stays small whatever the
        // tensor (an embedding's would be a second copy of it).
        constexpr size_t kPiece = size_t{1} << 20;
        for (size_t at = 0; at < count && m_in.good(); at += kPiece) {
            const size_t n = std::min(kPiece, count - at);
            m_half.resize(n);
            m_in.read(reinterpret_cast<char*>(m_half.data()), static_cast<std::streamsize>(n * w));
            convert_to_f32(m_half.data(), out + at, n, dtype);
        }
    }
    if (!m_in.good()) throw InputError(str(m_file, ": cannot read the data of tensor ", name));
}

}  // namespace zt
