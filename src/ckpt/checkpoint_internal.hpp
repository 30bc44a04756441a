// What the files of the checkpoint implementation share (format and guarantees:
// checkpoint.hpp; names and constants on disk: checkpoint_format.hpp). Private to ckpt/.
//
//   shard_writer.cpp         one rank's shard file: its HDF5 structure, then the data by
//                            pipelined direct I/O, hashed from the memory it is written from
//   checkpoint_manifest.cpp  meta_json's fields, meta.h5 and CHECKSUM
//   checkpoint_commit.cpp    the save's phases and commit protocol (step_N.partial, renames,
//                            `latest`, pruning)
//   checkpoint_snapshot.cpp  the host snapshot of async saves
//   checkpoint_load.cpp      load_checkpoint
//   checkpoint_resume.cpp    which checkpoint to resume from
//   checkpoint_hash.cpp      hash64
//
// Reading meta.h5 and shards: checkpoint_reader.cpp; who owns and saves which elements: the
// model state's ShardPlan (parallel/shard_layout.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt::ckpt_impl {

/// Floats staged through host memory at a time when state goes to or comes from a file: the
/// state may be device memory, and staging a whole unit would add the largest unit to the
/// peak (GPT-2's embedding: 154 MB). Even, so every piece but the last hashes a multiple of
/// 8 bytes (hash64 chains over such pieces).
constexpr size_t kStageFloats = size_t{1} << 20;  // 4 MiB
/// Direct I/O (O_DIRECT) moves whole 4 KiB blocks between page-aligned memory and
/// block-aligned file offsets.
constexpr size_t kDirectAlign = 4096;
/// Pieces of a shard written at once, beside the caller reading and hashing the next one:
/// a direct write returns only when the disk has the bytes, so with one piece at a time
/// the disk idled while the CPU worked and the CPU while the disk did.
constexpr size_t kWritesInFlight = 2;

/// The three buffers a checkpoint holds per unit, as dataset names: `which` (0, 1, 2)
/// indexes this and state_buffer.
constexpr std::array<const char*, 3> kStateDatasets = {"master", "adam_m", "adam_v"};

/// The part of `unit` that `rank` saves: ShardPlan::saved_range (a LoRA run's frozen base is
/// not saved: meta_json "lora_base" says where it comes from), none of a unit that another
/// pipeline stage saves (`stage.mirrored`).
inline ElementRange saved_range(const ShardPlan& plan, const PipelineStage& stage, int unit, int rank) {
    if (stage.mirrors(unit)) return ElementRange{};
    return plan.saved_range(unit, rank);
}

/// Buffer `which` of `unit` in the state: base[e] is element e (may be device memory).
inline StateShards::Kind state_kind(int which) { return static_cast<StateShards::Kind>(which); }

// ---------------------------------------------------------------------------------------
// Files (shard_writer.cpp)
// ---------------------------------------------------------------------------------------

/// fsync of a file or (`directory`) a directory; throws Error naming it.
void fsync_path(const std::string& path, bool directory);

/// Refuses to start a write that cannot fit: HDF5 does not recover cleanly from ENOSPC in
/// the middle of a file (its handle stays half-open until library shutdown), so the space is
/// checked up front. `bytes` is the payload; HDF5 adds ~1% plus a few KiB of structure.
void require_free_space(const std::string& dir, uint64_t bytes, const std::string& file);

// ---------------------------------------------------------------------------------------
// Where a shard's floats come from (shard_writer.cpp)
// ---------------------------------------------------------------------------------------

/// Where a shard's floats come from: the live model state, staged a piece at a time through
/// a few small host buffers, or a snapshot, read in place. `read` returns host memory
/// holding elements [begin, begin + count) of unit `unit`'s buffer `which`, valid for
/// kWritesInFlight further reads (the pieces still being written); `count` is at most
/// piece_floats().
class ShardSource {
  public:
    virtual ~ShardSource() = default;
    virtual size_t piece_floats() const = 0;
    virtual const float* read(int unit, int which, size_t begin, size_t count) = 0;
};

/// Page-aligned host memory (direct I/O reads from it without a bounce buffer).
struct AlignedFloats {
    explicit AlignedFloats(size_t n) {
        void* p = nullptr;
        if (::posix_memalign(&p, kDirectAlign, std::max<size_t>(n, 1) * sizeof(float)) != 0) {
            throw Error(str("cannot allocate ", n * sizeof(float), " bytes of staging memory"));
        }
        data = static_cast<float*>(p);
    }
    ~AlignedFloats() { std::free(data); }
    AlignedFloats(const AlignedFloats&) = delete;
    AlignedFloats& operator=(const AlignedFloats&) = delete;
    float* data = nullptr;
};

class LiveStateSource final : public ShardSource {
  public:
    explicit LiveStateSource(ModelState& state) : m_shards(state.shards()) {
        for (auto& stage : m_stages) stage = std::make_unique<AlignedFloats>(kStageFloats);
    }
    size_t piece_floats() const override { return kStageFloats; }
    const float* read(int unit, int which, size_t begin, size_t count) override {
        float* stage = m_stages[m_next]->data;
        m_next = (m_next + 1) % m_stages.size();
        m_shards.read(unit, state_kind(which), begin, begin + count, stage);
        return stage;
    }

  private:
    StateShards m_shards;
    std::array<std::unique_ptr<AlignedFloats>, kWritesInFlight + 1> m_stages;  // save_staging_bytes counts them
    size_t m_next = 0;
};

class SnapshotSource final : public ShardSource {
  public:
    explicit SnapshotSource(const CheckpointSnapshot& snapshot) : m_snapshot(snapshot) {}
    /// 16 MiB writes: large enough for the disk, small enough to interleave with hashing.
    size_t piece_floats() const override { return 4 * kStageFloats; }
    const float* read(int unit, int which, size_t begin, size_t) override {
        return m_snapshot.data(unit, which) +
               (begin - saved_range(m_snapshot.plan(), m_snapshot.stage(), unit, m_snapshot.rank()).begin);
    }

  private:
    const CheckpointSnapshot& m_snapshot;
};

// ---------------------------------------------------------------------------------------
// One save (checkpoint_commit.cpp) and this rank's shard of it (shard_writer.cpp)
// ---------------------------------------------------------------------------------------

/// Where one save goes.
struct SaveTarget {
    std::string ckpt_dir;
    std::string name;       ///< step_N
    std::string final_dir;  ///< ckpt_dir/step_N
    std::string partial;    ///< ckpt_dir/step_N.partial, where every file is written first
};

/// What each rank tells rank 0 about the shard file it wrote.
struct ShardRecord {
    uint64_t bytes = 0;
    uint64_t fnv = 0;
    uint64_t written = 0;     // 1 if this rank wrote a file
    uint64_t shard_rank = 0;  // whose shard it is (the file's index)
};

/// Which file of a checkpoint a state's shard goes to: the tensor slices it holds and its
/// pipeline stage (their files of the group), besides its shard rank.
struct ShardFile {
    TensorSplit split;
    PipelineStage stage;
};

/// This rank's shard file: master, adam_m and adam_v of every range it saves (saved_range),
/// read from `src`. Times its phases into `report`.
ShardRecord write_shard(const SaveTarget& t, const ShardPlan& plan, ShardSource& src, int rank, bool writes,
                        const ShardFile& which, CheckpointWriteReport& report, WritePacer* pacer);

// ---------------------------------------------------------------------------------------
// The manifest (checkpoint_manifest.cpp)
// ---------------------------------------------------------------------------------------

/// meta_json's tensor list: name, unit, offset and shape of every parameter.
nlohmann::json layout_json(const ModelLayout& layout);

/// The manifest fields that describe the model: fixed for a run. A split layout's and a
/// stage's are the whole unsplit model's, with `tensor`: T and `pipeline`: P.
nlohmann::json layout_meta(const ModelLayout& layout);

/// meta_json (fields: checkpoint.hpp) without its shard list.
/// `state`'s run: world size, shard group and stage are information for people and the
/// resume notes (the shard list says who saved what).
nlohmann::json make_meta_base(const nlohmann::json& layout_fields, const ModelState& state,
                              const CheckpointRecord& record);

/// The manifest's entry for the shard file `rec` (written by the rank that wrote it): its
/// name, size, hash and ranges (of the tensor slices' layout), with its tensor rank when
/// split and its stage under pipeline parallelism.
nlohmann::json shard_entry(const ShardPlan& plan, const ShardRecord& rec, const ShardFile& which);
/// The manifest's shard list: the entries of every written file, in stage, tensor rank and
/// shard rank order.
nlohmann::json shard_manifest(std::vector<nlohmann::json> entries);

/// meta.h5 (meta_json chunked with Fletcher32) and CHECKSUM, both fsynced with their directory.
void write_meta(const std::string& dir, const nlohmann::json& meta);

}  // namespace zt::ckpt_impl
