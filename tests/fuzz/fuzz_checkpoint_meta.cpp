// libFuzzer target: a checkpoint's manifest, meta.h5 (zt::read_checkpoint_meta), and what
// reads it next: zt::checkpoint_info (zt-consolidate --info) and zt::load_checkpoint (resume)
// into a tiny one-rank model.
//
// Two modes, chosen by the first input byte:
//   0x89 (the HDF5 signature's first byte) or 0x00 (an HDF5 user block): the input IS
//     meta.h5. Mutated HDF5 mostly fails HDF5's own checks or the meta_json checksums
//     (Fletcher32) and the storage checks; this mode is about the HDF5 open/read path on
//     hostile bytes.
//   anything else: the input is the meta_json TEXT, which the harness wraps into a
//     well-formed meta.h5 (correct Fletcher32, as save_checkpoint writes it), so
//     the fuzzer reaches the manifest validation behind the checksums.
// In both modes the harness writes a matching CHECKSUM file (zt::write_checksum_file): the
// checksums detect damage, they are not a MAC, so anyone can make a consistent checkpoint.
// load_checkpoint only runs when every shard "file" is a plain name (no '/'), so a
// manifest cannot make it hash an arbitrary file on this machine.
//
// Expected rejections are zt::Error / zt::InputError; anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"

namespace {

bool shard_names_are_plain(const nlohmann::json& meta) {
    if (!meta.contains("shards") || !meta.at("shards").is_array()) return true;
    for (const auto& s : meta.at("shards")) {
        if (s.is_object() && s.contains("file") && s.at("file").is_string() &&
            s.at("file").get<std::string>().find('/') != std::string::npos) {
            return false;
        }
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::quiet_hdf5();
    zt::fuzz::scratch_dir();
    zt::fuzz::tiny_state();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string dir = zt::fuzz::scratch_file("step_00000001");
    static const std::string meta_path = dir + "/meta.h5";
    static const bool made = [] {
        std::filesystem::create_directories(dir);
        return true;
    }();
    (void)made;
    if (size == 0) return 0;

    if (data[0] == 0x89 || data[0] == 0x00) {
        zt::fuzz::write_file(meta_path, data, size);
    } else {
        zt::fuzz::write_meta_h5(meta_path, std::string(reinterpret_cast<const char*>(data), size));
    }
    zt::write_checksum_file(dir, meta_path);

    nlohmann::json meta;
    try {
        meta = zt::read_checkpoint_meta(dir);
    } catch (const zt::Error&) {
        return 0;
    }
    // Accepted by read_checkpoint_meta: the readers behind it must reject or accept cleanly.
    try {
        (void)zt::checkpoint_info(dir);
    } catch (const zt::Error&) {
    }
    if (shard_names_are_plain(meta)) {
        try {
            (void)zt::load_checkpoint(dir, zt::fuzz::tiny_state().state, zt::self_communicator());
        } catch (const zt::Error&) {
        }
    }
    return 0;
}
