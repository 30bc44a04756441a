// The names and constants of the checkpoint layout on disk (described in checkpoint.hpp),
// shared by the writer (shard_writer.cpp, checkpoint_manifest.cpp, checkpoint_commit.cpp)
// and the reader (checkpoint_reader.cpp), so the two cannot drift apart. Private to ckpt/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace zt::ckpt_format {

constexpr const char* kFormatName = "ztrain-checkpoint";
/// Version 2: the model record holds every ModelConfig field. Version 1 is still read.
constexpr int kFormatVersion = 2;
constexpr int kOldestReadableVersion = 1;
constexpr const char* kMetaFile = "meta.h5";
constexpr const char* kMetaDataset = "meta_json";
constexpr const char* kChecksumFile = "CHECKSUM";

/// The one line of CHECKSUM: the hash64 of meta.h5.
inline std::string checksum_line(uint64_t meta_hash) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "hash64 %016llx meta.h5\n", static_cast<unsigned long long>(meta_hash));
    return buf;
}

/// Shard `rank` of a group of `world`; under tensor parallelism (tensor > 1) the file of
/// one tensor rank's slices.
inline std::string shard_file_name(int rank, int world, int tensor_rank = 0, int tensor = 1, int stage = 0,
                                   int stages = 1) {
    char buf[128];
    int n = std::snprintf(buf, sizeof buf, "shard_%05d_of_%05d", rank, world);
    if (tensor > 1) n += std::snprintf(buf + n, sizeof buf - n, "_tensor_%03d_of_%03d", tensor_rank, tensor);
    if (stages > 1) n += std::snprintf(buf + n, sizeof buf - n, "_stage_%03d_of_%03d", stage, stages);
    std::snprintf(buf + n, sizeof buf - n, ".h5");
    return buf;
}

/// The group of a shard file that holds one unit's range.
inline std::string unit_group_name(int unit) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "unit_%05d", unit);
    return buf;
}

}  // namespace zt::ckpt_format
