// Loading a checkpoint into a model state (load_checkpoint, checkpoint.hpp): each rank
// checks that the checkpoint holds this model and reads the ranges it owns, through the one
// shard reader (CheckpointReader, checkpoint_reader.cpp), whatever world size wrote it.
#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint_internal.hpp"
#include "hdf5_util.hpp"
#include "manifest_agreement.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

using h5::silence_hdf5;
using namespace ckpt_impl;

namespace {

/// The checkpoint's model must be this one: same units, same tensors at the same places (in
/// the whole unsplit layout: a checkpoint of any tensor split and pipeline loads at any other).
void require_same_model(const CheckpointReader& reader, const ModelLayout& state_layout) {
    const bool part = state_layout.split.size > 1 || state_layout.stage.size > 1;
    const ModelLayout layout = part ? make_model_layout(state_layout.model) : state_layout;
    const nlohmann::json& meta = reader.meta();
    const std::string meta_file = reader.meta_file();
    const auto units = meta.at("units").get<std::vector<size_t>>();
    if (units != layout.unit_numel) {
        throw InputError(str(meta_file, ": the checkpoint's model has ", units.size(), " units (",
                             units.empty() ? 0 : units[0], " elements in the first); this model has ",
                             layout.unit_numel.size(), " (", layout.unit_numel[0],
                             "): model.* settings differ from the run that wrote it"));
    }
    const nlohmann::json mine = layout_json(layout);
    for (size_t i = 0; i < mine.size(); ++i) {
        if (i >= meta.at("tensors").size() || meta.at("tensors")[i] != mine[i]) {
            throw InputError(str(meta_file, ": tensor ", mine[i]["name"].get<std::string>(),
                                 " differs from the checkpoint's (",
                                 i < meta.at("tensors").size() ? meta.at("tensors")[i].dump() : "absent", " vs ",
                                 mine[i].dump(), ")"));
        }
    }
}

/// What make_meta wrote besides the model state.
CheckpointRecord record_of(const nlohmann::json& meta) {
    CheckpointRecord record;
    TrainProgress& p = record.progress;
    p.step = meta.at("step").get<long>();
    p.applied_steps = meta.at("applied_steps").get<long>();
    p.samples_seen = meta.at("samples_seen").get<uint64_t>();
    p.tokens_seen = meta.value("tokens_seen", uint64_t{0});
    record.dtype = meta.value("dtype", std::string());
    p.loss_scale = meta.at("scaler").value("scale", 1.0);
    // Checkpoints written before the mode was recorded: fp16 ones count as dynamic (the default).
    p.loss_scale_mode = meta.at("scaler").value("mode", std::string(record.dtype == "fp16" ? "dynamic" : "none"));
    p.scaler_clean_steps = meta.at("scaler").value("clean_steps", 0);
    p.scaler_hysteresis_left = meta.at("scaler").value("hysteresis_left", 1);
    p.bad_steps = meta.value("bad_steps", 0);
    for (const auto& k : meta.value("skipped_samples", nlohmann::json::array())) {
        p.skipped.push_back(SkippedSpan{k.at(0).get<uint64_t>(), k.at(1).get<uint64_t>()});
    }
    record.seed_known = meta.contains("seed");
    record.seed = meta.value("seed", uint64_t{0});
    record.config_ini = meta.value("config_ini", std::string());
    record.world_size = meta.value("world_size", 0);
    record.shard_group = meta.value("shard_group", record.world_size);
    record.tensor = meta.value("tensor", 1);
    record.pipeline = meta.value("pipeline", 1);
    record.zero_stage = meta.value("zero_stage", -1);
    record.inputs = meta.value("inputs", nlohmann::json());
    record.blend = meta.value("blend", nlohmann::json());
    if (meta.contains("lora_base")) record.lora_base = meta.at("lora_base").value("path", std::string());
    return record;
}

/// Reads master, adam_m and adam_v of every range this rank keeps, kStageFloats at a time
/// through host memory (the state's buffers may be device memory): its owned range of a
/// frozen base, its state range of what trains (ShardPlan::state_range). A pipeline stage
/// owns its units only; the reader maps its tensor slices through the layout of every stage's.
void read_owned_state(CheckpointReader& reader, ModelState& state, int rank) {
    const ShardPlan& plan = state.shard_plan();
    const ModelLayout layout = all_stages(state.layout());
    StateShards shards = state.shards();
    std::vector<float> stage(kStageFloats);
    const auto read_range = [&](int u, size_t begin, size_t end) {
        for (int which = 0; which < 3; ++which) {
            for (size_t at = begin; at < end; at += kStageFloats) {
                const size_t to = std::min(end, at + kStageFloats);
                reader.read(layout, u, at, to, kStateDatasets[static_cast<size_t>(which)], stage.data());
                shards.write(u, state_kind(which), at, to, stage.data());
            }
        }
    };
    for (int u = 0; u < plan.num_units(); ++u) {
        const ElementRange f = plan.frozen_range(u, rank);
        const ElementRange s = plan.state_range(u, rank);
        read_range(u, f.begin, f.end);
        read_range(u, s.begin, s.end);
    }
}

}  // namespace

CheckpointRecord load_checkpoint(const std::string& step_dir, ModelState& state, Communicator& comm,
                                 const std::string& moved_base) {
    silence_hdf5();
    CheckpointRecord record;
    agree_on_manifest(comm, [&] {
        CheckpointReader reader(step_dir);
        reader.follow_moved_base(moved_base);
        require_same_model(reader, state.layout());
        record = record_of(reader.meta());
        read_owned_state(reader, state, state.shard_rank());
    });
    state.shards().sync_working_from_master();
    return record;
}

}  // namespace zt
