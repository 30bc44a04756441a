// Sharded HDF5 checkpoints: save, verify, load at any world size and ZeRO stage.
//
// Layout (one file per rank, written independently: works on any file system, needs no
// collective I/O, and a rank's write cost does not depend on the others):
//
//   CKPT_DIR/step_00000100/
//     meta.h5                         rank 0: /meta_json (uint8 dataset, the JSON below)
//     CHECKSUM                        rank 0: "hash64 <16 hex digits> meta.h5", the hash of
//                                     the whole meta.h5 file
//     shard_00000_of_00004.h5 ...     each primary owner (ShardPlan::is_primary: every rank
//                                     of the shard group under ZeRO, rank 0 under DDP; with
//                                     hybrid sharding only replica 0's group, so one copy of
//                                     each shard; "of N" is the group size), its primary ranges:
//                                       /unit_00003/master   float32 [end - begin]
//                                       /unit_00003/adam_m   float32 [end - begin]
//                                       /unit_00003/adam_v   float32 [end - begin]
//                                     attributes on /unit_00003: begin, end (unit elements)
//     shard_00000_of_00002_tensor_001_of_004.h5 ...
//                                     the same under tensor parallelism (parallel.tensor = 4):
//                                     each tensor rank's group writes its files, whose ranges
//                                     are elements of that rank's split layout
//                                     (make_model_layout(model, {4, 1}))
//     shard_00000_of_00002_stage_001_of_002.h5 ...
//                                     the same under pipeline parallelism (parallel.pipeline
//                                     = 2; after _tensor_ when both): each stage's group writes
//                                     the units of its stage, unit 0 (held by the first and
//                                     the last stage) only the first
//   CKPT_DIR/latest                   text: the newest complete step directory's name
//
// Checksums: meta_json lists every shard file with its size and hash64 (below) of its bytes,
// checked before a shard is used, so damage anywhere in a shard file (data or HDF5
// structure) is caught. (Older checkpoints also carry a hash64 attribute per shard
// dataset, checked on whole-dataset reads; the whole-file hash covers the same bytes, so
// new saves skip that second pass over the data.) meta.h5 is covered by
// CHECKSUM as a whole, and its meta_json dataset (chunked) by HDF5's Fletcher32 filter;
// meta.h5 carries no attribute (none is opened on load). Shard datasets are contiguous (no
// chunk copies, no filter); those of 64 KiB and more start on 4 KiB boundaries and are
// written by direct I/O after HDF5 has written the file's structure, and hashed from the
// memory they are written from (shard_writer.cpp, write_regions).
//
// A checkpoint is complete or absent: every file goes to step_N.partial/, each rank fsyncs
// its file, rank 0 writes meta.h5 (with the other files' hashes) after a barrier, renames
// the directory to step_N, fsyncs CKPT_DIR and replaces `latest` atomically (write to
// latest.tmp, fsync, rename). Older complete checkpoints beyond checkpoint.keep are removed.
// Re-saving a step that exists swaps the new directory in with renameat2(RENAME_EXCHANGE)
// (or moves the old one aside first where that is unsupported) and deletes the old copy
// only after `latest` is replaced.
//
// meta_json fields (version 2): format ("ztrain-checkpoint"), version (2), step,
// applied_steps, samples_seen, tokens_seen, world_size, shard_group (absent in older ones:
// world_size then), zero_stage (information only: the shard list below says who saved
// what), dtype, seed, scaler {scale, mode, clean_steps, hysteresis_left}, bad_steps,
// config_ini (the resolved deck, information only), inputs (the data and tokenizer
// fingerprint, train/input_fingerprint.hpp; absent in older ones), blend (a weighted
// data.train's cursor per corpus, train/blend_cursor.hpp; absent otherwise), lora_base
// {path} (a LoRA run's: its shards hold each unit's trained tail only, the frozen base comes
// from the weights at path, or from seed when path is ""; absent otherwise and in older
// LoRA checkpoints, which hold the base), model {n_layer, n_head, n_embd,
// seq_len, vocab_size, vocab_pad_to, init_from: every ModelConfig field; padded_vocab:
// derived}, units [numel per unit], tensors [{name, unit, offset, shape}], shards [{file,
// rank, bytes, hash64, units [{unit, begin, end}], tensor_rank (tensor > 1 only), stage (pipeline > 1
// only)}], tensor (the split it was written at; absent: 1), pipeline (its stages; absent: 1).
// Units and tensors always describe the whole unsplit model: CheckpointReader maps a split
// checkpoint's slices back (slice_runs) and finds each unit in whichever stage's files hold
// it, so it loads at any tensor split, pipeline, world size and stage, and zt-consolidate
// reads it like any other.
// Version 1 (older ztrain) is read too: the same fields, but its model record lacks
// vocab_pad_to and init_from (and is absent in the oldest ones); those come from config_ini,
// read by the config parser.
//
// Not here: what triggers a save (the trainer), consolidation to one file (zt-consolidate).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/model/model_layout.hpp"

namespace zt {

class Communicator;
class ModelState;
class ShardPlan;
class WritePacer;

/// Training-loop state that travels with the weights.
/// Global samples a loss-spike rollback skipped (train/spike_guard.hpp): when the data
/// cursor reaches `from`, it moves on by `samples`.
struct SkippedSpan {
    uint64_t from = 0;
    uint64_t samples = 0;
};

struct TrainProgress {
    long step = 0;             ///< optimizer-loop steps done (skipped ones included)
    long applied_steps = 0;    ///< steps whose update was applied (LR schedule, AdamW t)
    uint64_t samples_seen = 0; ///< global data cursor: the next step starts at this sample
    uint64_t tokens_seen = 0;
    double loss_scale = 1.0;
    /// How the scale above was kept: "dynamic" | "static" (fp16) | "none" (bf16, fp32). A
    /// resumed fp16 run takes the scaler state only from an fp16 checkpoint of its own mode.
    std::string loss_scale_mode = "none";
    int scaler_clean_steps = 0;
    int scaler_hysteresis_left = 0;
    int bad_steps = 0;
    /// The spans rollbacks skipped, in the order they were skipped (meta "skipped_samples",
    /// written only when there are any).
    std::vector<SkippedSpan> skipped;
};

/// Everything a checkpoint holds besides the model state: save_checkpoint takes it,
/// load_checkpoint returns it (the model state goes through the ModelState both ways).
struct CheckpointRecord {
    TrainProgress progress;
    std::string dtype;       ///< working dtype of the run that wrote it ("fp32" | "bf16" | "fp16")
    /// train.seed of that run: the data order and sampling depend on it, so a resume must
    /// use the same one. seed_known is false for a checkpoint that does not record it.
    uint64_t seed = 0;
    bool seed_known = true;
    std::string config_ini;  ///< the resolved deck (for people, tools and the resume notes)
    /// Where it was written (filled on load, from the meta; a save writes its state's own):
    /// 0 / -1 when the checkpoint does not record them.
    int world_size = 0;
    int shard_group = 0;  ///< ranks its state was split over (world_size before hybrid sharding)
    int tensor = 1;       ///< its tensor split (parallel.tensor); world_size / tensor read data
    int pipeline = 1;     ///< its pipeline stages (parallel.pipeline)
    int zero_stage = -1;
    /// The identity of the run's data and tokenizer (train/input_fingerprint.hpp), saved as
    /// meta_json "inputs"; null when not known (older checkpoints, runs that give none).
    nlohmann::json inputs;
    /// The data cursor of a weighted data.train, per corpus (train/blend_cursor.hpp), saved
    /// as meta_json "blend"; null for one corpus without weights (samples_seen is its cursor).
    nlohmann::json blend;
    /// A LoRA run's frozen base, which its checkpoints do not hold: the weights it was
    /// initialised from (model.init_from, made absolute), or empty when train.seed generated
    /// it. Saved as meta_json "lora_base": {"path": ...} whenever the model has adapters.
    std::string lora_base;
};

/// "step_00000100"
std::string checkpoint_dir_name(long step);

/// Complete checkpoints (step_* directories, no *.partial) in ckpt_dir, newest first.
std::vector<std::string> list_checkpoints(const std::string& ckpt_dir);

/// Writes DIR/CHECKSUM: the hash64 of meta.h5, checked before meta.h5 is parsed.
void write_checksum_file(const std::string& dir, const std::string& meta_file);

/// The checkpoint hash: FNV-1a 64 over 64-bit little-endian words, then the tail bytes.
/// `state` chains calls (all but the last must cover a multiple of 8 bytes).
constexpr uint64_t kHashSeed = 1469598103934665603ull;
uint64_t hash64(const void* data, size_t n, uint64_t state = kHashSeed);
/// hash64 of a whole file (streamed). Throws InputError naming the file.
uint64_t file_hash64(const std::string& path);

/// Writes a checkpoint of `state` + `record` into ckpt_dir (collective: every rank calls
/// it) and keeps the newest `keep` complete ones. Returns the final directory path. Throws
/// Error naming the file on any I/O failure; a failed save leaves at most a *.partial
/// directory, never a damaged complete checkpoint or `latest`.
std::string save_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                            const CheckpointRecord& record, int keep);

/// What one save did, for the metrics record and the benchmark: where it went, the bytes of
/// every file it published (all ranks' shards and meta.h5), and where this rank's time went.
struct CheckpointWriteReport {
    std::string dir;
    uint64_t bytes = 0;
    double shard_write_s = 0;  ///< this rank's shard: HDF5 structure, data written and hashed
                               ///< (a paced write's sleeps included: paced_s)
    double shard_sync_s = 0;   ///< its fsync
    double publish_s = 0;      ///< agreements, meta.h5, renames, latest, pruning
    bool direct_io = false;    ///< this rank's data went to the disk by O_DIRECT
    double writer_cpu_s = 0;   ///< CPU time of the background writer thread (async saves)
    // Pacing (async saves, ckpt/write_pacer.hpp; filled by BackgroundWriter):
    double pace_target_s = 0;  ///< the duration the data pass was spread over (0: not paced)
    double paced_s = 0;        ///< the time it slept to keep to that pace
    bool hurried = false;      ///< someone waited for the write while it was paced: pacing cut short
};

/// One rank's part of a checkpoint, copied out of the live state at a step boundary: the
/// master weights, AdamW m and v of every range this rank is the primary owner of, and the
/// manifest fields. The write reads only the snapshot, so training may change the state
/// while it runs (checkpoint.async). The buffer is allocated once and reused by every
/// capture.
class CheckpointSnapshot {
  public:
    /// Allocates the host buffer for this rank's primary ranges of `state` (its shard rank's;
    /// nothing on a replica other than 0, which writes no file) with the state's
    /// alloc_host: page-locked for a GPU state (full-speed device-to-host copies), plain host
    /// memory otherwise. Every page is touched here, so no capture pays for page faults.
    /// `state` must outlive the snapshot (it frees the buffer).
    explicit CheckpointSnapshot(ModelState& state);
    ~CheckpointSnapshot();
    CheckpointSnapshot(const CheckpointSnapshot&) = delete;
    CheckpointSnapshot& operator=(const CheckpointSnapshot&) = delete;

    /// Host bytes a snapshot of `rank`'s part of `plan` holds (the memory plan's item):
    /// 12 per element it saves (a pipeline `stage` saves no mirrored unit), each block rounded
    /// up to whole 4 KiB pages.
    static size_t planned_bytes(const ShardPlan& plan, int rank, const PipelineStage& stage = {});
    size_t bytes() const { return m_floats * sizeof(float); }

    /// Copies the state as it is now, with `record`, into the buffer (waits for the state's
    /// outstanding gathers; on host memory the copy bypasses the CPU caches).
    void capture(ModelState& state, const CheckpointRecord& record);

    long step() const { return m_step; }
    /// The state's shard rank, and whether this rank writes its shard (replica 0).
    int rank() const { return m_rank; }
    bool writes() const { return m_writes; }
    /// The tensor slices the state holds and its pipeline stage (its file among the groups').
    TensorSplit split() const { return m_split; }
    const PipelineStage& stage() const { return m_stage; }
    const ShardPlan& plan() const { return *m_plan; }
    /// The manifest without its shard list (make_meta's fields; filled by capture).
    const nlohmann::json& meta_base() const { return m_meta_base; }
    /// Element e of unit `unit`'s primary range, buffer `which` (0 master, 1 adam_m,
    /// 2 adam_v), at pointer[e - primary_range.begin].
    const float* data(int unit, int which) const;

  private:
    std::unique_ptr<ShardPlan> m_plan;
    int m_rank;
    bool m_writes;
    TensorSplit m_split;
    PipelineStage m_stage;
    ModelState& m_state;
    float* m_host = nullptr;
    size_t m_floats = 0;
    std::vector<size_t> m_unit_offset;  ///< per unit: offset of its master part in m_host
    nlohmann::json m_layout_json;       ///< model, units, tensors: fixed for the run
    nlohmann::json m_meta_base;
    long m_step = -1;
};

/// Writes `state` + `record` (streamed through a few small host buffers, no snapshot) and
/// reports what it did. Collective; errors as save_checkpoint.
CheckpointWriteReport write_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                                       const CheckpointRecord& record, int keep);
/// Host bytes that write_checkpoint(state) touches in its staging buffers on a rank whose
/// largest written range is `largest_range_floats` (for the memory plan): each buffer is
/// touched only as far as the pieces copied into it.
size_t save_staging_bytes(size_t largest_range_floats);
/// Writes a captured snapshot. Touches no ModelState, so it may run on a background thread
/// while training goes on; `comm` must then be a communicator of its own (its collectives
/// run beside the training ones). `pacer` (may be null: full speed) paces the shard's data
/// pass, the direct writes and the hash (ckpt/write_pacer.hpp). Collective; errors as
/// save_checkpoint.
CheckpointWriteReport write_checkpoint(const std::string& ckpt_dir, const CheckpointSnapshot& snapshot,
                                       Communicator& comm, int keep, WritePacer* pacer = nullptr);

/// Resolves checkpoint.resume: "never" -> ""; "auto" -> the directory `latest` names in
/// ckpt_dir, or "" when there is none; otherwise the given path (a step directory, or a
/// checkpoint directory holding `latest`). Throws InputError for a path that does not exist
/// or a `latest` that names something outside ckpt_dir. With "auto", a `latest` that names
/// a missing directory falls back to the newest complete checkpoint and says so in `*note`
/// (when given); with no complete checkpoint left it is an InputError.
std::string resolve_resume(const std::string& resume, const std::string& ckpt_dir, std::string* note = nullptr);

/// Whether step_dir is a complete, undamaged checkpoint: its meta.h5 verifies and every shard
/// it names has its recorded size and hash. "" when it is; otherwise why not (file named).
/// Reads every shard file once: for an error path or a tool, not for each resume.
std::string verify_checkpoint_files(const std::string& step_dir);

/// The newest checkpoint next to `path` (a step directory: its siblings; a checkpoint
/// directory: its steps) that verify_checkpoint_files accepts; "" when there is none. For
/// an error about a damaged checkpoint to name the step to use instead.
std::string newest_complete_checkpoint(const std::string& path);

/// Reads and verifies a checkpoint's meta.h5 (every rank may call it). Throws InputError
/// naming the file when it is missing, unreadable or fails its checks.
nlohmann::json read_checkpoint_meta(const std::string& step_dir);

class WeightsRanges;

/// Reads elements [begin, end) of one unit's `which` buffer ("master", "adam_m" or
/// "adam_v") from a checkpoint into host memory `out`, whatever the world size that wrote
/// it: the range is assembled from every shard that holds part of it. The one shard reader:
/// load_checkpoint and zt-consolidate both use it. Each shard file's size and hash are
/// verified the first time it is used. Throws InputError naming the file on damage, a
/// manifest range outside the model's units, or when the shards do not cover the range.
///
/// A LoRA run's checkpoint (meta_json "lora_base") holds its adapters and their state, not
/// the frozen base: the base's master elements are read from the weights its run was
/// initialised from (the recorded path, or `base` when given: zt-consolidate --base), or
/// regenerated from the recorded train.seed; its moments read zero.
class CheckpointReader {
  public:
    explicit CheckpointReader(const std::string& step_dir, std::string base = "");
    ~CheckpointReader();
    CheckpointReader(const CheckpointReader&) = delete;
    CheckpointReader& operator=(const CheckpointReader&) = delete;
    const nlohmann::json& meta() const { return m_meta; }
    const std::string& dir() const { return m_dir; }
    /// A LoRA checkpoint's base weights, where they are read (empty: none, or regenerated).
    const std::string& base_path() const { return m_base_path; }
    /// meta.h5's path, for messages about the manifest.
    std::string meta_file() const;
    /// Elements [begin, end) of unit `unit` of dataset `which` ("master", "adam_m",
    /// "adam_v") in the unsplit model's layout (the manifest's units), whatever tensor split
    /// wrote them: a tensor-parallel checkpoint's slices are mapped back (slice_runs).
    void read(int unit, size_t begin, size_t end, const char* which, float* out);
    /// The same in the layout of `part`, a split of the checkpoint's model (what a rank of
    /// another tensor split loads): straight from its files when the checkpoint was written
    /// at the same split, else through the unsplit layout.
    void read(const ModelLayout& part, int unit, size_t begin, size_t end, const char* which, float* out);
    /// The tensor split the checkpoint was written at (1: none).
    int tensor() const { return m_tensor; }
    /// A resume whose base has moved: a LoRA checkpoint whose base came from weights reads
    /// them at `path` instead of the recorded one (whether they are the same files is the
    /// caller's check: the inputs' fingerprint). Nothing for any other checkpoint.
    void follow_moved_base(const std::string& path) {
        if (m_base_elsewhere && !m_base_path.empty() && !path.empty()) m_base_path = path;
    }

  private:
    /// [begin, end) of `unit` in the layout of the files of tensor rank `tensor_rank`.
    void read_written(int tensor_rank, int unit, size_t begin, size_t end, const char* which, float* out);
    /// The same in the unsplit layout, from the shards whatever split wrote them.
    void read_saved(int unit, size_t begin, size_t end, const char* which, float* out);
    /// Frozen base elements [begin, end) of `unit` in the unsplit layout: from the base's
    /// weights, or regenerated from the recorded seed.
    void read_base(int unit, size_t begin, size_t end, const char* which, float* out);
    /// Where `unit` of `layout` stops being frozen: the shards hold it from there on (0 when
    /// they hold every element).
    size_t saved_begin(const ModelLayout& layout, int unit) const;
    /// The unsplit layout of the checkpoint's model (made on first use).
    const ModelLayout& whole();
    /// The layout of tensor rank r's files (made on first use).
    const ModelLayout& written_part(int r);

    std::string m_dir;
    nlohmann::json m_meta;
    std::vector<std::string> m_verified;
    int m_tensor = 1;
    std::unique_ptr<ModelLayout> m_whole;
    std::vector<std::unique_ptr<ModelLayout>> m_parts;
    bool m_base_elsewhere = false;  ///< meta_json has "lora_base"
    std::string m_base_path;        ///< its weights; empty: regenerated from train.seed
    std::unique_ptr<WeightsRanges> m_base;
};

/// Loads master weights and AdamW state into `state` (any world size / stage: each rank
/// reads its owned ranges, from whichever shards hold them) and returns the record saved
/// with them. Verifies every shard it reads. Collective. Throws InputError naming the file
/// and what differs when the checkpoint does not fit the model (shapes, tensor names).
/// `moved_base`: where a LoRA checkpoint's base is read from if not at its recorded path
/// (CheckpointReader::follow_moved_base; empty: the recorded path).
CheckpointRecord load_checkpoint(const std::string& step_dir, ModelState& state, Communicator& comm,
                                 const std::string& moved_base = "");

}  // namespace zt
