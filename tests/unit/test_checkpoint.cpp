// Checkpoint files on one rank: a save/load round trip restores every field and every
// element; damaged, truncated, mismatched or misdirected checkpoints are refused with a
// message naming the file.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "export_readers.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "model_state_access.hpp"

namespace fs = std::filesystem;

namespace zt {
namespace {

ModelConfig small_model() { return test::model_config(2, 2, 16, 8, 40); }

/// Fills master, m and v with distinct values so a misplaced element cannot go unnoticed.
void scribble(ModelState& s, float salt) {
    for (int u = 0; u < s.layout().num_units(); ++u) {
        for (size_t e = s.shards().owned_begin(u); e < s.shards().owned_end(u); ++e) {
            s.shards().master_base(u)[e] = salt + static_cast<float>(u) * 1000.f + static_cast<float>(e) * 0.001f;
            s.shards().adam_m_base(u)[e] = -salt - static_cast<float>(e);
            s.shards().adam_v_base(u)[e] = salt * 2 + static_cast<float>(e);
        }
    }
}

struct Fixture {
    ModelConfig mc = small_model();
    ModelLayout layout = make_model_layout(mc);
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    test::ScratchDir dir{"ckpt"};
    std::string ckpt() const { return dir.file("ckpt"); }
};

/// A record for a saved run of dtype fp32 and seed 1 (tests change what they check).
CheckpointRecord sample_record(const std::string& dtype = "fp32", uint64_t seed = 1) {
    CheckpointRecord record;
    record.dtype = dtype;
    record.seed = seed;
    TrainProgress& p = record.progress;
    p.step = 7;
    p.applied_steps = 6;
    p.samples_seen = 56;
    p.tokens_seen = 448;
    p.loss_scale = 8192;
    p.loss_scale_mode = "dynamic";
    p.scaler_clean_steps = 3;
    p.scaler_hysteresis_left = 1;
    p.bad_steps = 1;
    return record;
}

using test::input_error_of;

TEST(Checkpoint, RoundTripRestoresEveryFieldAndElement) {
    Fixture f;
    for (DType t : {DType::kF32, DType::kBF16}) {
        const int stage = t == DType::kF32 ? 0 : 2;
        const uint64_t seed = t == DType::kF32 ? 424242 : 17;
        ModelState a(f.layout, *f.backend, self_communicator(), StateOptions::zero(stage).with_seed(1).in(t, t));
        scribble(a, 3.f);
        CheckpointRecord saved = sample_record(dtype_name(t), seed);
        saved.config_ini = "[model]\n";
        const std::string dir = save_checkpoint(f.ckpt(), a, self_communicator(), saved, 2);
        EXPECT_EQ(fs::path(dir).filename(), "step_00000007");
        EXPECT_EQ(resolve_resume("auto", f.ckpt()), dir);
        ModelState b(f.layout, *f.backend, self_communicator(), StateOptions::zero(0).with_seed(99).in(t, t));
        const CheckpointRecord loaded = load_checkpoint(dir, b, self_communicator());
        const TrainProgress& p = loaded.progress;
        const TrainProgress& want = saved.progress;
        EXPECT_EQ(p.step, want.step);
        EXPECT_EQ(p.applied_steps, want.applied_steps);
        EXPECT_EQ(p.samples_seen, want.samples_seen);
        EXPECT_EQ(p.tokens_seen, want.tokens_seen);
        EXPECT_EQ(p.loss_scale, want.loss_scale);
        EXPECT_EQ(p.loss_scale_mode, want.loss_scale_mode);
        EXPECT_EQ(loaded.dtype, dtype_name(t)) << "load_checkpoint reports the dtype the checkpoint was written in";
        EXPECT_EQ(p.scaler_clean_steps, want.scaler_clean_steps);
        EXPECT_EQ(p.scaler_hysteresis_left, want.scaler_hysteresis_left);
        EXPECT_EQ(p.bad_steps, want.bad_steps);
        EXPECT_TRUE(loaded.seed_known);
        EXPECT_EQ(loaded.seed, seed);
        EXPECT_EQ(loaded.config_ini, saved.config_ini);
        const std::vector<float> sa = ModelStateTestAccess::owned_optimizer_state(a);
        const std::vector<float> sb = ModelStateTestAccess::owned_optimizer_state(b);
        ASSERT_EQ(sa.size(), sb.size());
        EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0) << dtype_name(t);
        const nlohmann::json meta = read_checkpoint_meta(dir);
        EXPECT_EQ(meta["config_ini"], "[model]\n");
        EXPECT_EQ(meta["dtype"], dtype_name(t));
        EXPECT_EQ(meta["world_size"], 1);
        EXPECT_EQ(meta["zero_stage"], stage);
        EXPECT_EQ(meta["seed"].get<uint64_t>(), seed);
        // The manifest: every unit's size, every tensor's (name, unit, offset, shape), and the
        // one shard's file and ranges.
        EXPECT_EQ(meta["units"].get<std::vector<size_t>>(), f.layout.unit_numel);
        ASSERT_EQ(meta["tensors"].size(), f.layout.params.size());
        for (size_t i = 0; i < f.layout.params.size(); ++i) {
            const ParamSpec& ps = f.layout.params[i];
            const nlohmann::json& e = meta["tensors"][i];
            EXPECT_EQ(e["name"], ps.name);
            EXPECT_EQ(e["unit"].get<int>(), ps.unit) << ps.name;
            EXPECT_EQ(e["offset"].get<size_t>(), ps.offset) << ps.name;
            EXPECT_EQ(e["shape"].get<std::vector<size_t>>(), ps.shape) << ps.name;
        }
        ASSERT_EQ(meta["shards"].size(), 1u);
        EXPECT_EQ(meta["shards"][0]["file"], "shard_00000_of_00001.h5");
        EXPECT_EQ(meta["shards"][0]["rank"], 0);
        const nlohmann::json& ranges = meta["shards"][0]["units"];
        ASSERT_EQ(ranges.size(), f.layout.unit_numel.size());
        for (size_t u = 0; u < ranges.size(); ++u) {
            EXPECT_EQ(ranges[u]["unit"].get<size_t>(), u);
            EXPECT_EQ(ranges[u]["begin"].get<size_t>(), 0u);
            EXPECT_EQ(ranges[u]["end"].get<size_t>(), f.layout.unit_numel[u]);
        }
    }
}

// Re-saving an existing step replaces it in place: the new state loads, `latest` names it,
// and no copy of the old one (step_N.partial / .replaced) is left behind.
TEST(Checkpoint, ResavingAStepReplacesItWithoutLeftovers) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    scribble(a, 1.f);
    save_checkpoint(f.ckpt(), a, self_communicator(), sample_record(), 2);
    scribble(a, 5.f);
    const std::string dir = save_checkpoint(f.ckpt(), a, self_communicator(), sample_record(), 2);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(f.ckpt())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000007"}));
    ModelState b(f.layout, *f.backend, 99);
    load_checkpoint(dir, b, self_communicator());
    const std::vector<float> sa = ModelStateTestAccess::owned_optimizer_state(a);
    const std::vector<float> sb = ModelStateTestAccess::owned_optimizer_state(b);
    ASSERT_EQ(sa.size(), sb.size());
    EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(a.shards().master_base(1), b.shards().master_base(1), f.layout.unit_numel[1] * sizeof(float)), 0);
}

/// Checkpoints of steps 2 and 4 (keep 3) in f.ckpt(); returns the record used.
CheckpointRecord save_steps_2_and_4(Fixture& f, ModelState& state) {
    CheckpointRecord record = sample_record();
    for (long s : {2, 4}) {
        record.progress.step = s;
        save_checkpoint(f.ckpt(), state, self_communicator(), record, 3);
    }
    return record;
}

// resume=auto with a `latest` naming a directory that is gone (a crash between a save's
// renames, or a removed directory) continues from the newest complete checkpoint and says
// so; with none left it is an InputError. An explicit PATH still refuses a dangling latest.
TEST(Checkpoint, AutoResumeFallsBackWhenLatestNamesAMissingDirectory) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    save_steps_2_and_4(f, a);
    test::write_file(f.ckpt() + "/latest", "step_00000006\n");
    std::string note;
    EXPECT_EQ(resolve_resume("auto", f.ckpt(), &note), f.ckpt() + "/step_00000004");
    EXPECT_NE(note.find("step_00000006"), std::string::npos) << note;
    EXPECT_NE(note.find("step_00000004"), std::string::npos) << note;
    std::string msg = input_error_of([&] { resolve_resume(f.ckpt(), f.ckpt()); });
    EXPECT_NE(msg.find("step_00000006"), std::string::npos) << msg;
    fs::remove_all(f.ckpt() + "/step_00000002");
    fs::remove_all(f.ckpt() + "/step_00000004");
    msg = input_error_of([&] { resolve_resume("auto", f.ckpt()); });
    EXPECT_NE(msg.find("no other complete checkpoint"), std::string::npos) << msg;
}

// A re-save without RENAME_EXCHANGE moves step_N aside to step_N.replaced before renaming the
// new copy in; a crash between the two leaves `latest` naming the missing step_N. Resume reads
// the aside copy, and the next save puts it back and clears leftover .partial directories.
TEST(Checkpoint, AnInterruptedResaveIsRecovered) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    CheckpointRecord record = save_steps_2_and_4(f, a);
    fs::rename(f.ckpt() + "/step_00000004", f.ckpt() + "/step_00000004.replaced");
    fs::create_directories(f.ckpt() + "/step_00000004.partial");  // the new copy, half written
    test::write_file(f.ckpt() + "/step_00000004.partial/junk", "x");
    std::string note;
    EXPECT_EQ(resolve_resume("auto", f.ckpt(), &note), f.ckpt() + "/step_00000004.replaced");
    EXPECT_NE(note.find("found at"), std::string::npos) << note;
    EXPECT_EQ(load_checkpoint(f.ckpt() + "/step_00000004.replaced", a, self_communicator()).progress.step, 4);
    record.progress.step = 6;
    save_checkpoint(f.ckpt(), a, self_communicator(), record, 3);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(f.ckpt())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000002", "step_00000004", "step_00000006"}));
}

TEST(Checkpoint, KeepsOnlyTheNewestAndLatestIsAtomic) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    CheckpointRecord record = sample_record();
    for (long s : {2, 4, 6, 8}) {
        record.progress.step = s;
        save_checkpoint(f.ckpt(), a, self_communicator(), record, 2);
    }
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(f.ckpt())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000006", "step_00000008"}));
    EXPECT_EQ(test::read_file(f.ckpt() + "/latest"), "step_00000008\n");
}

// State crosses to and from the files in staging pieces of 1M floats (the state may be device
// memory; a whole-unit staging copy would add the largest unit to the peak). GPT-2's vocabulary
// at width 24 makes unit 0 1.2M floats: two pieces, so a piece boundary inside a dataset must
// keep every element and the dataset's hash64 must be the hash of all of it.
TEST(Checkpoint, AUnitLargerThanOneStagingPieceRoundTrips) {
    Fixture f;
    const ModelLayout layout = make_model_layout(test::model_config(1, 1, 24, 8, 50257));
    ASSERT_GT(layout.unit_numel[0], size_t{1} << 20) << "unit 0 must span more than one staging piece";
    ModelState a(layout, *f.backend, 1);
    scribble(a, 5.f);
    const std::string dir = save_checkpoint(f.ckpt(), a, self_communicator(), sample_record(), 2);
    const std::string shard = dir + "/shard_00000_of_00001.h5";
    const hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t ds = H5Dopen2(file, "unit_00000/adam_v", H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    std::vector<float> v(layout.unit_numel[0]);
    EXPECT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    // Large datasets start on a 4 KiB boundary: their bytes go to the disk by direct I/O.
    EXPECT_EQ(H5Dget_offset(ds) % 4096, 0u) << "unit 0's adam_v at file offset " << H5Dget_offset(ds);
    H5Dclose(ds);
    H5Fclose(file);
    EXPECT_EQ(std::memcmp(v.data(), a.shards().adam_v_base(0), v.size() * sizeof(float)), 0)
        << "unit 0's adam_v differs from the state it was saved from";
    ModelState b(layout, *f.backend, 99);
    load_checkpoint(dir, b, self_communicator());
    const std::vector<float> sa = ModelStateTestAccess::owned_optimizer_state(a);
    const std::vector<float> sb = ModelStateTestAccess::owned_optimizer_state(b);
    ASSERT_EQ(sa.size(), sb.size());
    EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0) << "load through the pieces";
}

// What the README and checkpoint.hpp state about the files: shard datasets are contiguous
// (no filter) and hold the state's bytes; meta_json is chunked with Fletcher32;
// CHECKSUM holds meta.h5's whole-file hash64; meta_json lists each shard's size and hash64.
TEST(Checkpoint, FilesCarryTheDocumentedChecksums) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    scribble(a, 2.f);
    const std::string dir = save_checkpoint(f.ckpt(), a, self_communicator(), sample_record(), 2);
    const std::string shard = dir + "/shard_00000_of_00001.h5";
    const hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    for (int u = 0; u < f.layout.num_units(); ++u) {
        char group[32];
        std::snprintf(group, sizeof group, "unit_%05d", u);
        for (const char* which : {"master", "adam_m", "adam_v"}) {
            const std::string name = std::string(group) + "/" + which;
            const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
            ASSERT_GE(ds, 0) << name;
            const hid_t dcpl = H5Dget_create_plist(ds);
            EXPECT_EQ(H5Pget_layout(dcpl), H5D_CONTIGUOUS) << name;
            EXPECT_EQ(H5Pget_nfilters(dcpl), 0) << name;
            H5Pclose(dcpl);
            std::vector<float> v(f.layout.unit_numel[static_cast<size_t>(u)]);
            EXPECT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
            const float* saved = std::string(which) == "master" ? a.shards().master_base(u)
                                 : std::string(which) == "adam_m" ? a.shards().adam_m_base(u) : a.shards().adam_v_base(u);
            EXPECT_EQ(std::memcmp(v.data(), saved, v.size() * sizeof(float)), 0) << name;
            H5Dclose(ds);
        }
    }
    H5Fclose(file);
    const std::string meta_file = dir + "/meta.h5";
    const hid_t mf = H5Fopen(meta_file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(mf, 0);
    const hid_t ds = H5Dopen2(mf, "meta_json", H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    const hid_t dcpl = H5Dget_create_plist(ds);
    EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED);
    unsigned flags = 0;
    EXPECT_GE(H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, nullptr, nullptr, 0, nullptr, nullptr), 0);
    H5Pclose(dcpl);
    H5Dclose(ds);
    H5Fclose(mf);
    char line[64];
    std::snprintf(line, sizeof line, "hash64 %016llx meta.h5\n", static_cast<unsigned long long>(file_hash64(meta_file)));
    EXPECT_EQ(test::read_file(dir + "/CHECKSUM"), line);
    const nlohmann::json meta = read_checkpoint_meta(dir);
    ASSERT_EQ(meta["shards"].size(), 1u);
    EXPECT_EQ(meta["shards"][0]["file"], "shard_00000_of_00001.h5");
    EXPECT_EQ(meta["shards"][0]["bytes"].get<uint64_t>(), fs::file_size(shard));
    EXPECT_EQ(meta["shards"][0]["hash64"].get<uint64_t>(), file_hash64(shard));
    // No object stores a time: the same state saved a second later is the same file.
    for (const std::string& file : {shard, meta_file}) {
        EXPECT_EQ(test::h5_objects_with_mtime(file), std::vector<std::string>{}) << file;
    }
}

TEST(Checkpoint, DamagedTruncatedAndMismatchedCheckpointsAreRefusedNamingTheFile) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    const std::string dir = save_checkpoint(f.ckpt(), a, self_communicator(), sample_record(), 2);
    const std::string shard = dir + "/shard_00000_of_00001.h5";
    const std::string pristine = test::read_file(shard);

    std::string bytes = pristine;
    bytes[bytes.size() / 2] ^= 0x5a;  // a flipped byte in the middle of the data
    test::write_file(shard, bytes);
    ModelState b(f.layout, *f.backend, 1);
    std::string msg = input_error_of([&] { load_checkpoint(dir, b, self_communicator()); });
    EXPECT_NE(msg.find(shard), std::string::npos) << msg;
    EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;

    test::write_file(shard, pristine.substr(0, pristine.size() - 100));  // truncated
    msg = input_error_of([&] { load_checkpoint(dir, b, self_communicator()); });
    EXPECT_NE(msg.find(shard), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    test::write_file(shard, pristine);

    // A different model shape.
    ModelConfig other = f.mc;
    other.n_embd = 32;
    const ModelLayout other_layout = make_model_layout(other);
    ModelState c(other_layout, *f.backend, 1);
    msg = input_error_of([&] { load_checkpoint(dir, c, self_communicator()); });
    EXPECT_NE(msg.find("meta.h5"), std::string::npos) << msg;

    // meta.h5 flipped byte.
    const std::string meta = dir + "/meta.h5";
    std::string m = test::read_file(meta);
    const std::string m0 = m;
    m[m.size() - 40] ^= 0x01;
    test::write_file(meta, m);
    msg = input_error_of([&] { read_checkpoint_meta(dir); });
    EXPECT_NE(msg.find(meta), std::string::npos) << msg;
    test::write_file(meta, m0);

    // `latest` pointing outside the checkpoint directory.
    test::write_file(f.ckpt() + "/latest", "../../etc\n");
    msg = input_error_of([&] { resolve_resume("auto", f.ckpt()); });
    EXPECT_NE(msg.find("latest"), std::string::npos) << msg;
    // A resume path that does not exist.
    msg = input_error_of([&] { resolve_resume(f.dir.file("nope"), f.ckpt()); });
    EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
    // No checkpoint yet: auto starts fresh.
    EXPECT_EQ(resolve_resume("auto", f.dir.file("empty")), "");
    EXPECT_EQ(resolve_resume("never", f.ckpt()), "");
}

// Random damage anywhere in any file of a checkpoint is detected on load, every time: byte
// flips at random offsets (data, HDF5 structure, padding alike) and truncations at random
// lengths, in meta.h5, CHECKSUM and the shard.
TEST(Checkpoint, RandomFlipsAndTruncationsAreAlwaysDetected) {
    Fixture f;
    ModelState a(f.layout, *f.backend, 1);
    const std::string dir = save_checkpoint(f.ckpt(), a, self_communicator(), sample_record(), 2);
    const std::vector<std::string> files = {dir + "/meta.h5", dir + "/CHECKSUM", dir + "/shard_00000_of_00001.h5"};
    std::vector<std::string> pristine;
    for (const auto& file : files) pristine.push_back(test::read_file(file));
    int trials = 0;
    int detected = 0;
    for (uint64_t t = 0; t < 300; ++t) {
        const size_t which = static_cast<size_t>(random_bits(77, 1, t) % files.size());
        std::string bytes = pristine[which];
        const size_t at = static_cast<size_t>(random_bits(77, 2, t) % bytes.size());
        std::string how;
        if (t % 4 == 3) {
            bytes.resize(at);
            how = "truncated to " + std::to_string(at);
        } else {
            const unsigned char mask = static_cast<unsigned char>(1u + random_bits(77, 3, t) % 255u);
            bytes[at] = static_cast<char>(static_cast<unsigned char>(bytes[at]) ^ mask);
            how = "byte " + std::to_string(at) + " ^= " + std::to_string(mask);
        }
        test::write_file(files[which], bytes);
        ModelState b(f.layout, *f.backend, 1);
        ++trials;
        try {
            load_checkpoint(dir, b, self_communicator());
            ADD_FAILURE() << "undetected: " << files[which] << " " << how;
        } catch (const InputError& e) {
            ++detected;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "detected with the wrong error type (not exit 2): " << files[which] << " " << how << ": "
                          << e.what();
        }
        test::write_file(files[which], pristine[which]);
    }
    EXPECT_EQ(detected, trials);
    ModelState ok(f.layout, *f.backend, 1);
    EXPECT_NO_THROW(load_checkpoint(dir, ok, self_communicator())) << "restored files must load again";
}

}  // namespace
}  // namespace zt
