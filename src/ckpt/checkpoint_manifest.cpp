// The manifest of a checkpoint (fields: checkpoint.hpp): meta_json built from the model
// layout, the save's record and the shards written, stored in meta.h5 and covered by
// CHECKSUM.
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "checkpoint_format.hpp"
#include "checkpoint_internal.hpp"
#include "hdf5_util.hpp"
#include "model_record.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::untimed_create_plist;
using namespace ckpt_format;
using namespace ckpt_impl;

namespace {
constexpr hsize_t kChunkElements = 1 << 20;  // meta_json chunk size (Fletcher32 per chunk)
}  // namespace

void write_checksum_file(const std::string& dir, const std::string& meta_file) {
    const std::string path = (fs::path(dir) / kChecksumFile).string();
    std::ofstream out(path, std::ios::trunc);
    out << checksum_line(file_hash64(meta_file));
    out.flush();
    if (!out) throw Error(str("cannot write ", path, " (disk full?)"));
    out.close();
    fsync_path(path, false);
}

namespace ckpt_impl {

nlohmann::json layout_json(const ModelLayout& layout) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const ParamSpec& p : layout.params) {
        tensors.push_back({{"name", p.name}, {"unit", p.unit}, {"offset", p.offset}, {"shape", p.shape}});
    }
    return tensors;
}

nlohmann::json shard_entry(const ShardPlan& plan, const ShardRecord& rec, const ShardFile& which) {
    const int r = static_cast<int>(rec.shard_rank);
    nlohmann::json units = nlohmann::json::array();
    for (int u = 0; u < plan.num_units(); ++u) {
        const ElementRange range = saved_range(plan, which.stage, u, r);
        if (!range.empty()) units.push_back({{"unit", u}, {"begin", range.begin}, {"end", range.end}});
    }
    const TensorSplit& t = which.split;
    const PipelineStage& s = which.stage;
    nlohmann::json entry = {{"file", shard_file_name(r, plan.world_size(), t.rank, t.size, s.rank, s.size)},
                            {"rank", r},
                            {"bytes", rec.bytes},
                            {"hash64", rec.fnv},
                            {"units", units}};
    if (t.size > 1) entry["tensor_rank"] = t.rank;
    if (s.size > 1) entry["stage"] = s.rank;
    return entry;
}

nlohmann::json shard_manifest(std::vector<nlohmann::json> entries) {
    // Entries come in world-rank order; files are listed by stage, tensor rank, shard rank
    // (the same order unless the groups are the nodes and ranks are placed round-robin).
    const auto key = [](const nlohmann::json& e) {
        return std::make_tuple(e.value("stage", 0), e.value("tensor_rank", 0), e.at("rank").get<int>());
    };
    std::sort(entries.begin(), entries.end(),
              [&](const nlohmann::json& a, const nlohmann::json& b) { return key(a) < key(b); });
    return nlohmann::json(std::move(entries));
}

nlohmann::json layout_meta(const ModelLayout& layout) {
    nlohmann::json meta;
    meta["model"] = model_record(layout.model);
    // Tensor-parallel and pipeline checkpoints describe the whole unsplit model: every tool
    // reads them in its layout (CheckpointReader maps the slices; each unit is in one stage's
    // files), and they load at any T and P.
    const int tensor = layout.split.size;
    const int stages = layout.stage.size;
    const bool part = tensor > 1 || stages > 1;
    const ModelLayout whole = part ? make_model_layout(layout.model) : ModelLayout{};
    meta["units"] = part ? whole.unit_numel : layout.unit_numel;
    meta["tensors"] = layout_json(part ? whole : layout);
    if (tensor > 1) meta["tensor"] = tensor;
    if (stages > 1) meta["pipeline"] = stages;
    return meta;
}

nlohmann::json make_meta_base(const nlohmann::json& layout_fields, const ModelState& state,
                              const CheckpointRecord& record) {
    const int group = state.shard_plan().world_size();
    const TrainProgress& progress = record.progress;
    nlohmann::json meta;
    meta["format"] = kFormatName;
    meta["version"] = kFormatVersion;
    meta["step"] = progress.step;
    meta["applied_steps"] = progress.applied_steps;
    meta["samples_seen"] = progress.samples_seen;
    meta["tokens_seen"] = progress.tokens_seen;
    meta["world_size"] = group * state.replicas() * state.layout().split.size * state.layout().stage.size;
    meta["shard_group"] = group;
    meta["zero_stage"] = state.zero_stage();
    meta["dtype"] = record.dtype;
    meta["seed"] = record.seed;
    meta["scaler"] = {{"scale", progress.loss_scale},
                      {"mode", progress.loss_scale_mode},
                      {"clean_steps", progress.scaler_clean_steps},
                      {"hysteresis_left", progress.scaler_hysteresis_left}};
    meta["bad_steps"] = progress.bad_steps;
    for (const SkippedSpan& k : progress.skipped) meta["skipped_samples"].push_back({k.from, k.samples});
    meta["config_ini"] = record.config_ini;
    if (!record.inputs.is_null()) meta["inputs"] = record.inputs;
    if (!record.blend.is_null()) meta["blend"] = record.blend;
    if (state.layout().model.lora.on()) meta["lora_base"] = {{"path", record.lora_base}};
    for (const auto& [key, value] : layout_fields.items()) meta[key] = value;
    return meta;
}

void write_meta(const std::string& dir, const nlohmann::json& meta) {
    const std::string text = meta.dump(1);
    const std::string file = (fs::path(dir) / kMetaFile).string();
    require_free_space(dir, text.size(), file);
    {
        H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
        h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
        const hsize_t dims[1] = {static_cast<hsize_t>(text.size())};
        H5Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
        H5Handle dcpl(untimed_create_plist(H5P_DATASET_CREATE), H5Pclose);
        const hsize_t chunk[1] = {std::min<hsize_t>(dims[0], kChunkElements)};
        h5_require(H5Pset_chunk(dcpl.get(), 1, chunk) >= 0 && H5Pset_fletcher32(dcpl.get()) >= 0, false, file,
                   "cannot set up meta_json");
        H5Handle ds(H5Dcreate2(f.get(), kMetaDataset, H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, dcpl.get(),
                               H5P_DEFAULT),
                    H5Dclose);
        h5_require(ds.ok() && H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0,
                   false, file, "cannot write meta_json (disk full?)");
        h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
    }
    fsync_path(file, false);
    // meta.h5 is covered as a whole too: a damaged byte anywhere in it (HDF5 structure
    // included) is caught before it is parsed.
    write_checksum_file(dir, file);
    fsync_path(dir, true);
}

}  // namespace ckpt_impl
}  // namespace zt
