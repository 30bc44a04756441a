// Sharded HDF5 checkpoints (format and guarantees: checkpoint.hpp).
//
// Failure handling: every collective phase ends with an agreement (all ranks learn whether
// any rank failed, and the first failing rank's message), so a failure on one rank never
// leaves the others waiting, and every rank throws the same error.
#include "ztrain/ckpt/checkpoint.hpp"
#include "hdf5_util.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <sstream>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::require_plain_storage;
using h5::silence_hdf5;

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "ztrain-checkpoint";
constexpr hsize_t kChunkElements = 1 << 20;  // meta_json chunk size (Fletcher32 per chunk)


void fsync_path(const std::string& path, bool directory) {
    const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) throw Error(str("cannot open ", path, " to sync it: ", std::strerror(errno)));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) throw Error(str("fsync ", path, " failed: ", std::strerror(err)));
}

void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file);

/// A contiguous float dataset (one write, no chunk copies) with its hash64 as an attribute:
/// the shard's whole-file hash is verified before any read, and the per-dataset hash lets a
/// tool check one dataset on its own.
void write_float_dataset(hid_t group, const char* name, const float* data, size_t n, const std::string& file) {
    const hsize_t dims[1] = {static_cast<hsize_t>(n)};
    H5Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    h5_require(space.ok(), false, file, str("cannot set up dataset ", name));
    H5Handle ds(H5Dcreate2(group, name, H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
    h5_require(ds.ok(), false, file, str("cannot create dataset ", name));
    h5_require(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, false, file,
               str("cannot write dataset ", name, " (disk full?)"));
    write_u64_attr(ds.get(), "hash64", hash64(data, n * sizeof(float)), file);
}

void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file) {
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    H5Handle attr(H5Acreate2(obj, name, H5T_NATIVE_UINT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    h5_require(attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_UINT64, &v) >= 0, false, file,
               str("cannot write attribute ", name));
}

uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file) {
    H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    uint64_t v = 0;
    h5_require(attr.ok() && H5Aread(attr.get(), H5T_NATIVE_UINT64, &v) >= 0, true, file,
               str("missing or unreadable attribute ", name));
    return v;
}

/// Reads elements [first, first + n) of a 1-D float dataset (the file's hash was verified).
void read_float_range(hid_t group, const char* name, size_t first, size_t n, float* out, const std::string& file) {
    H5Handle ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
    h5_require(ds.ok(), true, file, str("missing dataset ", name));
    H5Handle space(H5Dget_space(ds.get()), H5Sclose);
    hsize_t dims[1] = {0};
    h5_require(space.ok() && H5Sget_simple_extent_ndims(space.get()) == 1 &&
                   H5Sget_simple_extent_dims(space.get(), dims, nullptr) == 1,
               true, file, str("dataset ", name, " is not one-dimensional"));
    h5_require(first + n <= dims[0], true, file,
               str("dataset ", name, " has ", dims[0], " elements, need [", first, ", ", first + n, ")"));
    require_plain_storage(ds.get(), file, name);
    const hsize_t start[1] = {static_cast<hsize_t>(first)};
    const hsize_t count[1] = {static_cast<hsize_t>(n)};
    H5Handle mem(H5Screate_simple(1, count, nullptr), H5Sclose);
    h5_require(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0, true, file,
               str("cannot select a range of ", name));
    h5_require(H5Dread(ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, out) >= 0, true, file,
               str("dataset ", name, " failed its checksum or could not be read (damaged file?)"));
    // A whole-dataset read also checks the dataset's own hash (the common case: loading at
    // the world size and stage that wrote it). Partial reads rely on the file hash.
    if (first == 0 && n == dims[0] && H5Aexists(ds.get(), "hash64") > 0) {
        h5_require(read_u64_attr(ds.get(), "hash64", file) == hash64(out, n * sizeof(float)), true, file,
                   str("dataset ", name, " does not match its hash64 attribute (damaged)"));
    }
}

/// write_float_dataset / read_float_range for n floats of a ModelState's buffers, which are
/// device memory on a GPU backend: those go through the host buffer `stage`.
void write_state_dataset(hid_t group, const char* name, ModelState& state, const float* data, size_t n,
                         const std::string& file, std::vector<float>& stage) {
    if (!state.host_memory()) {
        stage.resize(n);
        state.copy_to_host(stage.data(), data, n);
        data = stage.data();
    }
    write_float_dataset(group, name, data, n, file);
}

void read_state_range(hid_t group, const char* name, size_t first, size_t n, ModelState& state, float* out,
                      const std::string& file, std::vector<float>& stage) {
    if (state.host_memory()) {
        read_float_range(group, name, first, n, out, file);
        return;
    }
    stage.resize(n);
    read_float_range(group, name, first, n, stage.data(), file);
    state.copy_from_host(out, stage.data(), n);
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

std::string shard_file_name(int rank, int world) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "shard_%05d_of_%05d.h5", rank, world);
    return buf;
}

std::string unit_group_name(int unit) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "unit_%05d", unit);
    return buf;
}


/// What each rank tells rank 0 about the shard file it wrote.
struct ShardRecord {
    uint64_t bytes = 0;
    uint64_t fnv = 0;
    uint64_t written = 0;  // 1 if this rank wrote a file
};

bool rank_writes(const ModelState& state, int rank) { return state.zero_stage() > 0 || rank == 0; }

nlohmann::json layout_json(const ModelLayout& layout) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const ParamSpec& p : layout.params) {
        tensors.push_back({{"name", p.name}, {"unit", p.unit}, {"offset", p.offset}, {"shape", p.shape}});
    }
    return tensors;
}

}  // namespace

namespace {
constexpr const char* kChecksumFile = "CHECKSUM";

std::string checksum_line(uint64_t h) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "hash64 %016llx meta.h5\n", static_cast<unsigned long long>(h));
    return buf;
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

std::string save_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                            const TrainProgress& progress, const std::string& config_ini,
                            const std::string& dtype, uint64_t seed, int keep) {
    silence_hdf5();
    const int rank = comm.rank();
    const int world = comm.size();
    const std::string name = checkpoint_dir_name(progress.step);
    const std::string final_dir = (fs::path(ckpt_dir) / name).string();
    const std::string partial = final_dir + ".partial";

    agree_across_ranks(comm, [&] {
        if (rank != 0) return;
        std::error_code ec;
        fs::create_directories(ckpt_dir, ec);
        if (ec) throw Error(str(ckpt_dir, ": cannot create checkpoint directory: ", ec.message()));
        recover_interrupted_saves(ckpt_dir);
        fs::remove_all(partial, ec);
        fs::create_directories(partial, ec);
        if (ec) throw Error(str(partial, ": cannot create: ", ec.message()));
    });

    ShardRecord mine;
    agree_across_ranks(comm, [&] {
        if (!rank_writes(state, rank)) return;
        const std::string file = (fs::path(partial) / shard_file_name(rank, world)).string();
        std::vector<float> stage;  // device backends only
        uint64_t payload = 0;
        for (int u = 0; u < state.layout().num_units(); ++u) {
            if (state.owned_end(u) > state.owned_begin(u)) payload += 3 * 4 * (state.owned_end(u) - state.owned_begin(u));
        }
        require_free_space(partial, payload, file);
        {
            H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
            h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
            for (int u = 0; u < state.layout().num_units(); ++u) {
                const size_t b = state.owned_begin(u);
                const size_t e = state.owned_end(u);
                if (e <= b) continue;
                H5Handle g(H5Gcreate2(f.get(), unit_group_name(u).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                           H5Gclose);
                h5_require(g.ok(), false, file, str("cannot create group ", unit_group_name(u)));
                write_u64_attr(g.get(), "begin", b, file);
                write_u64_attr(g.get(), "end", e, file);
                write_state_dataset(g.get(), "master", state, state.master_base(u) + b, e - b, file, stage);
                write_state_dataset(g.get(), "adam_m", state, state.adam_m_base(u) + b, e - b, file, stage);
                write_state_dataset(g.get(), "adam_v", state, state.adam_v_base(u) + b, e - b, file, stage);
            }
            h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
        }
        fsync_path(file, false);
        mine.written = 1;
        mine.bytes = static_cast<uint64_t>(fs::file_size(file));
        mine.fnv = file_hash64(file);
    });

    std::vector<ShardRecord> records(static_cast<size_t>(world));
    comm.all_gather_bytes(&mine, records.data(), sizeof(ShardRecord));

    agree_across_ranks(comm, [&] {
        if (rank != 0) return;
        const ModelLayout& layout = state.layout();
        const auto shards = make_unit_shards(layout.unit_numel, world);
        nlohmann::json meta;
        meta["format"] = kFormatName;
        meta["version"] = kFormatVersion;
        meta["step"] = progress.step;
        meta["applied_steps"] = progress.applied_steps;
        meta["samples_seen"] = progress.samples_seen;
        meta["tokens_seen"] = progress.tokens_seen;
        meta["world_size"] = world;
        meta["zero_stage"] = state.zero_stage();
        meta["dtype"] = dtype;
        meta["seed"] = seed;
        meta["scaler"] = {{"scale", progress.loss_scale},
                          {"mode", progress.loss_scale_mode},
                          {"clean_steps", progress.scaler_clean_steps},
                          {"hysteresis_left", progress.scaler_hysteresis_left}};
        meta["bad_steps"] = progress.bad_steps;
        meta["config_ini"] = config_ini;
        const ModelConfig& model = layout.model;
        meta["model"] = {{"n_layer", model.n_layer}, {"n_head", model.n_head}, {"n_embd", model.n_embd},
                         {"seq_len", model.seq_len}, {"vocab_size", model.vocab_size},
                         {"padded_vocab", model.padded_vocab()}};
        meta["units"] = layout.unit_numel;
        meta["tensors"] = layout_json(layout);
        nlohmann::json shard_list = nlohmann::json::array();
        for (int r = 0; r < world; ++r) {
            const ShardRecord& rec = records[static_cast<size_t>(r)];
            if (!rec.written) continue;
            nlohmann::json units = nlohmann::json::array();
            for (int u = 0; u < layout.num_units(); ++u) {
                const UnitShard& s = shards[static_cast<size_t>(u)];
                const size_t b = state.zero_stage() == 0 ? 0 : s.begin(r);
                const size_t e = state.zero_stage() == 0 ? s.numel : s.live_end(r);
                if (e > b) units.push_back({{"unit", u}, {"begin", b}, {"end", e}});
            }
            shard_list.push_back({{"file", shard_file_name(r, world)}, {"rank", r}, {"bytes", rec.bytes},
                                  {"hash64", rec.fnv}, {"units", units}});
        }
        meta["shards"] = shard_list;
        const std::string text = meta.dump(1);
        const std::string file = (fs::path(partial) / "meta.h5").string();
        require_free_space(partial, text.size(), file);
        {
            H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
            h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
            const hsize_t dims[1] = {static_cast<hsize_t>(text.size())};
            H5Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
            H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
            const hsize_t chunk[1] = {std::min<hsize_t>(dims[0], kChunkElements)};
            h5_require(H5Pset_chunk(dcpl.get(), 1, chunk) >= 0 && H5Pset_fletcher32(dcpl.get()) >= 0, false, file,
                       "cannot set up meta_json");
            H5Handle ds(H5Dcreate2(f.get(), "meta_json", H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT, dcpl.get(),
                                   H5P_DEFAULT),
                        H5Dclose);
            h5_require(ds.ok() && H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0,
                       false, file, "cannot write meta_json (disk full?)");
            h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
        }
        fsync_path(file, false);
        // meta.h5 is covered as a whole too: a damaged byte anywhere in it (HDF5 structure
        // included) is caught before it is parsed.
        write_checksum_file(partial, file);
        fsync_path(partial, true);
        // Publish: the directory rename is atomic; `latest` moves only after it. Re-saving a
        // step that exists swaps the two directories in one step (RENAME_EXCHANGE), so
        // step_N is never absent while `latest` may name it; the old copy, now at
        // step_N.partial, goes once `latest` is in place.
        std::error_code ec;
        std::string replaced;  // where the previous step_N ended up, if there was one
        if (fs::exists(final_dir)) {
            if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
                replaced = partial;
            } else {
                // No RENAME_EXCHANGE on this file system: move the old one aside first (a
                // window of two renames; resume=auto falls back to the newest complete one).
                replaced = final_dir + ".replaced";
                fs::remove_all(replaced, ec);
                fs::rename(final_dir, replaced, ec);
                if (ec) throw Error(str("cannot move ", final_dir, " aside to ", replaced, ": ", ec.message()));
            }
        }
        if (replaced != partial) fs::rename(partial, final_dir, ec);
        if (ec) {
            // Put the old copy back, so step_N (which `latest` may name) exists again.
            std::error_code back;
            if (!replaced.empty()) fs::rename(replaced, final_dir, back);
            throw Error(str("cannot rename ", partial, " to ", final_dir, ": ", ec.message(),
                            replaced.empty() ? "" : back ? str("; the previous copy stays at ", replaced)
                                                         : std::string("; the previous copy is back in place")));
        }
        fsync_path(ckpt_dir, true);
        const std::string latest = (fs::path(ckpt_dir) / "latest").string();
        {
            std::ofstream out(latest + ".tmp", std::ios::trunc);
            out << name << "\n";
            out.flush();
            if (!out) throw Error(str("cannot write ", latest, ".tmp (disk full?)"));
        }
        fsync_path(latest + ".tmp", false);
        fs::rename(latest + ".tmp", latest, ec);
        if (ec) throw Error(str("cannot replace ", latest, ": ", ec.message()));
        fsync_path(ckpt_dir, true);
        if (!replaced.empty()) fs::remove_all(replaced, ec);
        // Keep the newest `keep` complete checkpoints.
        const std::vector<std::string> steps = list_checkpoints(ckpt_dir);
        for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
            if (fs::path(steps[i]).filename() == name) continue;
            fs::remove_all(steps[i], ec);
        }
    });
    return final_dir;
}

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

nlohmann::json read_checkpoint_meta(const std::string& step_dir) {
    silence_hdf5();
    const std::string file = (fs::path(step_dir) / "meta.h5").string();
    if (!fs::exists(file)) throw InputError(str(file, ": missing (incomplete or not a checkpoint)"));
    {
        const std::string sum_path = (fs::path(step_dir) / kChecksumFile).string();
        std::ifstream in(sum_path, std::ios::binary);
        if (!in) throw InputError(str(sum_path, ": missing (incomplete or damaged checkpoint)"));
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (text != checksum_line(file_hash64(file))) {
            throw InputError(str(file, ": does not match ", sum_path, " (meta.h5 or its checksum is damaged)"));
        }
    }
    H5Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    h5_require(f.ok(), true, file, "cannot open as HDF5 (damaged or truncated?)");
    H5Handle ds(H5Dopen2(f.get(), "meta_json", H5P_DEFAULT), H5Dclose);
    h5_require(ds.ok(), true, file, "no meta_json dataset (not a ztrain checkpoint?)");
    H5Handle space(H5Dget_space(ds.get()), H5Sclose);
    hsize_t dims[1] = {0};
    h5_require(space.ok() && H5Sget_simple_extent_ndims(space.get()) == 1 &&
                   H5Sget_simple_extent_dims(space.get(), dims, nullptr) == 1 && dims[0] <= (hsize_t{1} << 28),
               true, file, "meta_json has an unexpected shape");
    require_plain_storage(ds.get(), file, "meta_json");
    {
        H5Handle type(H5Dget_type(ds.get()), H5Tclose);
        h5_require(type.ok() && H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1, true, file,
                   "meta_json is not a byte array");
    }
    // meta_json is checked by Fletcher32 (in HDF5) and, with the whole file, by CHECKSUM. No
    // attribute of meta.h5 is opened: libhdf5 1.10's attribute-message decoder overflows on
    // crafted messages (tests/fuzz/README.md, finding 5), and a third hash adds nothing.
    std::string text(static_cast<size_t>(dims[0]), '\0');
    h5_require(H5Dread(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0, true, file,
               "meta_json failed its checksum or could not be read (damaged file?)");
    nlohmann::json meta;
    try {
        meta = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        throw InputError(str(file, ": meta_json is not valid JSON: ", e.what()));
    }
    // value() throws json::type_error for a non-object or a mistyped field: still bad input.
    try {
        h5_require(meta.is_object() && meta.value("format", "") == kFormatName, true, file, "not a ztrain checkpoint");
        // Every number of the manifest is an integer except scaler.scale. A float anywhere else
        // (1e30 where a unit index belongs) would reach json::get<int> / get<size_t>, whose
        // float-to-integer conversion is undefined behaviour out of range: refuse it here, once,
        // for every reader of the manifest. Iterative: the nesting depth is the file's choice.
        const nlohmann::json* scale = nullptr;
        if (meta.contains("scaler") && meta.at("scaler").is_object() && meta.at("scaler").contains("scale")) {
            scale = &meta.at("scaler").at("scale");
        }
        std::vector<const nlohmann::json*> todo{&meta};
        while (!todo.empty()) {
            const nlohmann::json* j = todo.back();
            todo.pop_back();
            if (j != scale && j->is_number_float()) {
                throw InputError(str(file, ": meta_json holds the non-integer number ", j->dump(),
                                     " where an integer belongs"));
            }
            if (j->is_structured()) {
                for (const nlohmann::json& v : *j) todo.push_back(&v);
            }
        }
        h5_require(meta.value("version", 0) == kFormatVersion, true, file,
                   str("format version ", meta.value("version", 0), ", this ztrain reads version ", kFormatVersion));
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(file, ": malformed meta_json: ", e.what()));
    }
    for (const char* key : {"step", "applied_steps", "samples_seen", "units", "tensors", "shards", "scaler"}) {
        h5_require(meta.contains(key), true, file, str("meta_json lacks '", key, "'"));
    }
    return meta;
}

namespace {
/// The path of a shard named in the manifest: a plain file name inside the step directory,
/// never a path that leads elsewhere.
std::string shard_path(const std::string& step_dir, const nlohmann::json& shard) {
    const std::string name = shard.at("file").get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw InputError(str((fs::path(step_dir) / "meta.h5").string(), ": shard file name '", name,
                             "' is not a plain file name inside the checkpoint"));
    }
    return (fs::path(step_dir) / name).string();
}

/// Size and hash check of one shard file against its meta record.
void verify_shard_file(const std::string& file, const nlohmann::json& shard) {
    if (!fs::exists(file)) throw InputError(str(file, ": missing shard file"));
    const uint64_t bytes = static_cast<uint64_t>(fs::file_size(file));
    if (bytes != shard.at("bytes").get<uint64_t>()) {
        throw InputError(str(file, ": ", bytes, " bytes, the checkpoint recorded ", shard.at("bytes").get<uint64_t>(),
                             " (truncated or damaged)"));
    }
    if (file_hash64(file) != shard.at("hash64").get<uint64_t>()) {
        throw InputError(str(file, ": checksum mismatch (the file was damaged after it was written)"));
    }
}
}  // namespace

CheckpointReader::CheckpointReader(const std::string& step_dir)
    : m_dir(step_dir), m_meta(read_checkpoint_meta(step_dir)) {}

void CheckpointReader::read(int unit, size_t begin, size_t end, const char* which, float* out) {
    size_t covered = 0;
    for (const auto& shard : m_meta["shards"]) {
        const std::string file = shard_path(m_dir, shard);
        for (const auto& r : shard.at("units")) {
            if (r.at("unit").get<int>() != unit) continue;
            const size_t sb = r.at("begin").get<size_t>();
            const size_t b = std::max(sb, begin);
            const size_t e = std::min(r.at("end").get<size_t>(), end);
            if (e <= b) continue;
            if (std::find(m_verified.begin(), m_verified.end(), file) == m_verified.end()) {
                verify_shard_file(file, shard);
                m_verified.push_back(file);
            }
            H5Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
            h5_require(f.ok(), true, file, "cannot open as HDF5 (damaged?)");
            H5Handle g(H5Gopen2(f.get(), unit_group_name(unit).c_str(), H5P_DEFAULT), H5Gclose);
            h5_require(g.ok(), true, file, str("missing group ", unit_group_name(unit)));
            read_float_range(g.get(), which, b - sb, e - b, out + (b - begin), file);
            covered += e - b;
        }
    }
    if (covered != end - begin) {
        throw InputError(str(m_dir, ": the shards cover ", covered, " of elements [", begin, ", ", end, ") of unit ",
                             unit));
    }
}

TrainProgress load_checkpoint(const std::string& step_dir, ModelState& state, Communicator& comm) {
    silence_hdf5();
    TrainProgress p;
    agree_across_ranks(comm, [&] {
        const nlohmann::json meta = read_checkpoint_meta(step_dir);
        const std::string meta_file = (fs::path(step_dir) / "meta.h5").string();
        const ModelLayout& layout = state.layout();
        // The model must be the same: same units, same tensors at the same places.
        const auto units = meta["units"].get<std::vector<size_t>>();
        if (units != layout.unit_numel) {
            throw InputError(str(meta_file, ": the checkpoint's model has ", units.size(), " units (",
                                 units.empty() ? 0 : units[0], " elements in the first); this model has ",
                                 layout.unit_numel.size(), " (", layout.unit_numel[0],
                                 "): model.* settings differ from the run that wrote it"));
        }
        const nlohmann::json mine = layout_json(layout);
        for (size_t i = 0; i < mine.size(); ++i) {
            if (i >= meta["tensors"].size() || meta["tensors"][i] != mine[i]) {
                throw InputError(str(meta_file, ": tensor ", mine[i]["name"].get<std::string>(),
                                     " differs from the checkpoint's (", i < meta["tensors"].size() ? meta["tensors"][i].dump() : "absent",
                                     " vs ", mine[i].dump(), ")"));
            }
        }
        p.step = meta["step"].get<long>();
        p.applied_steps = meta["applied_steps"].get<long>();
        p.samples_seen = meta["samples_seen"].get<uint64_t>();
        p.tokens_seen = meta.value("tokens_seen", uint64_t{0});
        p.dtype = meta.value("dtype", std::string());
        p.loss_scale = meta["scaler"].value("scale", 1.0);
        // Checkpoints written before the mode was recorded: fp16 ones count as dynamic (the default).
        p.loss_scale_mode = meta["scaler"].value("mode", std::string(p.dtype == "fp16" ? "dynamic" : "none"));
        p.scaler_clean_steps = meta["scaler"].value("clean_steps", 0);
        p.scaler_hysteresis_left = meta["scaler"].value("hysteresis_left", 1);
        p.bad_steps = meta.value("bad_steps", 0);
        p.seed_known = meta.contains("seed");
        p.seed = meta.value("seed", uint64_t{0});

        // Every owned element must be covered exactly by the saved ranges.
        std::vector<size_t> covered(static_cast<size_t>(layout.num_units()), 0);
        std::vector<float> stage;  // device backends only
        for (const auto& shard : meta["shards"]) {
            const std::string file = shard_path(step_dir, shard);
            bool needed = false;
            for (const auto& r : shard.at("units")) {
                const int u = r.at("unit").get<int>();
                // Range first: owned_begin/owned_end index the unit table.
                if (u < 0 || u >= layout.num_units()) throw InputError(str(file, ": unit ", u, " out of range"));
                const size_t b = std::max(r.at("begin").get<size_t>(), state.owned_begin(u));
                const size_t e = std::min(r.at("end").get<size_t>(), state.owned_end(u));
                if (e > b) needed = true;
            }
            if (!needed) continue;
            verify_shard_file(file, shard);
            H5Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
            h5_require(f.ok(), true, file, "cannot open as HDF5 (damaged?)");
            for (const auto& r : shard.at("units")) {
                const int u = r.at("unit").get<int>();
                if (u < 0 || u >= layout.num_units()) throw InputError(str(file, ": unit ", u, " out of range"));
                const size_t sb = r.at("begin").get<size_t>();
                const size_t b = std::max(sb, state.owned_begin(u));
                const size_t e = std::min(r.at("end").get<size_t>(), state.owned_end(u));
                if (e <= b) continue;
                H5Handle g(H5Gopen2(f.get(), unit_group_name(u).c_str(), H5P_DEFAULT), H5Gclose);
                h5_require(g.ok(), true, file, str("missing group ", unit_group_name(u)));
                h5_require(read_u64_attr(g.get(), "begin", file) == sb, true, file,
                           str(unit_group_name(u), ": begin differs from meta.h5"));
                read_state_range(g.get(), "master", b - sb, e - b, state, state.master_base(u) + b, file, stage);
                read_state_range(g.get(), "adam_m", b - sb, e - b, state, state.adam_m_base(u) + b, file, stage);
                read_state_range(g.get(), "adam_v", b - sb, e - b, state, state.adam_v_base(u) + b, file, stage);
                covered[static_cast<size_t>(u)] += e - b;
            }
        }
        for (int u = 0; u < layout.num_units(); ++u) {
            const size_t want = state.owned_end(u) > state.owned_begin(u) ? state.owned_end(u) - state.owned_begin(u) : 0;
            if (covered[static_cast<size_t>(u)] != want) {
                throw InputError(str(meta_file, ": the shards cover ", covered[static_cast<size_t>(u)], " of the ", want,
                                     " elements of unit ", u, " this rank needs (shard files missing from the list?)"));
            }
        }
    });
    state.sync_working_from_master();
    return p;
}

}  // namespace zt
