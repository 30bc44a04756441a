// Weight import (model.init_from): a consolidated .h5, a .safetensors file or a Hugging Face
// model directory (config.json checked against the model; one file or index + shards) into the owned
// master elements of a ModelState of any world size / stage (formats: export.hpp).
//
// Memory: one tensor at a time, and only tensors that overlap the rank's owned elements.
// Trust: the file is untrusted: every length, offset, dtype and shape is checked against
// the file size and the model before anything is allocated or read. The state's buffers
// are written only through ModelState::copy_from_host (they may be device memory).
// Not here: AdamW state import (an initialized run starts its optimizer from zero).
#include "ztrain/ckpt/export.hpp"
#include "ztrain/ckpt/model_source.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <vector>

#include "hdf5_util.hpp"
#include "hf_family.hpp"
#include "manifest_agreement.hpp"
#include "safetensors.hpp"
#include "weights_file.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::require_plain_storage;
using h5::silence_hdf5;

namespace {

/// Fixed-length string attributes read back from an imported .h5 are capped.
constexpr size_t kMaxStringAttr = 16u << 20;

/// What the model expects a file to hold for one tensor.
struct Expected {
    const ParamSpec* spec = nullptr;
    std::vector<size_t> live_shape;  ///< ztrain orientation, wte cut to vocab_size rows
    size_t live_numel = 0;
};

std::vector<Expected> expected_tensors(const ModelLayout& layout, const ModelConfig& cfg) {
    std::vector<Expected> out;
    for (const ParamSpec& p : layout.params) {
        if (p.adapter) continue;  // LoRA's adapters: not in a base model's file
        Expected e;
        e.spec = &p;
        e.live_shape = p.shape;
        // Vocabulary-row tensors (wte; Llama's embed_tokens and lm_head) without their padding.
        if (p.init_numel < p.numel) e.live_shape[0] = static_cast<size_t>(cfg.vocab_size);
        e.live_numel = shape_numel(e.live_shape);
        ZT_REQUIRE(e.live_numel <= p.numel, p.name);
        out.push_back(std::move(e));
    }
    return out;
}

/// Receives a piece of one tensor's values (fp32, ztrain orientation): its live elements
/// [from, from + count), in order, every live element once.
using Deliver = std::function<void(const Expected&, size_t from, size_t count, const float*)>;
/// The most elements a tensor stored as ztrain lays it out is read in at once: an import
/// holds a piece, not the tensor (a 128k-vocabulary embedding is gigabytes in fp32).
constexpr size_t kImportPieceFloats = size_t{1} << 20;
/// Whether this rank needs a tensor at all (it owns some of its elements).
using Wanted = std::function<bool(const Expected&)>;

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

/// The tensors of one safetensors file or of a sharded model's shards, by their file names.
struct SafetensorsSet {
    struct Item {
        SafetensorsReader* reader;
        const SafetensorsEntry* entry;
    };
    std::vector<std::unique_ptr<SafetensorsReader>> readers;
    std::map<std::string, Item> by_name;
    std::string source;  ///< the file, or the index: what a missing tensor is reported against
    /// Why a tensor's shape may differ: ztrain's model.* keys, or a tool's config.json.
    std::string shape_hint = "model.* settings differ from the file's model?";

    void add(const std::string& file) {
        readers.push_back(std::make_unique<SafetensorsReader>(file));
        for (const auto& [key, entry] : readers.back()->entries()) by_name.emplace(key, Item{readers.back().get(), &entry});
    }
};

SafetensorsSet open_single(const std::string& file) {
    SafetensorsSet set;
    set.source = file;
    set.add(file);
    return set;
}

/// A sharded model: the index and its shards must agree tensor for tensor.
SafetensorsSet open_sharded(const fs::path& dir, const std::string& index_file) {
    const std::map<std::string, std::string> weight_map = read_safetensors_index(index_file);
    std::set<std::string> shards;
    for (const auto& kv : weight_map) shards.insert(kv.second);
    // Every shard present before any is read: a missing one is the clearest message. The
    // error_code overload: a name the file system refuses (longer than NAME_MAX, a symlink
    // loop) is bad input too, not a std::filesystem::filesystem_error escaping.
    for (const std::string& shard : shards) {
        std::error_code ec;
        const bool present = fs::is_regular_file(dir / shard, ec);
        const bool missing = !ec || ec == std::errc::no_such_file_or_directory;
        ZT_INPUT_CHECK(present, index_file, ": shard ", shard, " (of tensor ",
                       std::find_if(weight_map.begin(), weight_map.end(),
                                    [&](const auto& kv) { return kv.second == shard; })->first,
                       missing ? ") does not exist in " : ") cannot be opened in ", dir.string(),
                       missing ? "" : ": " + ec.message());
    }
    SafetensorsSet set;
    set.source = index_file;
    for (const std::string& shard : shards) {
        const std::string file = (dir / shard).string();
        set.readers.push_back(std::make_unique<SafetensorsReader>(file));
        for (const auto& [key, entry] : set.readers.back()->entries()) {
            const auto seen = set.by_name.find(key);
            ZT_INPUT_CHECK(seen == set.by_name.end(), index_file, ": tensor ", key, " is in two shards: ",
                           seen == set.by_name.end() ? "" : seen->second.reader->file(), " and ", file);
            const auto listed = weight_map.find(key);
            ZT_INPUT_CHECK(listed != weight_map.end() && listed->second == shard, index_file, ": tensor ", key,
                           " is in shard ", shard, " but weight_map ",
                           listed == weight_map.end() ? std::string("does not list it") : "lists it in " + listed->second);
            set.by_name.emplace(key, SafetensorsSet::Item{set.readers.back().get(), &entry});
        }
    }
    for (const auto& [key, shard] : weight_map) {
        ZT_INPUT_CHECK(set.by_name.count(key), index_file, ": weight_map lists tensor ", key, " in shard ", shard,
                       ", which does not hold it");
    }
    return set;
}

/// A safetensors set's tensors by their ztrain names: (the name in the file, its entry).
using ZtrainNamed = std::map<std::string, std::pair<std::string, SafetensorsSet::Item>>;

ZtrainNamed by_ztrain_name(const SafetensorsSet& set, const HfNaming& family) {
    ZtrainNamed by_name;
    for (const auto& [key, item] : set.by_name) {
        std::string name = family.ztrain_name(key);
        ZT_INPUT_CHECK(by_name.count(name) == 0, set.source, ": tensor ", name,
                       " appears twice (with and without the ", family.prefix, " prefix)");
        by_name.emplace(std::move(name), std::make_pair(key, item));
    }
    return by_name;
}

/// Weights are finite: a NaN or infinity (a damaged file, or a run that diverged before it
/// was saved) would make every loss, score and sample meaningless while the tool exits 0.
/// `at` is where `data` starts in the tensor.
void require_finite(const float* data, size_t n, size_t at, const std::string& file, const std::string& tensor) {
    const float* bad = std::find_if(data, data + n, [](float v) { return !std::isfinite(v); });
    ZT_INPUT_CHECK(bad == data + n, file, ": tensor ", tensor, " holds a non-finite value (",
                   std::isnan(*bad) ? "nan" : "inf", ") at element ", at + static_cast<size_t>(bad - data),
                   ": the file is damaged, or the run that wrote it diverged");
}

/// Safetensors tensors in the family's Hugging Face names and layout (the name prefix is
/// optional). Every name and shape is checked against the model before any data is read.
void import_safetensors(SafetensorsSet& set, const HfNaming& family, const std::vector<Expected>& expected,
                        const Wanted& wanted, const Deliver& deliver) {
    const ZtrainNamed by_name = by_ztrain_name(set, family);
    std::set<std::string> known;
    for (const Expected& x : expected) {
        const std::string& name = x.spec->name;
        known.insert(name);
        const auto it = by_name.find(name);
        const std::vector<size_t> want = family.file_shape(name, x.live_shape);
        ZT_INPUT_CHECK(it != by_name.end(), set.source, ": missing tensor ", family.hf_name(name),
                       " (expected shape ", shape_str(want), ")");
        const SafetensorsEntry& e = *it->second.second.entry;
        const std::string& file = it->second.second.reader->file();
        DType dtype = DType::kF32;
        ZT_INPUT_CHECK(safetensors_float_dtype(e.dtype, &dtype), file, ": tensor ", family.hf_name(name),
                       " has dtype ", e.dtype, " (import reads F32, BF16 and F16)");
        ZT_INPUT_CHECK(e.shape == want, file, ": tensor ", family.hf_name(name), " has shape ", shape_str(e.shape),
                       ", expected ", shape_str(want), " (", set.shape_hint, ")");
    }
    for (const auto& kv : by_name) {
        ZT_INPUT_CHECK(known.count(kv.first) || family.ignored(kv.first), kv.second.second.reader->file(),
                       ": unexpected tensor ", kv.first,
                       " (the file's model has more layers or other parts than this model.*)");
    }

    std::vector<float> buf;
    std::vector<float> tmp;
    for (const Expected& x : expected) {
        if (!wanted(x)) continue;
        const std::string& name = x.spec->name;
        const auto& [file_name, item] = by_name.at(name);
        if (family.transposed(name)) {
            // The file holds [in, out]; ztrain wants (out, in): whole (GPT-2's Conv1D weights).
            item.reader->read_f32(file_name, *item.entry, buf);
            tmp.resize(x.live_numel);
            require_finite(buf.data(), x.live_numel, 0, item.reader->file(), file_name);
            transpose(buf.data(), x.live_shape[1], x.live_shape[0], tmp.data());
            deliver(x, 0, x.live_numel, tmp.data());
            continue;
        }
        buf.resize(std::min(x.live_numel, kImportPieceFloats));
        for (size_t at = 0; at < x.live_numel; at += kImportPieceFloats) {
            const size_t n = std::min(kImportPieceFloats, x.live_numel - at);
            item.reader->read_f32_range(file_name, *item.entry, at, n, buf.data());
            require_finite(buf.data(), n, at, item.reader->file(), file_name);
            deliver(x, at, n, buf.data());
        }
    }
}

/// DIR/config.json as JSON; InputError naming the file when it is missing or not JSON.
nlohmann::json read_config_json(const std::string& dir) {
    const std::string file = (fs::path(dir) / "config.json").string();
    ZT_INPUT_CHECK(fs::is_regular_file(file), file, ": no such file (a Hugging Face model directory holds "
                   "config.json next to its safetensors)");
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    ZT_INPUT_CHECK(in.good() || in.eof(), file, ": cannot read");
    try {
        return nlohmann::json::parse(text.str());
    } catch (const std::exception& e) {
        throw InputError(str(file, ": not valid JSON: ", e.what()));
    }
}

/// The model.init_from directory's config.json describes the model being trained.
void check_hf_config(const std::string& dir, const ModelConfig& model) {
    const std::string file = (fs::path(dir) / "config.json").string();
    Config run;
    run.model = model;
    for (const HfSetting& s : hf_model_settings(read_config_json(dir), file)) {
        if (!s.binding) continue;
        Config theirs = run;
        set_config_value(theirs, s.key, s.text);
        const std::string ours = config_value_text(run, s.key);
        const std::string want = config_value_text(theirs, s.key);
        ZT_INPUT_CHECK(ours == want, "model.init_from = ", dir, ": ", file, ": ", s.hf_field, " = ", want, ", but ",
                       s.key, " = ", ours, " (use --model.from_hf=", dir, " to take the model's settings)");
    }
}

/// A Hugging Face model directory: config.json checked against the model, then
/// model.safetensors, or the shards model.safetensors.index.json names. `key` names where
/// ztrain was given it ("model.init_from = "), or is empty for a tool's model argument.
SafetensorsSet open_hf_directory(const std::string& dir, const ModelConfig& model, const std::string& key) {
    check_hf_config(dir, model);
    const fs::path d(dir);
    if (fs::exists(d / "model.safetensors")) return open_single((d / "model.safetensors").string());
    const std::string index = (d / "model.safetensors.index.json").string();
    ZT_INPUT_CHECK(fs::exists(index), key, dir,
                   ": holds neither model.safetensors nor model.safetensors.index.json (pytorch_model.bin is not "
                   "read: convert the model to safetensors)");
    return open_sharded(d, index);
}

/// A consolidated .h5 (ztrain names and orientation; fp32, or 16-bit with a dtype tag).
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
        require_finite(buf.data(), x.live_numel, 0, file, name);
        deliver(x, 0, x.live_numel, buf.data());
    }
}

/// This rank's owned elements of a unit (the state's shard plan, for the state's rank).
ElementRange owned_range(StateShards& shards, int unit) {
    return ElementRange{shards.owned_begin(unit), shards.owned_end(unit)};
}

/// Zeroes the owned master elements of every unit: the padded vocabulary rows and the
/// alignment gaps between tensors must be zero (they are never trained), whatever was
/// there before. A bounded host buffer of zeros, copied in pieces. LoRA's adapters keep
/// their initial values (no base model's file holds them).
void zero_owned_master(ModelState& state) {
    const int num_units = state.layout().num_units();
    StateShards shards = state.shards();
    size_t largest = 0;
    for (int u = 0; u < num_units; ++u) largest = std::max(largest, owned_range(shards, u).size());
    const std::vector<float> zeros(std::min<size_t>(largest, size_t{1} << 20), 0.f);
    const auto zero = [&](int u, size_t begin, size_t end) {
        for (size_t e = begin; e < end; e += zeros.size()) {
            shards.write(u, StateShards::kMaster, e, std::min(end, e + zeros.size()), zeros.data());
        }
    };
    for (int u = 0; u < num_units; ++u) {
        const ElementRange r = owned_range(shards, u);
        size_t at = r.begin;
        for (const ParamSpec& p : state.layout().params) {
            if (p.unit != u || !p.adapter) continue;
            zero(u, at, std::max(at, std::min(p.offset, r.end)));
            at = std::max(at, std::min(p.offset + p.numel, r.end));
        }
        zero(u, at, r.end);
    }
}

}  // namespace

void import_weights(const std::string& path, const ModelLayout& state_layout, const ModelConfig& cfg,
                    ModelState& state, Communicator* comm) {
    const auto body = [&] {
        ZT_REQUIRE(state_layout.unit_numel == state.layout().unit_numel,
                   "import_weights: layout differs from the state's");
        // The files hold every tensor: a pipeline stage expects them all and takes its own
        // units' (it owns no elements of the others).
        const ModelLayout layout = all_stages(state_layout);
        const bool hf_dir = fs::is_directory(path);
        const WeightsFormat fmt = hf_dir ? WeightsFormat::kSafetensors : weights_format_of(path, "model.init_from");
        ZT_INPUT_CHECK(hf_dir || fs::is_regular_file(path), "model.init_from: '", path,
                       "' does not exist or is not a file or directory");
        // The files hold unsplit tensors: a tensor-parallel rank takes its slices of them.
        const bool split = layout.split.size > 1;
        const ModelLayout whole = split ? make_model_layout(layout.model) : ModelLayout{};
        const ModelLayout& file_layout = split ? whole : layout;
        const std::vector<Expected> expected = expected_tensors(file_layout, cfg);
        zero_owned_master(state);
        StateShards shards = state.shards();
        // The runs of each tensor of this rank's layout in the unsplit one (one for a whole tensor).
        const auto runs_of = [&](const Expected& x) {
            const ParamSpec& w = *x.spec;
            const ParamSpec& p = layout.params[static_cast<size_t>(&w - file_layout.params.data())];
            if (!split) return std::vector<SliceRun>{{p.offset, p.offset, p.numel}};
            return runs_within(slice_runs(layout, whole, p.unit), p.offset, p.offset + p.numel, true);
        };
        // Each run's part this rank owns and the file holds (live elements): its unit range, and
        // where it starts in the tensor's data.
        const auto for_owned = [&](const Expected& x, const std::function<void(ElementRange, size_t)>& fn) {
            const ElementRange r = owned_range(shards, x.spec->unit);
            for (const SliceRun& run : runs_within(runs_of(x), r.begin, r.end, true)) {
                const size_t from = run.whole - x.spec->offset;  // in the tensor's data
                if (from >= x.live_numel) continue;
                fn(ElementRange{run.local, run.local + std::min(run.length, x.live_numel - from)}, from);
            }
        };
        const Wanted wanted = [&](const Expected& x) {
            bool any = false;
            for_owned(x, [&](ElementRange, size_t) { any = true; });
            return any;
        };
        const Deliver deliver = [&](const Expected& x, size_t at, size_t n, const float* data) {
            for_owned(x, [&](ElementRange part, size_t from) {
                // The owned part holds the tensor's elements [from, from + its size): the piece's share.
                const size_t b = std::max(from, at);
                const size_t e = std::min(from + (part.end - part.begin), at + n);
                if (e > b) {
                    shards.write(x.spec->unit, StateShards::kMaster, part.begin + (b - from), part.begin + (e - from),
                                 data + (b - at));
                }
            });
        };
        if (fmt == WeightsFormat::kH5) {
            import_h5(path, expected, wanted, deliver);
        } else {
            SafetensorsSet set = hf_dir ? open_hf_directory(path, cfg, "model.init_from = ") : open_single(path);
            import_safetensors(set, model_family(cfg).hf_naming(), expected, wanted, deliver);
        }
    };
    // A path the file system refuses (no permission, a symlink loop, a name too long) is
    // bad input naming the key, not a std::filesystem::filesystem_error (exit 1).
    const auto checked_body = [&] {
        try {
            body();
        } catch (const fs::filesystem_error& e) {
            throw InputError(str("model.init_from = ", path, ": ", e.what()));
        }
    };
    if (comm) {
        agree_on_manifest(*comm, checked_body);
    } else {
        checked_body();
    }
    state.shards().sync_working_from_master();
}

struct WeightsRanges::Impl {
    std::string path;
    ModelConfig cfg;
    std::vector<Expected> expected;
    std::optional<SafetensorsSet> set;  // open while ranges are read (not for .h5)
    ZtrainNamed by_name;                // set's tensors by ztrain name
    const Expected* cached = nullptr;   // the tensor whose live values `values` holds
    std::vector<float> values;

    /// Live elements [b, e) of tensor x (tensor coordinates) into out: a tensor stored as
    /// ztrain lays it out is read in place from its file; a transposed one (or a .h5's)
    /// whole, once, and kept.
    void read(const Expected& x, size_t b, size_t e, float* out) {
        const HfNaming& family = model_family(cfg).hf_naming();
        if (set && !family.transposed(x.spec->name)) {
            const auto& [file_name, item] = by_name.at(x.spec->name);
            item.reader->read_f32_range(file_name, *item.entry, b, e - b, out);
            require_finite(out, e - b, b, item.reader->file(), file_name);
            return;
        }
        if (cached != &x) load(x);
        std::copy(values.begin() + static_cast<std::ptrdiff_t>(b), values.begin() + static_cast<std::ptrdiff_t>(e), out);
    }

    /// Reads tensor `x` whole into `values` (through the importers, so with their checks).
    void load(const Expected& x) {
        const Wanted only = [&](const Expected& e) { return &e == &x; };
        const Deliver keep = [&](const Expected& e, size_t at, size_t n, const float* data) {
            values.resize(e.live_numel);
            std::copy(data, data + n, values.begin() + static_cast<std::ptrdiff_t>(at));
        };
        if (set) {
            import_safetensors(*set, model_family(cfg).hf_naming(), expected, only, keep);
        } else {
            import_h5(path, expected, only, keep);
        }
        cached = &x;
    }
};

WeightsRanges::WeightsRanges(std::string path, const ModelLayout& layout, const ModelConfig& cfg)
    : m(std::make_unique<Impl>()) {
    m->path = std::move(path);
    m->cfg = cfg;
    m->expected = expected_tensors(layout, cfg);
    const bool hf_dir = fs::is_directory(m->path);
    ZT_INPUT_CHECK(hf_dir || fs::is_regular_file(m->path), m->path,
                   ": the LoRA base's weights are not there (not a file or directory)");
    if (hf_dir) {
        m->set = open_hf_directory(m->path, cfg, "model.init_from = ");
    } else if (weights_format_of(m->path, "the LoRA base") == WeightsFormat::kSafetensors) {
        m->set = open_single(m->path);
    }
    if (m->set) {
        // Every name, dtype and shape checked once, as an import checks them (nothing read).
        import_safetensors(*m->set, model_family(cfg).hf_naming(), m->expected,
                           [](const Expected&) { return false; }, [](const Expected&, size_t, size_t, const float*) {});
        m->by_name = by_ztrain_name(*m->set, model_family(cfg).hf_naming());
    }
}

WeightsRanges::~WeightsRanges() = default;

void WeightsRanges::read(int unit, size_t begin, size_t end, float* out) {
    std::fill(out, out + (end - begin), 0.f);
    for (const Expected& x : m->expected) {
        const ParamSpec& p = *x.spec;
        const size_t b = std::max(begin, p.offset);
        const size_t e = std::min(end, p.offset + x.live_numel);
        if (p.unit != unit || e <= b) continue;
        m->read(x, b - p.offset, e - p.offset, out + (b - begin));
    }
}

void read_hf_weights(const std::string& dir, const ModelLayout& layout, const ModelConfig& cfg, const WeightSink& put) {
    const std::vector<Expected> expected = expected_tensors(layout, cfg);
    SafetensorsSet set = open_hf_directory(dir, cfg, "");
    // The model is the directory's own config.json, not ztrain's keys.
    set.shape_hint = "its config.json does not describe these weights?";
    import_safetensors(
        set, model_family(cfg).hf_naming(), expected, [](const Expected&) { return true; },
        [&](const Expected& x, size_t at, size_t n, const float* data) { put(x.spec->unit, x.spec->offset + at, data, n); });
}

std::vector<HfSetting> read_hf_config(const std::string& dir) {
    try {
        ZT_INPUT_CHECK(fs::is_directory(dir), "model.from_hf = ", dir, ": not a directory (expected a Hugging Face "
                       "model directory holding config.json)");
        return hf_model_settings(read_config_json(dir), (fs::path(dir) / "config.json").string());
    } catch (const fs::filesystem_error& e) {
        throw InputError(str("model.from_hf = ", dir, ": ", e.what()));  // as in import_weights
    }
}

}  // namespace zt
