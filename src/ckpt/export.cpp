// Checkpoint consolidation (.h5 / .safetensors), checkpoint listing, and weight import
// (formats and guarantees: export.hpp).
//
// Memory: export holds one tensor at a time (fp32 as read, plus one transposed or
// converted copy); import the same per tensor, and only for tensors that overlap the rank's
// owned elements. Nothing here ever holds the whole model.
// Trust: the checkpoint's meta.h5 is hash-checked by read_checkpoint_meta and its shards by
// CheckpointReader; an imported file is untrusted: every length, offset, dtype and shape
// is checked against the file size and the model before anything is allocated or read.
// Deliberately not here: AdamW state import, tokenizer/config export for Hugging Face
// (config.json is a few lines the user writes for their model), big-endian hosts.
#include "ztrain/ckpt/export.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/ckpt/checkpoint.hpp"
#include "hdf5_util.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/gpt.hpp"
#include "ztrain/parallel/model_state.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this file writes and reads host memory as is"
#endif

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::require_plain_storage;
using h5::silence_hdf5;

namespace {

/// A safetensors header larger than this is refused before it is read: GPT-2 XL's header
/// is ~30 KB; the reference implementation's own limit is 100 MB.
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;
/// Fixed-length string attributes read back from an imported .h5 are capped likewise.
constexpr size_t kMaxStringAttr = 16u << 20;


std::string shape_str(const std::vector<size_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += str(i ? ", " : "", shape[i]);
    return s + "]";
}

size_t product(const std::vector<size_t>& shape) {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    return n;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Tensors that Hugging Face GPT-2 keeps as Conv1D, whose weight is stored [in, out]: the
/// transpose of ztrain's (out, in).
bool is_conv1d(const std::string& ztrain_name) {
    for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
        if (ends_with(ztrain_name, s)) return true;
    }
    return false;
}

std::string hf_name(const std::string& ztrain_name) { return "transformer." + ztrain_name; }

/// Shape of a tensor as a file stores it: ztrain orientation, or Conv1D-transposed.
std::vector<size_t> file_shape(const std::string& ztrain_name, const std::vector<size_t>& live_shape, bool hf) {
    if (hf && is_conv1d(ztrain_name) && live_shape.size() == 2) return {live_shape[1], live_shape[0]};
    return live_shape;
}

/// dst (cols, rows) = transpose of src (rows, cols), both row-major; tiled for the cache.
void transpose(const float* src, size_t rows, size_t cols, float* dst) {
    constexpr size_t kTile = 32;
    const long long row_tiles = static_cast<long long>((rows + kTile - 1) / kTile);
    #pragma omp parallel for schedule(static)
    for (long long rt = 0; rt < row_tiles; ++rt) {
        const size_t r0 = static_cast<size_t>(rt) * kTile;
        const size_t r1 = std::min(rows, r0 + kTile);
        for (size_t c0 = 0; c0 < cols; c0 += kTile) {
            const size_t c1 = std::min(cols, c0 + kTile);
            for (size_t r = r0; r < r1; ++r) {
                for (size_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
}

const char* safetensors_dtype(DType t) {
    switch (t) {
        case DType::kF32: return "F32";
        case DType::kBF16: return "BF16";
        case DType::kF16: return "F16";
    }
    return "?";
}

enum class Format { kH5, kSafetensors };

/// The format an output or init_from file name asks for; `what` names the option.
Format format_of(const std::string& path, const std::string& what) {
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".h5" || ext == ".hdf5") return Format::kH5;
    if (ext == ".safetensors") return Format::kSafetensors;
    throw InputError(str(what, ": '", path, "' has an unknown extension '", ext, "' (use .h5 or .safetensors)"));
}

// ---------------------------------------------------------------------------------------
// The checkpoint's model, as export sees it
// ---------------------------------------------------------------------------------------

struct CkptTensor {
    std::string name;
    int unit = 0;
    size_t offset = 0;
    std::vector<size_t> shape;       ///< as stored (wte padded)
    std::vector<size_t> live_shape;  ///< as exported (wte cut to vocab_size rows)
    size_t live_numel = 0;
};

struct CkptModel {
    std::string step_dir;
    std::string meta_file;
    nlohmann::json meta;
    std::vector<CkptTensor> tensors;
    // Model dims; -1 where neither meta nor config_ini says (n_head is in no tensor shape).
    long n_layer = -1, n_head = -1, n_embd = -1, seq_len = -1, vocab_size = -1, vocab_pad_to = -1, padded_vocab = -1;
};

/// `key` of section [model] in an INI text (the resolved deck stored in the checkpoint), or -1.
long ini_model_value(const std::string& ini, const std::string& key) {
    std::istringstream in(ini);
    std::string line;
    std::string section;
    while (std::getline(in, line)) {
        const size_t hash = line.find('#');
        if (hash != std::string::npos) line.erase(hash);
        const auto trim = [](std::string s) {
            const size_t b = s.find_first_not_of(" \t\r");
            const size_t e = s.find_last_not_of(" \t\r");
            return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
        };
        line = trim(line);
        if (line.empty()) continue;
        if (line.front() == '[' && line.back() == ']') {
            section = trim(line.substr(1, line.size() - 2));
            continue;
        }
        const size_t eq = line.find('=');
        if (section != "model" || eq == std::string::npos || trim(line.substr(0, eq)) != key) continue;
        try {
            size_t used = 0;
            const std::string v = trim(line.substr(eq + 1));
            const long n = std::stol(v, &used);
            if (used == v.size()) return n;
        } catch (const std::exception&) {
        }
        return -1;
    }
    return -1;
}

std::string resolve_step_dir(const std::string& ckpt_path) {
    ZT_INPUT_CHECK(!ckpt_path.empty(), "no checkpoint directory given");
    ZT_INPUT_CHECK(fs::exists(ckpt_path), ckpt_path, ": no such checkpoint directory");
    ZT_INPUT_CHECK(fs::is_directory(ckpt_path), ckpt_path, ": not a directory (give a checkpoint directory or step_N)");
    // resolve_resume gives "auto" and "never" their meaning; a directory by that name is a path.
    const std::string p = (ckpt_path == "auto" || ckpt_path == "never") ? "./" + ckpt_path : ckpt_path;
    return resolve_resume(p, p);
}

/// Reads and checks the checkpoint's manifest: every tensor lies inside its unit, and the
/// token embedding can be cut to the real vocabulary.
CkptModel load_ckpt_model(const std::string& step_dir, nlohmann::json meta) {
    CkptModel m;
    m.step_dir = step_dir;
    m.meta_file = (fs::path(step_dir) / "meta.h5").string();
    try {
        const auto units = meta.at("units").get<std::vector<size_t>>();
        for (const auto& t : meta.at("tensors")) {
            CkptTensor c;
            c.name = t.at("name").get<std::string>();
            c.unit = t.at("unit").get<int>();
            c.offset = t.at("offset").get<size_t>();
            c.shape = t.at("shape").get<std::vector<size_t>>();
            ZT_INPUT_CHECK(c.unit >= 0 && static_cast<size_t>(c.unit) < units.size() && !c.shape.empty() &&
                               c.offset <= units[static_cast<size_t>(c.unit)] &&
                               product(c.shape) <= units[static_cast<size_t>(c.unit)] - c.offset,
                           m.meta_file, ": tensor ", c.name, " ", shape_str(c.shape), " at unit ", c.unit, " offset ",
                           c.offset, " does not fit the units of the checkpoint");
            c.live_shape = c.shape;
            m.tensors.push_back(std::move(c));
        }
        const std::string ini = meta.value("config_ini", std::string());
        const nlohmann::json model = meta.value("model", nlohmann::json::object());
        const auto dim = [&](const char* key) -> long {
            if (model.contains(key)) return model.at(key).get<long>();
            return ini_model_value(ini, key);
        };
        m.n_layer = dim("n_layer");
        m.n_head = dim("n_head");
        m.n_embd = dim("n_embd");
        m.seq_len = dim("seq_len");
        m.vocab_size = dim("vocab_size");
        m.vocab_pad_to = dim("vocab_pad_to");
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(m.meta_file, ": malformed manifest: ", e.what()));
    }
    m.meta = std::move(meta);
    // What the tensors themselves say wins over (and is checked against) the deck.
    long blocks = 0;
    for (CkptTensor& t : m.tensors) {
        if (ends_with(t.name, ".ln_1.weight")) ++blocks;
        if (t.name == "wpe.weight" && t.shape.size() == 2) m.seq_len = static_cast<long>(t.shape[0]);
        if (t.name != "wte.weight") continue;
        ZT_INPUT_CHECK(t.shape.size() == 2, m.meta_file, ": wte.weight has shape ", shape_str(t.shape));
        m.padded_vocab = static_cast<long>(t.shape[0]);
        m.n_embd = static_cast<long>(t.shape[1]);
        ZT_INPUT_CHECK(m.vocab_size > 0, m.meta_file,
                       ": the checkpoint does not record model.vocab_size (neither in its model record nor in its "
                       "config_ini), so the padded embedding rows cannot be told apart");
        ZT_INPUT_CHECK(m.vocab_size <= m.padded_vocab, m.meta_file, ": model.vocab_size = ", m.vocab_size,
                       " exceeds the ", m.padded_vocab, " rows of wte.weight");
        t.live_shape[0] = static_cast<size_t>(m.vocab_size);
    }
    m.n_layer = blocks;
    for (CkptTensor& t : m.tensors) t.live_numel = product(t.live_shape);
    return m;
}

// ---------------------------------------------------------------------------------------
// HDF5 helpers
// ---------------------------------------------------------------------------------------

void write_i64_attr(hid_t obj, const char* name, long long v, const std::string& file) {
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    h5_require(space.ok(), false, file, str("cannot create a dataspace for attribute ", name));
    H5Handle attr(H5Acreate2(obj, name, H5T_NATIVE_LLONG, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    h5_require(attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_LLONG, &v) >= 0, false, file,
               str("cannot write attribute ", name));
}

void write_str_attr(hid_t obj, const char* name, const std::string& v, const std::string& file) {
    H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    // A fixed-length string of zero bytes is not allowed; an empty value is one NUL byte.
    h5_require(type.ok() && H5Tset_size(type.get(), std::max<size_t>(v.size(), 1)) >= 0 &&
                   H5Tset_strpad(type.get(), H5T_STR_NULLPAD) >= 0 && H5Tset_cset(type.get(), H5T_CSET_UTF8) >= 0,
               false, file, str("cannot make the string type of attribute ", name));
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    h5_require(space.ok(), false, file, str("cannot create a dataspace for attribute ", name));
    H5Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    std::string data = v.empty() ? std::string(1, '\0') : v;
    h5_require(attr.ok() && H5Awrite(attr.get(), type.get(), data.data()) >= 0, false, file,
               str("cannot write attribute ", name));
}

/// A string attribute (fixed or variable length), or "" when the object has none.
std::string read_str_attr(hid_t obj, const char* name, const std::string& file) {
    const htri_t exists = H5Aexists(obj, name);
    h5_require(exists >= 0, true, file, str("cannot look up attribute ", name));
    if (exists == 0) return "";
    H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    h5_require(attr.ok(), true, file, str("cannot open attribute ", name));
    H5Handle ftype(H5Aget_type(attr.get()), H5Tclose);
    h5_require(ftype.ok() && H5Tget_class(ftype.get()) == H5T_STRING, true, file,
               str("attribute ", name, " is not a string"));
    H5Handle space(H5Aget_space(attr.get()), H5Sclose);
    h5_require(space.ok() && H5Sget_simple_extent_npoints(space.get()) == 1, true, file,
               str("attribute ", name, " is not a single string"));
    const htri_t variable = H5Tis_variable_str(ftype.get());
    h5_require(variable >= 0, true, file, str("cannot inspect attribute ", name));
    H5Handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
    // HDF5 does not convert between character sets: read in the file's (ASCII or UTF-8).
    const H5T_cset_t cset = H5Tget_cset(ftype.get());
    h5_require(mtype.ok() && cset >= 0 && H5Tset_cset(mtype.get(), cset) >= 0, true, file,
               str("cannot make a string type for attribute ", name));
    if (variable > 0) {
        h5_require(H5Tset_size(mtype.get(), H5T_VARIABLE) >= 0, false, file, "cannot make a string type");
        char* p = nullptr;
        h5_require(H5Aread(attr.get(), mtype.get(), &p) >= 0, true, file, str("cannot read attribute ", name));
        std::string v = p ? std::string(p) : std::string();
        if (p) H5free_memory(p);
        return v;
    }
    const size_t size = H5Tget_size(ftype.get());
    h5_require(size > 0 && size <= kMaxStringAttr, true, file, str("attribute ", name, " has an implausible size"));
    // One byte more than the file's: a null-terminated memory string keeps every character.
    h5_require(H5Tset_size(mtype.get(), size + 1) >= 0, false, file, "cannot make a string type");
    std::string v(size + 1, '\0');
    h5_require(H5Aread(attr.get(), mtype.get(), v.data()) >= 0, true, file, str("cannot read attribute ", name));
    v.resize(std::strlen(v.c_str()));
    return v;
}

/// Creates `path`'s dataset of `shape` in the exported dtype and writes `data` (fp32) into
/// it, converting through `scratch` for 16-bit dtypes.
void write_tensor_dataset(hid_t parent, const std::string& name, const std::vector<size_t>& shape, const float* data,
                          DType t, std::vector<uint16_t>& scratch, const std::string& file) {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    h5_require(space.ok(), false, file, str("cannot create the dataspace of ", name));
    const hid_t type = t == DType::kF32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16;
    H5Handle ds(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    h5_require(ds.ok(), false, file, str("cannot create dataset ", name));
    const void* src = data;
    const size_t n = product(shape);
    if (t != DType::kF32) {
        scratch.resize(n);
        convert_from_f32(data, scratch.data(), n, t);
        src = scratch.data();
    }
    h5_require(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, src) >= 0, false, file,
               str("cannot write dataset ", name, " (disk full?)"));
    write_str_attr(ds.get(), "dtype", dtype_name(t), file);
}

/// Writes to PATH.partial and renames it over PATH only when `body` succeeded, so a failed
/// or interrupted export never leaves a file that looks complete.
void write_atomically(const std::string& path, const std::function<void(const std::string&)>& body) {
    const std::string partial = path + ".partial";
    std::error_code ec;
    try {
        body(partial);
    } catch (...) {
        fs::remove(partial, ec);
        throw;
    }
    fs::rename(partial, path, ec);
    if (ec) {
        fs::remove(partial, ec);
        throw Error(str("cannot rename ", partial, " to ", path, ": ", ec.message()));
    }
}

// ---------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------

/// Reads one tensor's exported elements of `which` ("master", "adam_m", "adam_v").
void read_tensor(CheckpointReader& reader, const CkptTensor& t, const char* which, std::vector<float>& buf) {
    buf.resize(t.live_numel);
    // The live rows of wte are its leading elements, so one contiguous range covers every tensor.
    reader.read(t.unit, t.offset, t.offset + t.live_numel, which, buf.data());
}

void export_h5(CheckpointReader& reader, const CkptModel& m, const std::string& file, DType t, bool with_optimizer) {
    H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
    const nlohmann::json& meta = m.meta;
    write_str_attr(f.get(), "format", "ztrain-weights", file);
    write_i64_attr(f.get(), "step", meta.value("step", 0L), file);
    write_i64_attr(f.get(), "applied_steps", meta.value("applied_steps", 0L), file);
    write_i64_attr(f.get(), "tokens_seen", static_cast<long long>(meta.value("tokens_seen", uint64_t{0})), file);
    write_i64_attr(f.get(), "n_layer", m.n_layer, file);
    write_i64_attr(f.get(), "n_head", m.n_head, file);
    write_i64_attr(f.get(), "n_embd", m.n_embd, file);
    write_i64_attr(f.get(), "seq_len", m.seq_len, file);
    write_i64_attr(f.get(), "vocab_size", m.vocab_size, file);
    write_i64_attr(f.get(), "vocab_pad_to", m.vocab_pad_to, file);
    write_i64_attr(f.get(), "padded_vocab", m.padded_vocab, file);
    write_str_attr(f.get(), "dtype", dtype_name(t), file);
    write_str_attr(f.get(), "source", m.step_dir, file);
    write_str_attr(f.get(), "config_ini", meta.value("config_ini", std::string()), file);

    std::vector<float> buf;
    std::vector<uint16_t> scratch;
    for (const CkptTensor& tensor : m.tensors) {
        read_tensor(reader, tensor, "master", buf);
        write_tensor_dataset(f.get(), tensor.name, tensor.live_shape, buf.data(), t, scratch, file);
    }
    if (with_optimizer) {
        H5Handle opt(H5Gcreate2(f.get(), "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        h5_require(opt.ok(), false, file, "cannot create group optimizer");
        for (const CkptTensor& tensor : m.tensors) {
            H5Handle g(H5Gcreate2(opt.get(), tensor.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
            h5_require(g.ok(), false, file, str("cannot create group optimizer/", tensor.name));
            for (const char* which : {"adam_m", "adam_v"}) {
                read_tensor(reader, tensor, which, buf);
                write_tensor_dataset(g.get(), which, tensor.live_shape, buf.data(), DType::kF32, scratch, file);
            }
        }
    }
    h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
}

void write_bytes(std::FILE* out, const void* data, size_t n, const std::string& file) {
    if (n > 0 && std::fwrite(data, 1, n, out) != n) throw Error(str(file, ": write failed (disk full?)"));
}

void export_safetensors(CheckpointReader& reader, const CkptModel& m, const std::string& file, DType t) {
    // The header holds every tensor's byte range, so it is computed from the manifest first;
    // the data then streams in the same order, each range following the previous one.
    const size_t esize = dtype_size(t);
    nlohmann::ordered_json header;
    uint64_t offset = 0;
    for (const CkptTensor& tensor : m.tensors) {
        const uint64_t bytes = static_cast<uint64_t>(tensor.live_numel) * esize;
        header[hf_name(tensor.name)] = {{"dtype", safetensors_dtype(t)},
                                        {"shape", file_shape(tensor.name, tensor.live_shape, true)},
                                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    const nlohmann::json& meta = m.meta;
    // __metadata__ values must be strings.
    header["__metadata__"] = {{"format", "pt"},
                              {"source", "ztrain"},
                              {"step", std::to_string(meta.value("step", 0L))},
                              {"n_layer", std::to_string(m.n_layer)},
                              {"n_head", std::to_string(m.n_head)},
                              {"n_embd", std::to_string(m.n_embd)},
                              {"n_positions", std::to_string(m.seq_len)},
                              {"vocab_size", std::to_string(m.vocab_size)},
                              {"tied", "lm_head.weight = transformer.wte.weight"},
                              {"config_ini", meta.value("config_ini", std::string())}};
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);

    std::FILE* out = std::fopen(file.c_str(), "wb");
    if (!out) throw Error(str(file, ": cannot create: ", std::strerror(errno)));
    try {
        write_bytes(out, len, sizeof len, file);
        write_bytes(out, text.data(), text.size(), file);
        std::vector<float> buf;
        std::vector<float> other;  // transposed copy, or the 16-bit conversion's storage
        for (const CkptTensor& tensor : m.tensors) {
            read_tensor(reader, tensor, "master", buf);
            const float* src = buf.data();
            if (is_conv1d(tensor.name)) {
                other.resize(tensor.live_numel);
                transpose(buf.data(), tensor.live_shape[0], tensor.live_shape[1], other.data());
                src = other.data();
            }
            if (t == DType::kF32) {
                write_bytes(out, src, tensor.live_numel * sizeof(float), file);
                continue;
            }
            // Convert into whichever buffer `src` is not: no third full-size buffer.
            void* dst = buf.data();
            if (src == buf.data()) {
                other.resize((tensor.live_numel + 1) / 2);
                dst = other.data();
            }
            convert_from_f32(src, dst, tensor.live_numel, t);
            write_bytes(out, dst, tensor.live_numel * esize, file);
        }
        if (std::fflush(out) != 0 || std::ferror(out)) throw Error(str(file, ": write failed (disk full?)"));
    } catch (...) {
        std::fclose(out);
        throw;
    }
    if (std::fclose(out) != 0) throw Error(str(file, ": close failed (disk full?)"));
}

// ---------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------

/// What the model expects a file to hold for one tensor.
struct Expected {
    const ParamSpec* spec = nullptr;
    std::vector<size_t> live_shape;  ///< ztrain orientation, wte cut to vocab_size rows
    size_t live_numel = 0;
};

std::vector<Expected> expected_tensors(const ModelLayout& layout, const ModelConfig& cfg) {
    std::vector<Expected> out;
    for (const ParamSpec& p : layout.params) {
        Expected e;
        e.spec = &p;
        e.live_shape = p.shape;
        if (p.name == "wte.weight") e.live_shape[0] = static_cast<size_t>(cfg.vocab_size);
        e.live_numel = product(e.live_shape);
        ZT_REQUIRE(e.live_numel <= p.numel, p.name);
        out.push_back(std::move(e));
    }
    return out;
}

/// Receives one tensor's values (fp32, ztrain orientation, live elements).
using Deliver = std::function<void(const Expected&, const float*)>;
/// Whether this rank needs a tensor at all (it owns some of its elements).
using Wanted = std::function<bool(const Expected&)>;

/// Tensors a Hugging Face GPT-2 file may hold that ztrain does not use.
bool ignorable_hf(const std::string& name) {
    return name == "lm_head.weight" || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

struct StEntry {
    std::string dtype;  ///< the safetensors name: "F32", "BF16", ...
    std::vector<size_t> shape;
    uint64_t begin = 0;  ///< byte range inside the data section
    uint64_t end = 0;
};

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& file, const std::string& what) {
    uint64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw InputError(str(file, ": ", what, " overflows"));
    return r;
}

void import_safetensors(const std::string& file, const std::vector<Expected>& expected, const Wanted& wanted,
                        const Deliver& deliver) {
    std::error_code ec;
    const uint64_t file_size = fs::file_size(file, ec);
    ZT_INPUT_CHECK(!ec, file, ": cannot read: ", ec.message());
    ZT_INPUT_CHECK(file_size >= 8, file, ": ", file_size, " bytes: too short for a safetensors file");
    std::ifstream in(file, std::ios::binary);
    ZT_INPUT_CHECK(in.good(), file, ": cannot open");
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), sizeof len);
    ZT_INPUT_CHECK(in.good(), file, ": cannot read the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    ZT_INPUT_CHECK(n <= file_size - 8, file, ": header length ", n, " exceeds the file size (", file_size,
                   " bytes): truncated or not a safetensors file");
    ZT_INPUT_CHECK(n <= kMaxSafetensorsHeader, file, ": header length ", n, " exceeds the ", kMaxSafetensorsHeader,
                   "-byte limit: not a safetensors file");
    std::string text(static_cast<size_t>(n), '\0');
    in.read(text.data(), static_cast<std::streamsize>(n));
    ZT_INPUT_CHECK(in.good(), file, ": cannot read the ", n, "-byte header");
    const uint64_t data_start = 8 + n;
    const uint64_t data_size = file_size - data_start;

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        throw InputError(str(file, ": the header is not valid JSON: ", e.what()));
    }
    ZT_INPUT_CHECK(header.is_object(), file, ": the header is not a JSON object");

    // Every entry is validated, used or not: a file with one bad entry is a bad file.
    std::map<std::string, StEntry> entries;  // by name without the "transformer." prefix
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& key = it.key();
        const nlohmann::json& v = it.value();
        if (key == "__metadata__") {
            ZT_INPUT_CHECK(v.is_object(), file, ": __metadata__ is not an object");
            for (const auto& kv : v.items()) {
                ZT_INPUT_CHECK(kv.value().is_string(), file, ": __metadata__ value '", kv.key(), "' is not a string");
            }
            continue;
        }
        const std::string where = str(file, ": tensor ", key);
        ZT_INPUT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                       where, ": entry lacks dtype, shape or data_offsets");
        ZT_INPUT_CHECK(v["dtype"].is_string(), where, ": dtype is not a string");
        StEntry e;
        e.dtype = v["dtype"].get<std::string>();
        const std::string& dt = e.dtype;
        // Sizes of every safetensors dtype, so the byte ranges of tensors ztrain ignores
        // (e.g. the attention mask buffers of some GPT-2 exports) are checked too.
        const uint64_t esize = dt == "F64" || dt == "I64" || dt == "U64" ? 8
                               : dt == "F32" || dt == "I32" || dt == "U32" ? 4
                               : dt == "F16" || dt == "BF16" || dt == "I16" || dt == "U16" ? 2
                               : dt == "BOOL" || dt == "U8" || dt == "I8" || dt == "F8_E4M3" || dt == "F8_E5M2" ? 1
                               : 0;
        ZT_INPUT_CHECK(esize > 0, where, ": unknown dtype ", dt);
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
                       ": data_offsets cover ", e.end - e.begin, " bytes, shape ", shape_str(e.shape), " of ", dt,
                       " needs ", numel * esize);
        std::string name = key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
        ZT_INPUT_CHECK(entries.count(name) == 0, file, ": tensor ", name, " appears twice (with and without the "
                       "transformer. prefix)");
        entries.emplace(std::move(name), std::move(e));
    }
    // Byte ranges must not overlap (the format requires them to tile the data section).
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& kv : entries) ranges.emplace_back(kv.second.begin, kv.second.end);
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
        ZT_INPUT_CHECK(ranges[i].first >= ranges[i - 1].second, file, ": tensor byte ranges overlap at offset ",
                       ranges[i].first);
    }
    // Names and shapes against the model, all before any data is read.
    std::set<std::string> known;
    for (const Expected& x : expected) {
        const std::string& name = x.spec->name;
        known.insert(name);
        const auto it = entries.find(name);
        ZT_INPUT_CHECK(it != entries.end(), file, ": missing tensor ", hf_name(name), " (expected shape ",
                       shape_str(file_shape(name, x.live_shape, true)), ")");
        ZT_INPUT_CHECK(it->second.dtype == "F32" || it->second.dtype == "BF16" ||
                           it->second.dtype == "F16",
                       file, ": tensor ", hf_name(name), " has dtype ", it->second.dtype,
                       " (import reads F32, BF16 and F16)");
        const std::vector<size_t> want = file_shape(name, x.live_shape, true);
        ZT_INPUT_CHECK(it->second.shape == want, file, ": tensor ", hf_name(name), " has shape ",
                       shape_str(it->second.shape), ", expected ", shape_str(want),
                       " (model.* settings differ from the file's model?)");
    }
    for (const auto& kv : entries) {
        ZT_INPUT_CHECK(known.count(kv.first) || ignorable_hf(kv.first), file, ": unexpected tensor ", kv.first,
                       " (the file's model has more layers or other parts than this model.*)");
    }

    std::vector<float> buf;
    std::vector<float> tmp;
    std::vector<uint16_t> half;
    for (const Expected& x : expected) {
        if (!wanted(x)) continue;
        const StEntry& e = entries.at(x.spec->name);
        const DType dtype = e.dtype == "F32" ? DType::kF32 : e.dtype == "BF16" ? DType::kBF16 : DType::kF16;
        in.seekg(static_cast<std::streamoff>(data_start + e.begin));
        buf.resize(x.live_numel);
        if (dtype == DType::kF32) {
            in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(e.end - e.begin));
        } else {
            half.resize(x.live_numel);
            in.read(reinterpret_cast<char*>(half.data()), static_cast<std::streamsize>(e.end - e.begin));
            convert_to_f32(half.data(), buf.data(), x.live_numel, dtype);
        }
        if (!in.good()) throw InputError(str(file, ": cannot read the data of tensor ", hf_name(x.spec->name)));
        const float* dst = buf.data();
        if (is_conv1d(x.spec->name)) {
            // The file holds [in, out]; ztrain wants (out, in).
            tmp.resize(x.live_numel);
            transpose(buf.data(), x.live_shape[1], x.live_shape[0], tmp.data());
            dst = tmp.data();
        }
        deliver(x, dst);
    }
}

void import_h5(const std::string& file, const std::vector<Expected>& expected, const Wanted& wanted,
               const Deliver& deliver) {
    silence_hdf5();
    ZT_INPUT_CHECK(fs::exists(file), file, ": no such file");
    const htri_t is_h5 = H5Fis_hdf5(file.c_str());
    ZT_INPUT_CHECK(is_h5 > 0, file, ": not an HDF5 file");
    H5Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    h5_require(f.ok(), true, file, "cannot open as HDF5 (damaged or truncated?)");
    std::set<std::string> known;
    for (const Expected& x : expected) known.insert(x.spec->name);
    // Anything else at the root means the file was written for another model (more layers).
    H5G_info_t info;
    h5_require(H5Gget_info(f.get(), &info) >= 0, true, file, "cannot list the file's datasets");
    for (hsize_t i = 0; i < info.nlinks; ++i) {
        const ssize_t len = H5Lget_name_by_idx(f.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
        h5_require(len >= 0 && len < 4096, true, file, "cannot read a dataset name");
        std::string l(static_cast<size_t>(len) + 1, '\0');
        h5_require(H5Lget_name_by_idx(f.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, l.data(), l.size(),
                                      H5P_DEFAULT) == len,
                   true, file, "cannot read a dataset name");
        l.resize(static_cast<size_t>(len));
        ZT_INPUT_CHECK(known.count(l) || l == "optimizer", file, ": unexpected dataset ", l,
                       " (the file's model has more layers or other parts than this model.*)");
    }

    // Pass 1: every tensor present with the exact shape and a readable element type.
    std::vector<DType> dtypes;
    for (const Expected& x : expected) {
        const std::string& name = x.spec->name;
        const htri_t exists = H5Lexists(f.get(), name.c_str(), H5P_DEFAULT);
        ZT_INPUT_CHECK(exists > 0, file, ": missing tensor ", name, " (expected shape ", shape_str(x.live_shape), ")");
        H5Handle ds(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
        h5_require(ds.ok(), true, file, str(name, " is not a dataset"));
        H5Handle space(H5Dget_space(ds.get()), H5Sclose);
        const int ndims = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
        h5_require(ndims >= 0 && ndims <= 8, true, file, str("tensor ", name, " has an unreadable shape"));
        std::vector<hsize_t> dims(static_cast<size_t>(ndims));
        h5_require(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) == ndims, true, file,
                   str("tensor ", name, " has an unreadable shape"));
        const std::vector<size_t> found(dims.begin(), dims.end());
        ZT_INPUT_CHECK(found == x.live_shape, file, ": tensor ", name, " has shape ", shape_str(found), ", expected ",
                       shape_str(x.live_shape), " (model.* settings differ from the file's model?)");
        require_plain_storage(ds.get(), file, name);
        H5Handle type(H5Dget_type(ds.get()), H5Tclose);
        h5_require(type.ok(), true, file, str("cannot read the element type of ", name));
        const H5T_class_t cls = H5Tget_class(type.get());
        if (cls == H5T_FLOAT) {
            dtypes.push_back(DType::kF32);  // HDF5 converts any float width to native float
            continue;
        }
        const std::string tag = read_str_attr(ds.get(), "dtype", file);
        ZT_INPUT_CHECK(cls == H5T_INTEGER && H5Tget_size(type.get()) == 2 && (tag == "bf16" || tag == "fp16"), file,
                       ": tensor ", name, " is neither floating point nor 16-bit with dtype = bf16 | fp16");
        dtypes.push_back(tag == "bf16" ? DType::kBF16 : DType::kF16);
    }
    // Pass 2: the data of the tensors this rank needs.
    std::vector<float> buf;
    std::vector<uint16_t> half;
    for (size_t i = 0; i < expected.size(); ++i) {
        const Expected& x = expected[i];
        if (!wanted(x)) continue;
        const std::string& name = x.spec->name;
        H5Handle ds(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
        h5_require(ds.ok(), true, file, str("cannot open dataset ", name));
        buf.resize(x.live_numel);
        if (dtypes[i] == DType::kF32) {
            h5_require(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0, true, file,
                       str("cannot read tensor ", name, " (damaged file?)"));
        } else {
            half.resize(x.live_numel);
            h5_require(H5Dread(ds.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, half.data()) >= 0, true,
                       file, str("cannot read tensor ", name, " (damaged file?)"));
            convert_to_f32(half.data(), buf.data(), x.live_numel, dtypes[i]);
        }
        deliver(x, buf.data());
    }
}


}  // namespace

nlohmann::json hf_gpt2_config(long n_layer, long n_head, long n_embd, long n_positions, long vocab_size,
                              DType dtype) {
    const bool gpt2_vocab = vocab_size == 50257;
    nlohmann::json c = {
        {"architectures", {"GPT2LMHeadModel"}},
        {"model_type", "gpt2"},
        {"vocab_size", vocab_size},
        {"n_positions", n_positions},
        {"n_ctx", n_positions},
        {"n_embd", n_embd},
        {"n_layer", n_layer},
        {"n_head", n_head},
        {"n_inner", nullptr},                  // 4 * n_embd, as ztrain's MLP
        {"activation_function", "gelu_new"},   // GELU with the tanh approximation
        {"layer_norm_epsilon", 1e-5},          // ztrain's LayerNorm epsilon
        {"initializer_range", 0.02},
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},                   // ztrain trains without dropout
        {"scale_attn_weights", true},          // scores / sqrt(head size)
        {"tie_word_embeddings", true},         // lm_head is wte
        {"torch_dtype", dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32"},
    };
    c["bos_token_id"] = gpt2_vocab ? nlohmann::json(50256) : nlohmann::json(nullptr);
    c["eos_token_id"] = gpt2_vocab ? nlohmann::json(50256) : nlohmann::json(nullptr);
    return c;
}

void consolidate(const std::string& ckpt_path, const std::string& output, DType dtype, bool with_optimizer) {
    silence_hdf5();
    ZT_INPUT_CHECK(!output.empty(), "--output: no file name given");
    if (fs::is_directory(output) || output.back() == '/') {
        // A Hugging Face model directory: model.safetensors + config.json.
        ZT_INPUT_CHECK(!with_optimizer, "--with-optimizer: a Hugging Face directory ('", output,
                       "') holds weights only; write a .h5 file for the optimizer state");
        const fs::path dir = fs::path(output).lexically_normal();
        const fs::path parent = dir.has_filename() ? dir.parent_path() : dir.parent_path().parent_path();
        ZT_INPUT_CHECK(fs::is_directory(dir) || parent.empty() || fs::is_directory(parent), "--output: directory '",
                       parent.string(), "' does not exist");
        // Everything that can refuse the checkpoint runs before the directory is touched.
        const std::string step_dir = resolve_step_dir(ckpt_path);
        CheckpointReader reader(step_dir);
        const CkptModel m = load_ckpt_model(step_dir, reader.meta());
        ZT_INPUT_CHECK(m.n_layer > 0 && m.n_head > 0 && m.n_embd > 0 && m.seq_len > 0 && m.vocab_size > 0,
                       step_dir, ": the checkpoint does not record every model dimension (n_layer, n_head, n_embd, "
                       "seq_len, vocab_size) needed for config.json");
        const std::string text =
            hf_gpt2_config(m.n_layer, m.n_head, m.n_embd, m.seq_len, m.vocab_size, dtype).dump(2) + "\n";
        std::error_code ec;
        fs::create_directories(dir, ec);
        ZT_INPUT_CHECK(!ec, "--output: cannot create directory '", dir.string(), "': ", ec.message());
        // config.json goes last: a directory with a config holds the matching weights.
        write_atomically((dir / "model.safetensors").string(),
                         [&](const std::string& file) { export_safetensors(reader, m, file, dtype); });
        write_atomically((dir / "config.json").string(), [&](const std::string& file) {
            std::ofstream out(file, std::ios::binary);
            out << text;
            out.close();
            if (!out) throw Error(str("cannot write ", file, " (disk full?)"));
        });
        return;
    }
    const Format fmt = format_of(output, "--output");
    ZT_INPUT_CHECK(!with_optimizer || fmt == Format::kH5, "--with-optimizer: only .h5 output holds optimizer "
                   "state ('", output, "' is safetensors)");
    const fs::path parent = fs::path(output).parent_path();
    ZT_INPUT_CHECK(parent.empty() || fs::is_directory(parent), "--output: directory '", parent.string(),
                   "' does not exist");
    ZT_INPUT_CHECK(!fs::is_directory(output), "--output: '", output, "' is a directory");
    const std::string step_dir = resolve_step_dir(ckpt_path);
    CheckpointReader reader(step_dir);
    const CkptModel model = load_ckpt_model(step_dir, reader.meta());
    write_atomically(output, [&](const std::string& file) {
        if (fmt == Format::kH5) {
            export_h5(reader, model, file, dtype, with_optimizer);
        } else {
            export_safetensors(reader, model, file, dtype);
        }
    });
}

std::string checkpoint_info(const std::string& ckpt_path) {
    silence_hdf5();
    const std::string step_dir = resolve_step_dir(ckpt_path);
    const CkptModel m = load_ckpt_model(step_dir, read_checkpoint_meta(step_dir));
    const nlohmann::json& meta = m.meta;
    std::ostringstream os;
    const auto dim = [](long v) { return v < 0 ? std::string("?") : std::to_string(v); };
    try {
        os << "checkpoint " << step_dir << "\n";
        os << "  step " << meta.value("step", 0L) << " (" << meta.value("applied_steps", 0L) << " applied), "
           << meta.value("samples_seen", uint64_t{0}) << " samples, " << meta.value("tokens_seen", uint64_t{0})
           << " tokens seen\n";
        os << "  written by " << meta.value("world_size", 0) << " rank(s), ZeRO stage " << meta.value("zero_stage", 0)
           << ", working dtype " << meta.value("dtype", std::string("?")) << ", seed "
           << meta.value("seed", uint64_t{0}) << "\n";
        os << "  model: " << dim(m.n_layer) << " layers, " << dim(m.n_head) << " heads, " << dim(m.n_embd)
           << " wide, seq " << dim(m.seq_len) << ", vocab " << dim(m.vocab_size) << " (padded " << dim(m.padded_vocab)
           << ")\n";
        size_t params = 0;
        size_t width = 0;
        for (const CkptTensor& t : m.tensors) {
            params += t.live_numel;
            width = std::max(width, t.name.size());
        }
        os << "  tensors: " << m.tensors.size() << ", " << params << " parameters (fp32 "
           << str(static_cast<double>(params) * 4 / 1048576) << " MiB)\n";
        for (const CkptTensor& t : m.tensors) {
            os << "    " << t.name << std::string(width - t.name.size() + 2, ' ') << shape_str(t.live_shape);
            if (t.live_shape != t.shape) os << " (stored " << shape_str(t.shape) << ")";
            os << "\n";
        }
        uint64_t total = 0;
        os << "  shard files:\n";
        for (const auto& s : meta.at("shards")) {
            const std::string name = s.at("file").get<std::string>();
            const uint64_t bytes = s.at("bytes").get<uint64_t>();
            total += bytes;
            const fs::path p = fs::path(step_dir) / name;
            std::error_code ec;
            const bool present = fs::exists(p, ec);
            const uint64_t on_disk = present ? static_cast<uint64_t>(fs::file_size(p, ec)) : 0;
            os << "    " << name << "  " << bytes << " bytes, rank " << s.value("rank", -1) << ", "
               << s.at("units").size() << " unit range(s)"
               << (!present ? "  MISSING" : on_disk != bytes ? str("  SIZE DIFFERS (", on_disk, " on disk)") : "")
               << "\n";
        }
        os << "  total " << total << " bytes in " << meta.at("shards").size() << " shard file(s)\n";
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(m.meta_file, ": malformed manifest: ", e.what()));
    }
    return os.str();
}

void import_weights(const std::string& path, const ModelLayout& layout, const ModelConfig& cfg, ModelState& state,
                    Communicator* comm) {
    const auto body = [&] {
        ZT_REQUIRE(layout.unit_numel == state.layout().unit_numel, "import_weights: layout differs from the state's");
        const Format fmt = format_of(path, "model.init_from");
        ZT_INPUT_CHECK(fs::is_regular_file(path), "model.init_from: '", path, "' does not exist or is not a file");
        const std::vector<Expected> expected = expected_tensors(layout, cfg);
        // Owned elements start from zero: the padded vocabulary rows and the alignment gaps
        // between tensors must be zero (they are never trained), whatever was there before.
        for (int u = 0; u < layout.num_units(); ++u) {
            for (size_t e = state.owned_begin(u); e < state.owned_end(u); ++e) state.master_base(u)[e] = 0.f;
        }
        const Wanted wanted = [&](const Expected& x) {
            const int u = x.spec->unit;
            const size_t b = std::max(x.spec->offset, state.owned_begin(u));
            const size_t e = std::min(x.spec->offset + x.live_numel, state.owned_end(u));
            return e > b;
        };
        const Deliver deliver = [&](const Expected& x, const float* data) {
            const int u = x.spec->unit;
            const size_t b = std::max(x.spec->offset, state.owned_begin(u));
            const size_t e = std::min(x.spec->offset + x.live_numel, state.owned_end(u));
            float* master = state.master_base(u);
            for (size_t i = b; i < e; ++i) master[i] = data[i - x.spec->offset];
        };
        if (fmt == Format::kH5) {
            import_h5(path, expected, wanted, deliver);
        } else {
            import_safetensors(path, expected, wanted, deliver);
        }
    };
    if (comm) {
        agree_across_ranks(*comm, body);
    } else {
        body();
    }
    state.sync_working_from_master();
}

}  // namespace zt
