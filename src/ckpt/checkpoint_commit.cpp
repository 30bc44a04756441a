// Saving a checkpoint (format and guarantees: checkpoint.hpp), in phases: prepare the
// partial directory (rank 0), write the shards (every primary owner, shard_writer.cpp),
// then on rank 0 the manifest (checkpoint_manifest.cpp), meta.h5, publishing and pruning.
// The commit protocol: every file goes to step_N.partial/, which is renamed to step_N
// before `latest` is replaced; what an interrupted save left behind is undone by the next.
//
// Failure handling: every collective phase ends with an agreement (all ranks learn whether
// any rank failed, and the first failing rank's message), so a failure on one rank never
// leaves the others waiting, and every rank throws the same error.
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "checkpoint_format.hpp"
#include "checkpoint_internal.hpp"
#include "hdf5_util.hpp"
#include "manifest_agreement.hpp"
#include "ztrain/ckpt/write_pacer.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::silence_hdf5;
using namespace ckpt_format;
using namespace ckpt_impl;

std::string checkpoint_dir_name(long step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step_%08ld", step);
    return buf;
}

namespace {

/// Rank 0, at the start of a save: undoes what an interrupted earlier save left behind.
void recover_interrupted_saves(const std::string& ckpt_dir) {
    std::error_code ec;
    std::vector<fs::path> partials, replaced;  // collected first: the loops below rename and remove
    for (fs::directory_iterator it(ckpt_dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path& path = it->path();
        if (path.filename().string().rfind("step_", 0) != 0 || !it->is_directory(ec)) continue;
        if (path.extension() == ".partial") partials.push_back(path);
        if (path.extension() == ".replaced") replaced.push_back(path);
    }
    // A crash between the two renames of a re-save without RENAME_EXCHANGE left the only copy
    // of step_N at step_N.replaced: put it back. Any other leftover is a stale copy.
    for (const fs::path& r : replaced) {
        const fs::path original = r.parent_path() / r.stem();
        std::error_code e;
        if (!fs::exists(original)) {
            fs::rename(r, original, e);
        } else {
            fs::remove_all(r, e);
        }
    }
    // A step_N.partial is never a complete checkpoint that `latest` names (a crash after a
    // RENAME_EXCHANGE leaves the old copy there, next to the complete new step_N).
    for (const fs::path& p : partials) {
        std::error_code e;
        fs::remove_all(p, e);
    }
}

SaveTarget save_target(const std::string& ckpt_dir, long step) {
    SaveTarget t;
    t.ckpt_dir = ckpt_dir;
    t.name = checkpoint_dir_name(step);
    t.final_dir = (fs::path(ckpt_dir) / t.name).string();
    t.partial = t.final_dir + ".partial";
    return t;
}

/// Rank 0: an empty step_N.partial, after undoing what an interrupted earlier save left.
void prepare_partial_dir(const SaveTarget& t) {
    std::error_code ec;
    fs::create_directories(t.ckpt_dir, ec);
    if (ec) throw Error(str(t.ckpt_dir, ": cannot create checkpoint directory: ", ec.message()));
    recover_interrupted_saves(t.ckpt_dir);
    fs::remove_all(t.partial, ec);
    fs::create_directories(t.partial, ec);
    if (ec) throw Error(str(t.partial, ": cannot create: ", ec.message()));
}

/// Renames step_N.partial to step_N. Re-saving a step that exists swaps the two
/// directories in one step (RENAME_EXCHANGE), so step_N is never absent while `latest` may
/// name it. Returns where the previous step_N ended up ("" if there was none): it is
/// removed once `latest` is in place.
std::string move_into_place(const SaveTarget& t) {
    std::error_code ec;
    std::string replaced;
    if (fs::exists(t.final_dir)) {
        if (::renameat2(AT_FDCWD, t.partial.c_str(), AT_FDCWD, t.final_dir.c_str(), RENAME_EXCHANGE) == 0) {
            replaced = t.partial;
        } else {
            // No RENAME_EXCHANGE on this file system: move the old one aside first (a
            // window of two renames; resume=auto falls back to the newest complete one).
            replaced = t.final_dir + ".replaced";
            fs::remove_all(replaced, ec);
            fs::rename(t.final_dir, replaced, ec);
            if (ec) throw Error(str("cannot move ", t.final_dir, " aside to ", replaced, ": ", ec.message()));
        }
    }
    if (replaced != t.partial) fs::rename(t.partial, t.final_dir, ec);
    if (ec) {
        // Put the old copy back, so step_N (which `latest` may name) exists again.
        std::error_code back;
        if (!replaced.empty()) fs::rename(replaced, t.final_dir, back);
        throw Error(str("cannot rename ", t.partial, " to ", t.final_dir, ": ", ec.message(),
                        replaced.empty() ? "" : back ? str("; the previous copy stays at ", replaced)
                                                     : std::string("; the previous copy is back in place")));
    }
    fsync_path(t.ckpt_dir, true);
    return replaced;
}

/// Replaces ckpt_dir/latest atomically (write latest.tmp, fsync, rename, fsync the directory).
void point_latest_at(const SaveTarget& t) {
    const std::string latest = (fs::path(t.ckpt_dir) / "latest").string();
    {
        std::ofstream out(latest + ".tmp", std::ios::trunc);
        out << t.name << "\n";
        out.flush();
        if (!out) throw Error(str("cannot write ", latest, ".tmp (disk full?)"));
    }
    fsync_path(latest + ".tmp", false);
    std::error_code ec;
    fs::rename(latest + ".tmp", latest, ec);
    if (ec) throw Error(str("cannot replace ", latest, ": ", ec.message()));
    fsync_path(t.ckpt_dir, true);
}

/// Keeps the newest `keep` complete checkpoints (and always the one just written).
void prune(const SaveTarget& t, int keep) {
    std::error_code ec;
    const std::vector<std::string> steps = list_checkpoints(t.ckpt_dir);
    for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
        if (fs::path(steps[i]).filename() == t.name) continue;
        fs::remove_all(steps[i], ec);
    }
}

/// Every rank's `mine` (text of any length), in rank order, on every rank.
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine) {
    const size_t n = static_cast<size_t>(comm.size());
    std::vector<uint64_t> sizes(n);
    const uint64_t my_size = mine.size();
    comm.all_gather_bytes(&my_size, sizes.data(), sizeof my_size);
    const size_t width = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
    std::string padded = mine;
    padded.resize(width);
    std::string all(width * n, '\0');
    if (width > 0) comm.all_gather_bytes(padded.data(), all.data(), width);
    std::vector<std::string> out(n);
    for (size_t r = 0; r < n; ++r) out[r] = all.substr(r * width, static_cast<size_t>(sizes[r]));
    return out;
}

/// The save's phases on every rank: prepare step_N.partial (rank 0), write the shards, then
/// on rank 0 meta.h5, the renames, `latest` and pruning. Each phase ends in an agreement.
/// `pacer` (may be null) paces the shard's data pass.
CheckpointWriteReport publish_checkpoint(const std::string& ckpt_dir, long step, const ShardPlan& plan,
                                         int shard_rank, bool writes, const ShardFile& which, ShardSource& src,
                                         nlohmann::json meta, Communicator& comm, int keep, WritePacer* pacer) {
    silence_hdf5();
    const int rank = comm.rank();
    const SaveTarget target = save_target(ckpt_dir, step);
    CheckpointWriteReport report;
    auto t0 = std::chrono::steady_clock::now();
    agree_on_manifest(comm, [&] {
        if (rank == 0) prepare_partial_dir(target);
    });
    const double prepare_s = seconds_since(t0);
    ShardRecord mine;
    agree_on_manifest(comm,
                      [&] { mine = write_shard(target, plan, src, shard_rank, writes, which, report, pacer); });
    if (pacer) pacer->end();
    t0 = std::chrono::steady_clock::now();
    // Each writer describes its own file: the stages of a pipeline hold different units.
    const std::vector<std::string> entries =
        all_gather_text(comm, mine.written ? shard_entry(plan, mine, which).dump() : std::string());
    std::vector<uint64_t> shard_bytes(static_cast<size_t>(comm.size()));
    comm.all_gather_bytes(&mine.bytes, shard_bytes.data(), sizeof(uint64_t));
    for (const uint64_t b : shard_bytes) report.bytes += b;
    uint64_t meta_bytes = 0;
    agree_on_manifest(comm, [&] {
        if (rank != 0) return;
        std::vector<nlohmann::json> written;
        for (const std::string& e : entries) {
            if (!e.empty()) written.push_back(nlohmann::json::parse(e));
        }
        meta["shards"] = shard_manifest(std::move(written));
        write_meta(target.partial, meta);
        meta_bytes = static_cast<uint64_t>(fs::file_size(fs::path(target.partial) / kMetaFile));
        const std::string replaced = move_into_place(target);
        point_latest_at(target);
        std::error_code ec;
        if (!replaced.empty()) fs::remove_all(replaced, ec);
        prune(target, keep);
    });
    comm.broadcast_bytes(&meta_bytes, sizeof meta_bytes, 0);
    report.bytes += meta_bytes;
    report.publish_s = prepare_s + seconds_since(t0);
    report.dir = target.final_dir;
    return report;
}

}  // namespace

CheckpointWriteReport write_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                                       const CheckpointRecord& record, int keep) {
    LiveStateSource src(state);
    const ShardPlan& plan = state.shard_plan();
    return publish_checkpoint(ckpt_dir, record.progress.step, plan, state.shard_rank(), state.replica() == 0,
                              ShardFile{state.layout().split, state.layout().stage}, src, make_meta_base(layout_meta(state.layout()), state, record),
                              comm, keep, nullptr);  // a synchronous save is never paced
}

CheckpointWriteReport write_checkpoint(const std::string& ckpt_dir, const CheckpointSnapshot& snapshot,
                                       Communicator& comm, int keep, WritePacer* pacer) {
    ZT_REQUIRE(snapshot.step() >= 0, "write_checkpoint: the snapshot was never captured");
    SnapshotSource src(snapshot);
    return publish_checkpoint(ckpt_dir, snapshot.step(), snapshot.plan(), snapshot.rank(), snapshot.writes(),
                              ShardFile{snapshot.split(), snapshot.stage()}, src, snapshot.meta_base(), comm, keep,
                              pacer);
}

std::string save_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                            const CheckpointRecord& record, int keep) {
    return write_checkpoint(ckpt_dir, state, comm, record, keep).dir;
}

}  // namespace zt
