// Sharded HDF5 checkpoints: save (in phases), load, resume resolution, hashes (format and
// guarantees: checkpoint.hpp). Reading meta.h5 and shards: checkpoint_reader.cpp; who owns
// and saves which elements: the model state's ShardPlan (parallel/shard_layout.hpp).
//
// Failure handling: every collective phase ends with an agreement (all ranks learn whether
// any rank failed, and the first failing rank's message), so a failure on one rank never
// leaves the others waiting, and every rank throws the same error.
#include "ztrain/ckpt/checkpoint.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "checkpoint_format.hpp"
#include "hdf5_util.hpp"
#include "model_record.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::silence_hdf5;
using h5::write_u64_attr;
using namespace ckpt_format;

namespace {
constexpr hsize_t kChunkElements = 1 << 20;  // meta_json chunk size (Fletcher32 per chunk)

void fsync_path(const std::string& path, bool directory) {
    const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) throw Error(str("cannot open ", path, " to sync it: ", std::strerror(errno)));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) throw Error(str("fsync ", path, " failed: ", std::strerror(err)));
}

/// Floats staged through host memory at a time when state goes to or comes from a file: the
/// state may be device memory, and staging a whole unit would add the largest unit to the
/// peak (GPT-2's embedding: 154 MB). Even, so every piece but the last hashes a multiple of
/// 8 bytes (hash64 chains over such pieces).
constexpr size_t kStageFloats = size_t{1} << 20;  // 4 MiB

/// A contiguous float dataset (no chunk copies) with its hash64 as an attribute: the shard's
/// whole-file hash is verified before any read, and the per-dataset hash lets a tool check
/// one dataset on its own. Elements [begin, begin + n) of the state buffer `src` are written
/// through `stage` (kStageFloats floats), a piece at a time.
void write_float_dataset(hid_t group, const char* name, ModelState& state, const float* src, size_t n,
                         std::vector<float>& stage, const std::string& file) {
    const hsize_t dims[1] = {static_cast<hsize_t>(n)};
    H5Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    h5_require(space.ok(), false, file, str("cannot set up dataset ", name));
    H5Handle ds(H5Dcreate2(group, name, H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
    h5_require(ds.ok(), false, file, str("cannot create dataset ", name));
    uint64_t hash = kHashSeed;
    for (size_t at = 0; at < n; at += kStageFloats) {
        const size_t count = std::min(kStageFloats, n - at);
        state.copy_to_host(stage.data(), src + at, count);
        const hsize_t start[1] = {static_cast<hsize_t>(at)};
        const hsize_t len[1] = {static_cast<hsize_t>(count)};
        H5Handle mem(H5Screate_simple(1, len, nullptr), H5Sclose);
        h5_require(mem.ok(), false, file, str("cannot set up dataset ", name));
        h5_require(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, len, nullptr) >= 0, false, file,
                   str("cannot select elements of dataset ", name));
        h5_require(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, stage.data()) >= 0,
                   false, file, str("cannot write dataset ", name, " (disk full?)"));
        hash = hash64(stage.data(), count * sizeof(float), hash);
    }
    write_u64_attr(ds.get(), "hash64", hash, file);
}

/// Refuses to start a write that cannot fit: HDF5 does not recover cleanly from ENOSPC in
/// the middle of a file (its handle stays half-open until library shutdown), so the space is
/// checked up front. `bytes` is the payload; HDF5 adds ~1% plus a few KiB of structure.
void require_free_space(const std::string& dir, uint64_t bytes, const std::string& file) {
    struct statvfs st {};
    if (::statvfs(dir.c_str(), &st) != 0) return;  // unknown: let the write report errors
    const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
    const uint64_t need = bytes + bytes / 50 + (256u << 10);
    if (free_bytes < need) {
        throw Error(str(file, ": not enough space to write it: needs about ", need >> 10, " KiB, ", free_bytes >> 10,
                        " KiB free on the file system (disk full?)"));
    }
}

/// The three buffers a checkpoint holds per unit, by dataset name: base[e] is element e.
std::array<std::pair<const char*, float*>, 3> state_buffers(ModelState& state, int unit) {
    return {{{"master", state.master_base(unit)}, {"adam_m", state.adam_m_base(unit)}, {"adam_v", state.adam_v_base(unit)}}};
}

/// What each rank tells rank 0 about the shard file it wrote.
struct ShardRecord {
    uint64_t bytes = 0;
    uint64_t fnv = 0;
    uint64_t written = 0;  // 1 if this rank wrote a file
};

nlohmann::json layout_json(const ModelLayout& layout) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const ParamSpec& p : layout.params) {
        tensors.push_back({{"name", p.name}, {"unit", p.unit}, {"offset", p.offset}, {"shape", p.shape}});
    }
    return tensors;
}

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

std::vector<std::string> list_checkpoints(const std::string& ckpt_dir) {
    std::vector<std::string> steps;
    std::error_code ec;
    if (!fs::is_directory(ckpt_dir, ec)) return steps;
    for (const auto& entry : fs::directory_iterator(ckpt_dir, ec)) {
        const std::string n = entry.path().filename().string();
        if (entry.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos) {
            steps.push_back(entry.path().string());
        }
    }
    std::sort(steps.rbegin(), steps.rend());
    return steps;
}

void agree_across_ranks(Communicator& comm, const std::function<void()>& body) {
    std::string msg;
    double kind = 0;  // 0 ok, 1 Error, 2 InputError
    try {
        body();
    } catch (const InputError& e) {
        msg = e.what();
        kind = 2;
    } catch (const nlohmann::json::exception& e) {
        // A manifest field of the wrong type or missing: the checkpoint is bad input.
        msg = str("malformed checkpoint manifest: ", e.what());
        kind = 2;
    } catch (const std::exception& e) {
        msg = e.what();
        kind = 1;
    }
    // The lowest failing rank speaks for everyone: max of -rank is the smallest failing rank.
    double first = kind > 0 ? -static_cast<double>(comm.rank()) : -static_cast<double>(comm.size());
    comm.all_reduce_scalars(&first, 1, ReduceOp::kMax);
    const int failing = static_cast<int>(-first);
    if (failing >= comm.size()) return;
    double k = failing == comm.rank() ? kind : 0;
    comm.all_reduce_scalars(&k, 1, ReduceOp::kMax);
    uint64_t len = failing == comm.rank() ? msg.size() : 0;
    comm.broadcast_bytes(&len, sizeof len, failing);
    msg.resize(len);
    comm.broadcast_bytes(msg.data(), len, failing);
    if (failing != comm.rank()) msg = str(msg, " (reported by rank ", failing, ")");
    if (k >= 2) throw InputError(msg);
    throw Error(msg);
}

std::string checkpoint_dir_name(long step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step_%08ld", step);
    return buf;
}

uint64_t hash64(const void* data, size_t n, uint64_t state) {
    // FNV-1a over 64-bit little-endian words, then the tail bytes: one multiply per 8 bytes
    // keeps hashing a multi-GB checkpoint well below the cost of writing it.
    const unsigned char* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        state ^= w;
        state *= 1099511628211ull;
    }
    for (; i < n; ++i) {
        state ^= p[i];
        state *= 1099511628211ull;
    }
    return state;
}

uint64_t file_hash64(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(str(path, ": cannot open to verify its checksum"));
    uint64_t h = kHashSeed;
    // Up to 4 MiB at a time, a multiple of 8 so chunking does not change the hash; small
    // files get a small buffer.
    std::error_code ec;
    const uint64_t size = static_cast<uint64_t>(fs::file_size(path, ec));
    const size_t chunk = ec ? (size_t{1} << 22) : static_cast<size_t>(std::min<uint64_t>((size + 7) / 8 * 8, 1u << 22));
    std::vector<char> buf(std::max<size_t>(chunk, 8));
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        h = hash64(buf.data(), static_cast<size_t>(in.gcount()), h);
    }
    return h;
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

}  // namespace

std::string resolve_resume(const std::string& resume, const std::string& ckpt_dir, std::string* note) {
    if (resume == "never") return "";
    auto from_latest = [note](const std::string& dir, bool required) -> std::string {
        const fs::path latest = fs::path(dir) / "latest";
        if (!fs::exists(latest)) {
            if (required) {
                throw InputError(str(dir, ": neither a checkpoint step directory (no meta.h5) nor a checkpoint "
                                          "directory (no 'latest' file)"));
            }
            return "";
        }
        std::ifstream in(latest);
        std::string name;
        std::getline(in, name);
        // `latest` names a directory inside the checkpoint directory, nothing else.
        const bool plain = !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
        if (!plain) {
            throw InputError(str(latest.string(), ": names '", name,
                                 "', which is not a step directory inside ", dir));
        }
        const fs::path step = fs::path(dir) / name;
        const fs::path aside = fs::path(dir) / (name + ".replaced");
        if (!fs::is_directory(step) && fs::exists(aside / "meta.h5") && fs::exists(aside / kChecksumFile)) {
            // A re-save without RENAME_EXCHANGE was interrupted between its renames: the
            // previous copy of this step is complete; read it where it is (the next save
            // moves it back).
            if (note) *note = str(latest.string(), " names '", name, "', found at ", aside.string());
            return aside.string();
        }
        if (!fs::is_directory(step)) {
            // resume=auto: a crash between a save's renames, or a removed directory, leaves
            // `latest` dangling; the newest complete checkpoint is the one to continue from.
            const std::vector<std::string> steps = required ? std::vector<std::string>{} : list_checkpoints(dir);
            if (steps.empty()) {
                throw InputError(str(latest.string(), ": names '", name, "', which does not exist in ", dir,
                                     required ? "" : ", and no other complete checkpoint is there"));
            }
            if (note) {
                *note = str(latest.string(), " names '", name, "', which does not exist; resuming from the newest "
                            "complete checkpoint, ", steps.front());
            }
            return steps.front();
        }
        return step.string();
    };
    if (resume == "auto") return from_latest(ckpt_dir, false);
    if (!fs::exists(resume)) throw InputError(str("checkpoint.resume: '", resume, "' does not exist"));
    if (fs::exists(fs::path(resume) / "meta.h5")) return resume;
    return from_latest(resume, true);
}

// ---------------------------------------------------------------------------------------
// Save, in phases: prepare the partial directory (rank 0), write the shards (every primary
// owner), then on rank 0 the manifest, meta.h5, publishing and pruning.
// ---------------------------------------------------------------------------------------
namespace {

/// Where one save goes.
struct SaveTarget {
    std::string ckpt_dir;
    std::string name;       ///< step_N
    std::string final_dir;  ///< ckpt_dir/step_N
    std::string partial;    ///< ckpt_dir/step_N.partial, where every file is written first
};

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

/// This rank's shard file: master, adam_m and adam_v of every range it is the primary owner
/// of. The buffers may be device memory: they go through the host buffer `host`.
ShardRecord write_shard(const SaveTarget& t, ModelState& state, int rank, int world) {
    const ShardPlan& plan = state.shard_plan();
    if (!plan.is_primary(rank)) return ShardRecord{};
    const std::string file = (fs::path(t.partial) / shard_file_name(rank, world)).string();
    uint64_t payload = 0;
    for (int u = 0; u < plan.num_units(); ++u) payload += 3 * sizeof(float) * plan.primary_range(u, rank).size();
    require_free_space(t.partial, payload, file);
    {
        H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
        h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
        std::vector<float> stage(kStageFloats);
        for (int u = 0; u < plan.num_units(); ++u) {
            const ElementRange r = plan.primary_range(u, rank);
            if (r.empty()) continue;
            H5Handle g(H5Gcreate2(f.get(), unit_group_name(u).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       H5Gclose);
            h5_require(g.ok(), false, file, str("cannot create group ", unit_group_name(u)));
            write_u64_attr(g.get(), "begin", r.begin, file);
            write_u64_attr(g.get(), "end", r.end, file);
            for (const auto& [which, base] : state_buffers(state, u)) {
                write_float_dataset(g.get(), which, state, base + r.begin, r.size(), stage, file);
            }
        }
        h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
    }
    fsync_path(file, false);
    ShardRecord mine;
    mine.written = 1;
    mine.bytes = static_cast<uint64_t>(fs::file_size(file));
    mine.fnv = file_hash64(file);
    return mine;
}

/// The manifest's shard list: every written file with its size, hash and ranges.
nlohmann::json shard_manifest(const ShardPlan& plan, const std::vector<ShardRecord>& records) {
    nlohmann::json shard_list = nlohmann::json::array();
    for (int r = 0; r < plan.world_size(); ++r) {
        const ShardRecord& rec = records[static_cast<size_t>(r)];
        if (!rec.written) continue;
        nlohmann::json units = nlohmann::json::array();
        for (int u = 0; u < plan.num_units(); ++u) {
            const ElementRange range = plan.primary_range(u, r);
            if (!range.empty()) units.push_back({{"unit", u}, {"begin", range.begin}, {"end", range.end}});
        }
        shard_list.push_back({{"file", shard_file_name(r, plan.world_size())}, {"rank", r}, {"bytes", rec.bytes},
                              {"hash64", rec.fnv}, {"units", units}});
    }
    return shard_list;
}

/// meta_json (fields: checkpoint.hpp).
nlohmann::json make_meta(const ModelState& state, const CheckpointRecord& record, const nlohmann::json& shards) {
    const TrainProgress& progress = record.progress;
    const ModelLayout& layout = state.layout();
    nlohmann::json meta;
    meta["format"] = kFormatName;
    meta["version"] = kFormatVersion;
    meta["step"] = progress.step;
    meta["applied_steps"] = progress.applied_steps;
    meta["samples_seen"] = progress.samples_seen;
    meta["tokens_seen"] = progress.tokens_seen;
    meta["world_size"] = state.shard_plan().world_size();
    meta["zero_stage"] = state.zero_stage();
    meta["dtype"] = record.dtype;
    meta["seed"] = record.seed;
    meta["scaler"] = {{"scale", progress.loss_scale},
                      {"mode", progress.loss_scale_mode},
                      {"clean_steps", progress.scaler_clean_steps},
                      {"hysteresis_left", progress.scaler_hysteresis_left}};
    meta["bad_steps"] = progress.bad_steps;
    meta["config_ini"] = record.config_ini;
    meta["model"] = model_record(layout.model);
    meta["units"] = layout.unit_numel;
    meta["tensors"] = layout_json(layout);
    meta["shards"] = shards;
    return meta;
}

/// meta.h5 (meta_json chunked with Fletcher32) and CHECKSUM, both fsynced with their directory.
void write_meta(const std::string& dir, const nlohmann::json& meta) {
    const std::string text = meta.dump(1);
    const std::string file = (fs::path(dir) / kMetaFile).string();
    require_free_space(dir, text.size(), file);
    {
        H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
        h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
        const hsize_t dims[1] = {static_cast<hsize_t>(text.size())};
        H5Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
        H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
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

}  // namespace

std::string save_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                            const CheckpointRecord& record, int keep) {
    silence_hdf5();
    const int rank = comm.rank();
    const SaveTarget target = save_target(ckpt_dir, record.progress.step);
    agree_across_ranks(comm, [&] {
        if (rank == 0) prepare_partial_dir(target);
    });
    ShardRecord mine;
    agree_across_ranks(comm, [&] { mine = write_shard(target, state, rank, comm.size()); });
    std::vector<ShardRecord> records(static_cast<size_t>(comm.size()));
    comm.all_gather_bytes(&mine, records.data(), sizeof(ShardRecord));
    agree_across_ranks(comm, [&] {
        if (rank != 0) return;
        write_meta(target.partial, make_meta(state, record, shard_manifest(state.shard_plan(), records)));
        const std::string replaced = move_into_place(target);
        point_latest_at(target);
        std::error_code ec;
        if (!replaced.empty()) fs::remove_all(replaced, ec);
        prune(target, keep);
    });
    return target.final_dir;
}

// ---------------------------------------------------------------------------------------
// Load
// ---------------------------------------------------------------------------------------
namespace {

/// The checkpoint's model must be this one: same units, same tensors at the same places.
void require_same_model(const CheckpointReader& reader, const ModelLayout& layout) {
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
    record.seed_known = meta.contains("seed");
    record.seed = meta.value("seed", uint64_t{0});
    record.config_ini = meta.value("config_ini", std::string());
    record.world_size = meta.value("world_size", 0);
    record.zero_stage = meta.value("zero_stage", -1);
    return record;
}

/// Reads master, adam_m and adam_v of every range this rank owns, kStageFloats at a time
/// through host memory (the state's buffers may be device memory).
void read_owned_state(CheckpointReader& reader, ModelState& state, int rank) {
    const ShardPlan& plan = state.shard_plan();
    std::vector<float> stage(kStageFloats);
    for (int u = 0; u < plan.num_units(); ++u) {
        const ElementRange r = plan.owned_range(u, rank);
        for (const auto& [which, base] : state_buffers(state, u)) {
            for (size_t at = r.begin; at < r.end; at += kStageFloats) {
                const size_t end = std::min(r.end, at + kStageFloats);
                reader.read(u, at, end, which, stage.data());
                state.copy_from_host(base + at, stage.data(), end - at);
            }
        }
    }
}

}  // namespace

CheckpointRecord load_checkpoint(const std::string& step_dir, ModelState& state, Communicator& comm) {
    silence_hdf5();
    CheckpointRecord record;
    agree_across_ranks(comm, [&] {
        CheckpointReader reader(step_dir);
        require_same_model(reader, state.layout());
        record = record_of(reader.meta());
        read_owned_state(reader, state, comm.rank());
    });
    state.sync_working_from_master();
    return record;
}

}  // namespace zt
