// Checkpoint consolidation (zt-consolidate: one .h5, .safetensors or Hugging Face directory)
// and checkpoint description (--info). Formats and guarantees: export.hpp.
//
// Memory: one tensor at a time (fp32 as read, plus one transposed or converted copy);
// nothing here ever holds the whole model. Trust: meta.h5 is hash-checked by
// read_checkpoint_meta and the shards by CheckpointReader (the reader resume uses too).
// Not here: the safetensors byte format (safetensors.cpp), Hugging Face names and layouts
// (the model family's, ztrain/model/family.hpp), the model record's versions (model_record.cpp).
#include "ztrain/ckpt/export.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "hdf5_util.hpp"
#include "hf_family.hpp"
#include "model_record.hpp"
#include "safetensors.hpp"
#include "weights_file.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/model_source.hpp"
#include "ztrain/core/comma_list.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/output_paths.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::silence_hdf5;

namespace {

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

/// An adapted weight's LoRA tensors, merged into it by --lora merge.
struct CkptAdapter {
    CkptTensor a;  ///< (r, in)
    CkptTensor b;  ///< (out, r)
};

struct CkptModel {
    std::string step_dir;
    std::string meta_file;
    nlohmann::json meta;
    std::vector<CkptTensor> tensors;
    /// The recorded model, its dimensions corrected by the tensors' shapes; -1 where a
    /// version 1 checkpoint records neither (n_head is in no tensor shape).
    ModelConfig model;
    long padded_vocab = -1;
    /// --lora merge: the adapters by the name of the weight they adapt (they are then no
    /// tensors of the export), and their scale alpha / r.
    std::map<std::string, CkptAdapter> merged;
    double lora_scale = 0.0;
};

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
                               shape_numel(c.shape) <= units[static_cast<size_t>(c.unit)] - c.offset,
                           m.meta_file, ": tensor ", c.name, " ", shape_str(c.shape), " at unit ", c.unit, " offset ",
                           c.offset, " does not fit the units of the checkpoint");
            c.live_shape = c.shape;
            m.tensors.push_back(std::move(c));
        }
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(m.meta_file, ": malformed manifest: ", e.what()));
    }
    m.model = recorded_model(meta, m.meta_file);
    m.meta = std::move(meta);
    // What the tensors themselves say wins over (and is checked against) the record.
    int blocks = 0;
    for (CkptTensor& t : m.tensors) {
        if (ends_with(t.name, ".ln_1.weight") || ends_with(t.name, ".input_layernorm.weight")) ++blocks;
        if (t.name == "wpe.weight" && t.shape.size() == 2) m.model.seq_len = static_cast<int>(t.shape[0]);
        // The vocabulary-row tensors (GPT-2's wte; Llama's embedding and untied head) are
        // exported without their padded rows.
        if (t.name != "wte.weight" && t.name != "model.embed_tokens.weight" && t.name != "lm_head.weight") continue;
        ZT_INPUT_CHECK(t.shape.size() == 2, m.meta_file, ": ", t.name, " has shape ", shape_str(t.shape));
        m.padded_vocab = static_cast<long>(t.shape[0]);
        m.model.n_embd = static_cast<int>(t.shape[1]);
        ZT_INPUT_CHECK(m.model.vocab_size > 0, m.meta_file,
                       ": the checkpoint does not record model.vocab_size (neither in its model record nor in its "
                       "config_ini), so the padded embedding rows cannot be told apart");
        ZT_INPUT_CHECK(m.model.vocab_size <= m.padded_vocab, m.meta_file, ": model.vocab_size = ", m.model.vocab_size,
                       " exceeds the ", m.padded_vocab, " rows of ", t.name);
        t.live_shape[0] = static_cast<size_t>(m.model.vocab_size);
    }
    m.model.n_layer = blocks;
    for (CkptTensor& t : m.tensors) t.live_numel = shape_numel(t.live_shape);
    return m;
}

/// Reads one tensor's exported elements of `which` ("master", "adam_m", "adam_v").
void read_tensor(CheckpointReader& reader, const CkptTensor& t, const char* which, std::vector<float>& buf) {
    buf.resize(t.live_numel);
    // The live rows of wte (or embed_tokens, lm_head) are its leading elements, so one
    // contiguous range covers every tensor.
    reader.read(t.unit, t.offset, t.offset + t.live_numel, which, buf.data());
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
// .h5 (ztrain names and orientation)
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

/// Creates `path`'s dataset of `shape` in the exported dtype and writes `data` (fp32) into
/// it, converting through `scratch` for 16-bit dtypes.
void write_tensor_dataset(hid_t parent, const std::string& name, const std::vector<size_t>& shape, const float* data,
                          DType t, std::vector<uint16_t>& scratch, const std::string& file) {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    h5_require(space.ok(), false, file, str("cannot create the dataspace of ", name));
    const hid_t type = t == DType::kF32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16;
    H5Handle dcpl(h5::untimed_create_plist(H5P_DATASET_CREATE), H5Pclose);
    h5_require(dcpl.ok(), false, file, str("cannot set up dataset ", name));
    H5Handle ds(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose);
    h5_require(ds.ok(), false, file, str("cannot create dataset ", name));
    const void* src = data;
    const size_t n = shape_numel(shape);
    if (t != DType::kF32) {
        scratch.resize(n);
        convert_from_f32(data, scratch.data(), n, t);
        src = scratch.data();
    }
    h5_require(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, src) >= 0, false, file,
               str("cannot write dataset ", name, " (disk full?)"));
    write_str_attr(ds.get(), "dtype", dtype_name(t), file);
}

void export_h5(CheckpointReader& reader, const CkptModel& m, const std::string& file, DType t, bool with_optimizer) {
    H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
    const nlohmann::json& meta = m.meta;
    write_str_attr(f.get(), "format", "ztrain-weights", file);
    write_i64_attr(f.get(), "step", meta.value("step", 0L), file);
    write_i64_attr(f.get(), "applied_steps", meta.value("applied_steps", 0L), file);
    write_i64_attr(f.get(), "tokens_seen", static_cast<long long>(meta.value("tokens_seen", uint64_t{0})), file);
    write_i64_attr(f.get(), "n_layer", m.model.n_layer, file);
    write_i64_attr(f.get(), "n_head", m.model.n_head, file);
    write_i64_attr(f.get(), "n_embd", m.model.n_embd, file);
    write_i64_attr(f.get(), "seq_len", m.model.seq_len, file);
    write_i64_attr(f.get(), "vocab_size", m.model.vocab_size, file);
    write_i64_attr(f.get(), "vocab_pad_to", m.model.vocab_pad_to, file);
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
        H5Handle gcpl(h5::untimed_create_plist(H5P_GROUP_CREATE), H5Pclose);
        h5_require(gcpl.ok(), false, file, "cannot set up group optimizer");
        H5Handle opt(H5Gcreate2(f.get(), "optimizer", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
        h5_require(opt.ok(), false, file, "cannot create group optimizer");
        for (const CkptTensor& tensor : m.tensors) {
            H5Handle g(H5Gcreate2(opt.get(), tensor.name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
            h5_require(g.ok(), false, file, str("cannot create group optimizer/", tensor.name));
            for (const char* which : {"adam_m", "adam_v"}) {
                read_tensor(reader, tensor, which, buf);
                write_tensor_dataset(g.get(), which, tensor.live_shape, buf.data(), DType::kF32, scratch, file);
            }
        }
    }
    h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
}

// ---------------------------------------------------------------------------------------
// .safetensors (the family's Hugging Face names and layout)
// ---------------------------------------------------------------------------------------

/// w (out, in) += scale B A, from the adapter's tensors in the checkpoint.
void merge_adapter(CheckpointReader& reader, const CkptAdapter& adapter, double scale, std::vector<float>& w) {
    std::vector<float> a;
    std::vector<float> b;
    read_tensor(reader, adapter.a, "master", a);
    read_tensor(reader, adapter.b, "master", b);
    const size_t r = adapter.a.shape[0];
    const size_t in = adapter.a.shape[1];
    const size_t out = adapter.b.shape[0];
    ZT_INPUT_CHECK(w.size() == out * in && adapter.b.shape[1] == r, adapter.a.name, ": adapter shapes ",
                   shape_str(adapter.a.shape), " and ", shape_str(adapter.b.shape), " do not fit their weight");
    for (size_t o = 0; o < out; ++o) {
        for (size_t i = 0; i < in; ++i) {
            double sum = 0.0;
            for (size_t k = 0; k < r; ++k) sum += static_cast<double>(b[o * r + k]) * a[k * in + i];
            w[o * in + i] = static_cast<float>(w[o * in + i] + scale * sum);
        }
    }
}

/// Writes the tensors m.tensors[i] for i in `which` (in that order) to `file`, each named
/// `prefix` + its Hugging Face name.
void export_safetensors(CheckpointReader& reader, const CkptModel& m, const Family& family, const std::string& file,
                        DType t, const std::vector<size_t>& which, const std::string& prefix = "") {
    const HfNaming& names = family.hf_naming();
    std::vector<SafetensorsWriter::Tensor> tensors;
    for (size_t i : which) {
        const CkptTensor& tensor = m.tensors[i];
        tensors.push_back({prefix + names.hf_name(tensor.name), names.file_shape(tensor.name, tensor.live_shape)});
    }
    nlohmann::ordered_json metadata = {{"format", "pt"},
                                       {"source", "ztrain"},
                                       {"step", std::to_string(m.meta.value("step", 0L))}};
    for (const auto& [key, value] : family.hf_metadata(m.model)) metadata[key] = value;
    metadata["config_ini"] = m.meta.value("config_ini", std::string());
    SafetensorsWriter out(file, tensors, t, metadata);
    std::vector<float> buf;
    std::vector<float> other;  // transposed copy, or the 16-bit conversion's storage
    for (size_t i : which) {
        const CkptTensor& tensor = m.tensors[i];
        read_tensor(reader, tensor, "master", buf);
        const auto adapter = m.merged.find(tensor.name);
        if (adapter != m.merged.end()) merge_adapter(reader, adapter->second, m.lora_scale, buf);
        const float* src = buf.data();
        if (names.transposed(tensor.name)) {
            other.resize(tensor.live_numel);
            transpose(buf.data(), tensor.live_shape[0], tensor.live_shape[1], other.data());
            src = other.data();
        }
        if (t == DType::kF32) {
            out.write(src, tensor.live_numel * sizeof(float));
            continue;
        }
        // Convert into whichever buffer `src` is not: no third full-size buffer.
        void* dst = buf.data();
        if (src == buf.data()) {
            other.resize((tensor.live_numel + 1) / 2);
            dst = other.data();
        }
        convert_from_f32(src, dst, tensor.live_numel, t);
        out.write(dst, tensor.live_numel * dtype_size(t));
    }
    out.close();
}

std::vector<size_t> every_tensor(const CkptModel& m) {
    std::vector<size_t> all(m.tensors.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
}

/// The tensors of each weights file, as save_pretrained(max_shard_size=...) splits them
/// (huggingface_hub's split_state_dict_into_shards_factory): in order, a file is closed when
/// the next tensor would take it over `max_bytes`; a tensor larger than `max_bytes` gets a
/// file of its own, listed at once (before the file being filled). 0: one file.
std::vector<std::vector<size_t>> split_into_shards(const CkptModel& m, DType t, uint64_t max_bytes) {
    if (max_bytes == 0) return {every_tensor(m)};
    std::vector<std::vector<size_t>> shards;
    std::vector<size_t> current;
    uint64_t current_bytes = 0;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
        const uint64_t bytes = static_cast<uint64_t>(m.tensors[i].live_numel) * dtype_size(t);
        if (bytes > max_bytes) {
            shards.push_back({i});
            continue;
        }
        if (current_bytes + bytes > max_bytes && !current.empty()) {
            shards.push_back(std::move(current));
            current.clear();
            current_bytes = 0;
        }
        current.push_back(i);
        current_bytes += bytes;
    }
    if (!current.empty()) shards.push_back(std::move(current));
    return shards;
}

/// "model-00002-of-00005.safetensors": save_pretrained's name of shard k (from 0) of n.
std::string shard_file_name(size_t k, size_t n) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
    return name;
}

/// model.safetensors.index.json as save_pretrained writes it: {"metadata": {"total_parameters",
/// "total_size" (bytes of tensor data)}, "weight_map": {Hugging Face name: shard file}}, keys
/// sorted, indented by 2, with a final newline.
std::string shard_index_text(const CkptModel& m, const Family& family, DType t,
                             const std::vector<std::vector<size_t>>& shards) {
    nlohmann::json index;  // nlohmann::json keeps its keys sorted, as json.dumps(sort_keys=True)
    uint64_t params = 0;
    for (const CkptTensor& tensor : m.tensors) params += tensor.live_numel;
    index["metadata"] = {{"total_parameters", params}, {"total_size", params * dtype_size(t)}};
    index["weight_map"] = nlohmann::json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
        for (size_t i : shards[k]) {
            index["weight_map"][family.hf_naming().hf_name(m.tensors[i].name)] = shard_file_name(k, shards.size());
        }
    }
    return index.dump(2) + "\n";
}

void write_text_file(const std::string& path, const std::string& text) {
    write_atomically(path, [&](const std::string& file) {
        std::ofstream out(file, std::ios::binary);
        out << text;
        out.close();
        if (!out) throw Error(str("cannot write ", file, " (disk full?)"));
    });
}

/// Removes what an earlier export left in `dir` that this one did not write: the single file,
/// the index or shards of another count, any of which a loader could otherwise read.
void remove_stale_weights(const fs::path& dir, const std::vector<std::string>& written) {
    std::vector<fs::path> stale;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        const bool weights = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                             (name.rfind("model-", 0) == 0 && ends_with(name, ".safetensors") &&
                              name.find("-of-") != std::string::npos);
        if (weights && std::find(written.begin(), written.end(), name) == written.end()) stale.push_back(e.path());
    }
    for (const fs::path& p : stale) {
        std::error_code ec;
        fs::remove(p, ec);
        if (ec) throw Error(str("cannot remove ", p.string(), " (an earlier export's): ", ec.message()));
    }
}

/// The weights of a Hugging Face directory: model.safetensors, or shards and their index.
/// Returns the files written.
std::vector<std::string> export_hf_weights(CheckpointReader& reader, const CkptModel& m, const Family& family,
                                           const fs::path& dir, DType dtype, uint64_t max_shard_bytes) {
    const std::vector<std::vector<size_t>> shards = split_into_shards(m, dtype, max_shard_bytes);
    std::vector<std::string> names;
    for (size_t k = 0; k < shards.size(); ++k) {
        names.push_back(shards.size() == 1 ? "model.safetensors" : shard_file_name(k, shards.size()));
        write_atomically((dir / names.back()).string(), [&](const std::string& file) {
            export_safetensors(reader, m, family, file, dtype, shards[k]);
        });
    }
    std::vector<std::string> written = names;
    if (shards.size() > 1) {
        write_text_file((dir / "model.safetensors.index.json").string(), shard_index_text(m, family, dtype, shards));
        written.push_back("model.safetensors.index.json");
    }
    remove_stale_weights(dir, written);
    std::vector<std::string> paths;
    for (const std::string& name : names) paths.push_back((dir / name).string());
    return paths;
}

bool is_adapter(const std::string& name) {
    return ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_B.weight");
}

/// The run's [lora] settings, from the resolved deck the checkpoint records.
Config recorded_deck(const CkptModel& m) {
    const std::string ini = m.meta.value("config_ini", std::string());
    ZT_INPUT_CHECK(!ini.empty(), m.meta_file, ": the checkpoint records no config_ini (its lora.* settings)");
    return parse_deck_text(ini, m.meta_file + " (config_ini)");
}

/// --lora merge: the adapters leave the tensors and go to m.merged, under their weights.
void take_adapters_for_merge(CkptModel& m) {
    const LoraConfig lora = recorded_deck(m).model.lora;
    m.lora_scale = lora.alpha / lora.rank;
    std::vector<CkptTensor> kept;
    for (const CkptTensor& t : m.tensors) {
        if (!is_adapter(t.name)) {
            kept.push_back(t);
            continue;
        }
        const std::string weight = t.name.substr(0, t.name.size() - std::string(".lora_A.weight").size()) + ".weight";
        (ends_with(t.name, ".lora_A.weight") ? m.merged[weight].a : m.merged[weight].b) = t;
    }
    m.tensors = std::move(kept);
}

/// --lora adapter: PEFT's adapter_model.safetensors and adapter_config.json in `dir`.
std::vector<std::string> export_peft_adapter(CheckpointReader& reader, const CkptModel& m, const Family& family,
                                             const fs::path& dir, DType dtype) {
    const Config deck = recorded_deck(m);
    const LoraConfig& lora = deck.model.lora;
    CkptModel adapters = m;
    adapters.tensors.clear();
    bool transposed = false;  // GPT-2's Conv1D: PEFT's fan_in_fan_out
    for (const CkptTensor& t : m.tensors) {
        if (!is_adapter(t.name)) continue;
        adapters.tensors.push_back(t);
        const std::string weight = t.name.substr(0, t.name.size() - std::string(".lora_A.weight").size()) + ".weight";
        transposed = transposed || family.hf_naming().transposed(weight);
    }
    const std::string file = (dir / "adapter_model.safetensors").string();
    write_atomically(file, [&](const std::string& f) {
        export_safetensors(reader, adapters, family, f, dtype, every_tensor(adapters), "base_model.model.");
    });
    // The names as ztrain matched them ("c_attn, c_fc" trimmed): PEFT compares them exactly.
    const std::string targets = lora.targets == "default" ? family.lora_default_targets() : lora.targets;
    nlohmann::json modules = nlohmann::json::array();
    for (const std::string& target : split_comma_list(targets)) modules.push_back(target);
    const std::string base = !deck.model.from_hf.empty() ? deck.model.from_hf : deck.model.init_from;
    const nlohmann::ordered_json config = {
        {"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"base_model_name_or_path", base},
        {"r", lora.rank}, {"lora_alpha", lora.alpha}, {"lora_dropout", lora.dropout},
        {"target_modules", modules}, {"fan_in_fan_out", transposed}, {"bias", "none"},
        {"inference_mode", true}, {"init_lora_weights", true}, {"use_rslora", false}, {"use_dora", false},
        {"modules_to_save", nullptr}, {"layers_to_transform", nullptr}, {"layers_pattern", nullptr},
        {"rank_pattern", nlohmann::json::object()}, {"alpha_pattern", nlohmann::json::object()}};
    write_text_file((dir / "adapter_config.json").string(), config.dump(2) + "\n");
    return {file};
}

/// --output over what zt-consolidate reads: the checkpoint directory, its step, a LoRA run's
/// base (a merge into the base's own directory would replace the weights it merges with).
void refuse_output_over_checkpoint(const std::string& output, const std::string& ckpt_path,
                                   const CheckpointReader& reader) {
    refuse_output_over_inputs("--output", output,
                              {{"the checkpoint directory", ckpt_path},
                               {"the checkpoint step", reader.dir()},
                               {"the LoRA run's base", reader.base_path()}});
}

/// A Hugging Face model directory: model.safetensors (or its shards and index), the extras'
/// files, config.json.
std::vector<std::string> export_hf_directory(const std::string& ckpt_path, const std::string& output, DType dtype,
                                             uint64_t max_shard_bytes, const HfDirectoryExtras& extras,
                                             LoraExport lora, const std::string& lora_base) {
    const fs::path dir = fs::path(output).lexically_normal();
    const fs::path parent = dir.has_filename() ? dir.parent_path() : dir.parent_path().parent_path();
    ZT_INPUT_CHECK(fs::is_directory(dir) || parent.empty() || fs::is_directory(parent), "--output: directory '",
                   parent.string(), "' does not exist");
    // Everything that can refuse the checkpoint runs before the directory is touched.
    const std::string step_dir = resolve_step_dir(ckpt_path);
    CheckpointReader reader(step_dir, lora_base);
    refuse_output_over_checkpoint(output, ckpt_path, reader);
    CkptModel m = load_ckpt_model(step_dir, reader.meta());
    const bool adapted = std::any_of(m.tensors.begin(), m.tensors.end(), [](const CkptTensor& t) {
        return is_adapter(t.name);
    });
    ZT_INPUT_CHECK(adapted || lora == LoraExport::kNone, step_dir,
                   ": --lora: the checkpoint holds no LoRA adapters (its run had lora.rank = 0)");
    ZT_INPUT_CHECK(!adapted || lora != LoraExport::kNone, step_dir,
                   ": the checkpoint holds LoRA adapters: give --lora adapter (PEFT's adapter files) or --lora merge "
                   "(a Hugging Face model with the adapters merged into its weights)");
    if (lora == LoraExport::kMerge) take_adapters_for_merge(m);
    const ModelConfig& mc = m.model;
    ZT_INPUT_CHECK(mc.n_layer > 0 && mc.n_head > 0 && mc.n_embd > 0 && mc.seq_len > 0 && mc.vocab_size > 0, step_dir,
                   ": the checkpoint does not record every model dimension (n_layer, n_head, n_embd, "
                   "seq_len, vocab_size) needed for config.json");
    const Family& family = model_family(mc);
    const char* missing = family.missing_hf_key(mc);
    ZT_INPUT_CHECK(missing == nullptr, step_dir, ": the checkpoint does not record ", missing,
                   ", needed for config.json");
    nlohmann::json config = family.hf_config(mc, dtype);
    for (const auto& [key, value] : extras.config_fields.items()) config[key] = value;
    const std::string text = config.dump(2) + "\n";
    std::error_code ec;
    fs::create_directories(dir, ec);
    ZT_INPUT_CHECK(!ec, "--output: cannot create directory '", dir.string(), "': ", ec.message());
    if (lora == LoraExport::kAdapter) return export_peft_adapter(reader, m, family, dir, dtype);
    // config.json goes last: a directory with a config holds the matching weights.
    const std::vector<std::string> files = export_hf_weights(reader, m, family, dir, dtype, max_shard_bytes);
    for (const auto& [name, contents] : extras.files) write_text_file((dir / name).string(), contents);
    write_text_file((dir / "config.json").string(), text);
    return files;
}

}  // namespace

std::vector<std::string> consolidate(const std::string& ckpt_path, const std::string& output, DType dtype,
                                     bool with_optimizer, uint64_t max_shard_bytes, const HfDirectoryExtras& extras,
                                     LoraExport lora, const std::string& lora_base) {
    silence_hdf5();
    ZT_INPUT_CHECK(!output.empty(), "--output: no file name given");
    if (fs::is_directory(output) || output.back() == '/') {
        ZT_INPUT_CHECK(!with_optimizer, "--with-optimizer: a Hugging Face directory ('", output,
                       "') holds weights only; write a .h5 file for the optimizer state");
        return export_hf_directory(ckpt_path, output, dtype, max_shard_bytes, extras, lora, lora_base);
    }
    ZT_INPUT_CHECK(lora == LoraExport::kNone, "--lora: writes a Hugging Face directory; '", output,
                   "' is a file (give a directory, or a name ending in /)");
    ZT_INPUT_CHECK(max_shard_bytes == 0, "--max-shard-size: splits a Hugging Face directory's weights; '", output,
                   "' is a file (give a directory, or a name ending in /)");
    const WeightsFormat fmt = weights_format_of(output, "--output");
    ZT_INPUT_CHECK(!with_optimizer || fmt == WeightsFormat::kH5, "--with-optimizer: only .h5 output holds optimizer "
                   "state ('", output, "' is safetensors)");
    const fs::path parent = fs::path(output).parent_path();
    ZT_INPUT_CHECK(parent.empty() || fs::is_directory(parent), "--output: directory '", parent.string(),
                   "' does not exist");
    ZT_INPUT_CHECK(!fs::is_directory(output), "--output: '", output, "' is a directory");
    const std::string step_dir = resolve_step_dir(ckpt_path);
    CheckpointReader reader(step_dir, lora_base);
    refuse_output_over_checkpoint(output, ckpt_path, reader);
    const CkptModel model = load_ckpt_model(step_dir, reader.meta());
    write_atomically(output, [&](const std::string& file) {
        if (fmt == WeightsFormat::kH5) {
            export_h5(reader, model, file, dtype, with_optimizer);
        } else {
            export_safetensors(reader, model, model_family(model.model), file, dtype, every_tensor(model));
        }
    });
    return {output};
}

uint64_t parse_max_shard_size(const std::string& text) {
    // huggingface_hub's parse_size_to_int: a number and KB, MB, GB or TB (powers of 10, any
    // case); also a plain count of bytes.
    const std::string expected = str("--max-shard-size '", text,
                                     "': expected a size such as 5GB, 500MB or 100KB (powers of 10, as "
                                     "save_pretrained's max_shard_size), or a number of bytes");
    static const std::pair<const char*, double> kUnits[] = {{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
    const size_t first = text.find_first_not_of(' ');
    const std::string trimmed = first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(' ') + 1 - first);
    std::string number = trimmed;
    double scale = 1;
    std::string unit = trimmed.size() >= 2 ? trimmed.substr(trimmed.size() - 2) : "";
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const auto& [name, factor] : kUnits) {
        if (unit == name) {
            number = trimmed.substr(0, trimmed.find_last_not_of(' ', trimmed.size() - 3) + 1);
            scale = factor;
        }
    }
    const size_t digits = number.find_first_not_of("0123456789.");
    ZT_INPUT_CHECK(!number.empty() && digits == std::string::npos && number.find_first_of("0123456789") == 0 &&
                       std::count(number.begin(), number.end(), '.') <= 1,
                   expected);
    const double bytes = std::stod(number) * scale;
    ZT_INPUT_CHECK(bytes >= 1 && bytes < 1e18, expected, " of at least 1 byte");
    return static_cast<uint64_t>(bytes);
}

ModelSource open_model_source(const std::string& path, const std::string& lora_base) {
    silence_hdf5();
    ModelSource src;
    src.path = path;
    src.lora_base = lora_base;
    ZT_INPUT_CHECK(!path.empty(), "no model given (a checkpoint directory or a Hugging Face model directory)");
    ZT_INPUT_CHECK(fs::is_directory(path), path,
                   ": no such directory (give a checkpoint directory, a step_N directory or a Hugging Face model "
                   "directory)");
    if (fs::exists(fs::path(path) / "config.json")) {
        ZT_INPUT_CHECK(lora_base.empty(), path, ": --base ", lora_base,
                       " names a LoRA checkpoint's frozen base, but this is a Hugging Face model directory, which "
                       "holds every weight");
        src.hf_dir = true;
        Config cfg;
        for (const HfSetting& s : read_hf_config(path)) set_config_value(cfg, s.key, s.text);
        // The checks ztrain's --model.from_hf makes (heads dividing the width, a positive
        // rope_theta, ...): a bad file is an input error here too, not a failed requirement.
        try {
            validate_model(cfg);
        } catch (const InputError& e) {
            throw InputError(str((fs::path(path) / "config.json").string(), ": ", e.what()));
        }
        src.model = cfg.model;
        return src;
    }
    src.step_dir = resolve_step_dir(path);
    CheckpointReader reader(src.step_dir, lora_base);
    const CkptModel m = load_ckpt_model(src.step_dir, reader.meta());
    src.model = m.model;
    const ModelConfig& mc = m.model;
    ZT_INPUT_CHECK(mc.n_layer > 0 && mc.n_head > 0 && mc.n_embd > 0 && mc.seq_len > 0 && mc.vocab_size > 0,
                   src.step_dir, ": the checkpoint does not record every model dimension (n_layer, n_head, n_embd, "
                   "seq_len, vocab_size)");
    if (m.meta.contains("config_ini") && m.meta["config_ini"].is_string()) {
        src.deck = m.meta["config_ini"].get<std::string>();
    }
    return src;
}

void read_model_weights(const ModelSource& source, const ModelLayout& layout, const WeightSink& put) {
    if (source.hf_dir) {
        read_hf_weights(source.path, layout, source.model, put);
        return;
    }
    CheckpointReader reader(source.step_dir, source.lora_base);
    const auto units = reader.meta().at("units").get<std::vector<size_t>>();
    ZT_INPUT_CHECK(units == layout.unit_numel, reader.meta_file(),
                   ": the checkpoint's units do not match the model its record describes");
    std::vector<float> buf(size_t{1} << 20);  // 4 MiB at a time
    for (int u = 0; u < layout.num_units(); ++u) {
        const size_t n = layout.unit_numel[static_cast<size_t>(u)];
        for (size_t b = 0; b < n; b += buf.size()) {
            const size_t e = std::min(n, b + buf.size());
            reader.read(u, b, e, "master", buf.data());
            put(u, b, buf.data(), e - b);
        }
    }
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
        const int tensor = meta.value("tensor", 1);
        os << "  written by " << meta.value("world_size", 0) << " rank(s)"
           << (tensor > 1 ? str(" (tensor parallel ", tensor, ": each file holds one tensor rank's slices)") : "")
           << ", ZeRO stage " << meta.value("zero_stage", 0) << ", working dtype "
           << meta.value("dtype", std::string("?")) << ", seed " << meta.value("seed", uint64_t{0}) << "\n";
        os << "  model: " << dim(m.model.n_layer) << " layers, " << dim(m.model.n_head) << " heads, "
           << dim(m.model.n_embd) << " wide, seq " << dim(m.model.seq_len) << ", vocab " << dim(m.model.vocab_size)
           << " (padded " << dim(m.padded_vocab) << ")\n";
        if (meta.contains("lora_base")) {
            const std::string base = meta["lora_base"].value("path", std::string());
            os << "  LoRA: the shards hold the adapters and their state; the frozen base is "
               << (base.empty() ? str("regenerated from seed ", meta.value("seed", uint64_t{0})) : "read from " + base)
               << "\n";
        }
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
            os << "    " << name << "  " << bytes << " bytes, rank " << s.value("rank", -1)
               << (tensor > 1 ? str(", tensor rank ", s.value("tensor_rank", 0)) : "") << ", "
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

}  // namespace zt
