// Sharded HDF5 checkpoints: save (in phases), load, resume resolution, hashes (format and
// guarantees: checkpoint.hpp). Reading meta.h5 and shards: checkpoint_reader.cpp; who owns
// and saves which elements: the model state's ShardPlan (parallel/shard_layout.hpp).
//
// Failure handling: every collective phase ends with an agreement (all ranks learn whether
// any rank failed, and the first failing rank's message), so a failure on one rank never
// leaves the others waiting, and every rank throws the same error.
#include "ztrain/ckpt/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <utility>

#include "checkpoint_format.hpp"
#include "hdf5_util.hpp"
#include "manifest_agreement.hpp"
#include "model_record.hpp"
#include "ztrain/ckpt/write_pacer.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/comm/device_memory.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::silence_hdf5;
using h5::untimed_create_plist;
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

/// Buffer `which` of `unit` in the state: base[e] is element e (may be device memory).
float* state_buffer(ModelState& state, int unit, int which) {
    return which == 0 ? state.master_base(unit) : which == 1 ? state.adam_m_base(unit) : state.adam_v_base(unit);
}

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
    explicit LiveStateSource(ModelState& state) : m_state(state) {
        for (auto& stage : m_stages) stage = std::make_unique<AlignedFloats>(kStageFloats);
    }
    size_t piece_floats() const override { return kStageFloats; }
    const float* read(int unit, int which, size_t begin, size_t count) override {
        float* stage = m_stages[m_next]->data;
        m_next = (m_next + 1) % m_stages.size();
        m_state.copy_to_host(stage, state_buffer(m_state, unit, which) + begin, count);
        return stage;
    }

  private:
    ModelState& m_state;
    std::array<std::unique_ptr<AlignedFloats>, kWritesInFlight + 1> m_stages;  // save_staging_bytes counts them
    size_t m_next = 0;
};

class SnapshotSource final : public ShardSource {
  public:
    explicit SnapshotSource(const CheckpointSnapshot& snapshot) : m_snapshot(snapshot) {}
    /// 16 MiB writes: large enough for the disk, small enough to interleave with hashing.
    size_t piece_floats() const override { return 4 * kStageFloats; }
    const float* read(int unit, int which, size_t begin, size_t) override {
        return m_snapshot.data(unit, which) + (begin - m_snapshot.plan().primary_range(unit, m_snapshot.rank()).begin);
    }

  private:
    const CheckpointSnapshot& m_snapshot;
};

/// A dataset whose elements are written after HDF5 has closed the file, straight from host
/// memory to its place in the file.
struct DataRegion {
    uint64_t offset = 0;  ///< byte offset in the file
    int unit = 0;
    int which = 0;
    size_t begin = 0;     ///< first element (unit coordinates)
    size_t count = 0;
};

/// Datasets of at least this many bytes are allocated 4 KiB-aligned and written by
/// write_regions; smaller ones go through H5Dwrite.
constexpr size_t kDirectMinBytes = 64u << 10;

/// A contiguous float dataset (no chunk copies, no filter) for elements [begin, begin + n)
/// of unit `unit`'s buffer `which`. A large one is only allocated here (no fill: its bytes
/// are written later, see write_regions) and returned as a region; a small one is written
/// from `src` now. Its bytes are covered by the shard's whole-file hash.
std::optional<DataRegion> create_float_dataset(hid_t group, int unit, int which, size_t begin, size_t n,
                                               ShardSource& src, const std::string& file) {
    const char* name = kStateDatasets[static_cast<size_t>(which)];
    const bool direct = n * sizeof(float) >= kDirectMinBytes;
    const hsize_t dims[1] = {static_cast<hsize_t>(n)};
    H5Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    H5Handle dcpl(untimed_create_plist(H5P_DATASET_CREATE), H5Pclose);
    h5_require(space.ok() && dcpl.ok(), false, file, str("cannot set up dataset ", name));
    if (direct) {
        h5_require(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY) >= 0 &&
                       H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) >= 0,
                   false, file, str("cannot set up dataset ", name));
    }
    H5Handle ds(H5Dcreate2(group, name, H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                H5Dclose);
    h5_require(ds.ok(), false, file, str("cannot create dataset ", name, " (disk full?)"));
    if (direct) {
        const haddr_t offset = H5Dget_offset(ds.get());
        h5_require(offset != HADDR_UNDEF, false, file, str("dataset ", name, " has no storage"));
        return DataRegion{offset, unit, which, begin, n};
    }
    if (n > 0) {
        h5_require(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, src.read(unit, which, begin, n)) >= 0,
                   false, file, str("cannot write dataset ", name, " (disk full?)"));
    }
    return std::nullopt;
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


/// What each rank tells rank 0 about the shard file it wrote.
struct ShardRecord {
    uint64_t bytes = 0;
    uint64_t fnv = 0;
    uint64_t written = 0;     // 1 if this rank wrote a file
    uint64_t shard_rank = 0;  // whose shard it is (the file's index)
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

/// hash64 over a byte stream fed in pieces of any length: the same value as hash64 of the
/// concatenation (whole 8-byte words first, bytes that do not fill a word carried over).
class Hash64Stream {
  public:
    void update(const void* data, size_t n) {
        const unsigned char* p = static_cast<const unsigned char*>(data);
        if (m_carry_len > 0) {
            const size_t take = std::min(n, 8 - m_carry_len);
            std::memcpy(m_carry + m_carry_len, p, take);
            m_carry_len += take;
            p += take;
            n -= take;
            if (m_carry_len < 8) return;
            m_state = hash64(m_carry, 8, m_state);
            m_carry_len = 0;
        }
        const size_t words = n / 8 * 8;
        m_state = hash64(p, words, m_state);
        std::memcpy(m_carry, p + words, n - words);
        m_carry_len = n - words;
    }
    uint64_t value() const { return hash64(m_carry, m_carry_len, m_state); }

  private:
    uint64_t m_state = kHashSeed;
    unsigned char m_carry[8] = {};
    size_t m_carry_len = 0;
};

/// pwrite of all `n` bytes at `offset` (retrying short writes); errno on failure, else 0.
int pwrite_all(int fd, const void* data, size_t n, uint64_t offset) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : ENOSPC;
        p += w;
        n -= static_cast<size_t>(w);
        offset += static_cast<uint64_t>(w);
    }
    return 0;
}

/// Writes the pieces of one file on helper threads, up to kWritesInFlight at a time, so the
/// disk works while the caller reads and hashes the next piece. Each piece goes by O_DIRECT
/// where the file system takes it (whole blocks from aligned memory), the rest by ordinary
/// writes. Pieces touch disjoint bytes, so their writes need no order among themselves.
class PieceWriter {
  public:
    PieceWriter(std::string file, int fd, int direct_fd) : m_file(std::move(file)), m_fd(fd), m_direct_fd(direct_fd) {}
    PieceWriter(const PieceWriter&) = delete;
    PieceWriter& operator=(const PieceWriter&) = delete;
    /// Waits for the writes in flight: their memory belongs to the caller.
    ~PieceWriter() {
        for (auto& w : m_flight) w.wait();
    }

    /// Starts writing `n` bytes from `host` at `offset`, after the oldest write in flight
    /// finished if kWritesInFlight already are. `host` must stay valid until then.
    void submit(const char* host, size_t n, uint64_t offset) {
        if (m_flight.size() >= kWritesInFlight) finish_oldest();
        m_flight.push_back(std::async(std::launch::async, [this, host, n, offset] { return write(host, n, offset); }));
    }
    /// Waits for every write in flight; throws on the first that failed.
    void finish() {
        while (!m_flight.empty()) finish_oldest();
    }
    bool used_direct() const { return m_used_direct.load(); }

  private:
    void finish_oldest() {
        const int err = m_flight.front().get();
        m_flight.pop_front();
        if (err != 0) throw Error(str(m_file, ": cannot write its data: ", std::strerror(err), " (disk full?)"));
    }
    /// errno of the failed write, else 0.
    int write(const char* host, size_t n, uint64_t offset) {
        size_t done = 0;
        if (m_direct_fd >= 0 && !m_direct_refused.load() && offset % kDirectAlign == 0 &&
            reinterpret_cast<uintptr_t>(host) % kDirectAlign == 0) {
            const size_t blocks = n / kDirectAlign * kDirectAlign;
            const int err = blocks > 0 ? pwrite_all(m_direct_fd, host, blocks, offset) : 0;
            if (err == 0) {
                done = blocks;
                if (blocks > 0) m_used_direct.store(true);
            } else if (err == EINVAL) {
                m_direct_refused.store(true);  // opened, but refuses direct writes: ordinary ones from here
            } else {
                return err;
            }
        }
        return done < n ? pwrite_all(m_fd, host + done, n - done, offset + done) : 0;
    }

    const std::string m_file;
    const int m_fd;
    const int m_direct_fd;
    std::atomic<bool> m_direct_refused{false};
    std::atomic<bool> m_used_direct{false};
    std::deque<std::future<int>> m_flight;
};

/// The second half of writing a shard, after HDF5 closed the file with every large
/// dataset allocated (4 KiB-aligned) but unwritten: writes each region's bytes from `src`
/// to its place, in file order, and returns the whole file's hash64. The datasets' bytes are
/// hashed from the memory they are written from, and only HDF5's structure between them is
/// read back, so no data is read back from disk.
///
/// The data goes through O_DIRECT where the file system takes it: straight from memory to
/// the disk, without a copy into the page cache. That copy was most of a save's CPU time,
/// which matters most when the write runs beside training. Block tails, and
/// file systems without O_DIRECT (tmpfs), use ordinary writes. A PieceWriter keeps the
/// disk busy while the next piece is read and hashed.
///
/// `pacer` (may be null) spreads the pass over its target duration: after each piece (its
/// write started, its hash done) it sleeps while the bytes done are ahead of an even pace.
uint64_t write_regions(const std::string& file, std::vector<DataRegion> regions, ShardSource& src,
                       bool* used_direct, WritePacer* pacer) {
    std::sort(regions.begin(), regions.end(), [](const DataRegion& a, const DataRegion& b) { return a.offset < b.offset; });
    int fd = ::open(file.c_str(), O_RDWR);
    if (fd < 0) throw Error(str(file, ": cannot open to write its data: ", std::strerror(errno)));
    int direct_fd = ::open(file.c_str(), O_WRONLY | O_DIRECT);
    struct Close {
        int& a;
        int& b;
        ~Close() {
            if (a >= 0) ::close(a);
            if (b >= 0) ::close(b);
        }
    } close_both{fd, direct_fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Error(str(file, ": cannot stat: ", std::strerror(errno)));
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    *used_direct = false;
    PieceWriter writer(file, fd, direct_fd);
    Hash64Stream h;
    std::vector<char> gap;
    uint64_t pos = 0;
    uint64_t data_total = 0;
    uint64_t data_done = 0;
    for (const DataRegion& r : regions) data_total += r.count * sizeof(float);
    auto hash_file_bytes = [&](uint64_t to) {  // HDF5 structure in [pos, to), read from the file
        while (pos < to) {
            gap.resize(static_cast<size_t>(std::min<uint64_t>(to - pos, 1u << 20)));
            const ssize_t got = ::pread(fd, gap.data(), gap.size(), static_cast<off_t>(pos));
            if (got <= 0) {
                throw Error(str(file, ": cannot read it back to hash it: ", got < 0 ? std::strerror(errno) : "short file"));
            }
            h.update(gap.data(), static_cast<size_t>(got));
            pos += static_cast<uint64_t>(got);
        }
    };
    for (const DataRegion& r : regions) {
        const uint64_t bytes = r.count * sizeof(float);
        if (r.offset < pos || r.offset + bytes > size) {
            throw Error(str(file, ": dataset storage at ", r.offset, " (+", bytes, ") overlaps another or lies past "
                            "the end of the file (", size, " bytes)"));
        }
        hash_file_bytes(r.offset);
        const size_t piece = src.piece_floats();
        for (size_t at = 0; at < r.count; at += piece) {
            const size_t count = std::min(piece, r.count - at);
            const char* host = reinterpret_cast<const char*>(src.read(r.unit, r.which, r.begin + at, count));
            const size_t n = count * sizeof(float);
            writer.submit(host, n, r.offset + at * sizeof(float));
            h.update(host, n);
            data_done += n;
            if (pacer) pacer->pace(data_done, data_total);
        }
        pos = r.offset + bytes;
    }
    hash_file_bytes(size);
    writer.finish();
    *used_direct = writer.used_direct();
    return h.value();
}

/// This rank's shard file: master, adam_m and adam_v of every range it is the primary owner
/// of, read from `src`. Times its phases into `report`.
ShardRecord write_shard(const SaveTarget& t, const ShardPlan& plan, ShardSource& src, int rank, bool writes,
                        CheckpointWriteReport& report, WritePacer* pacer) {
    const int world = plan.world_size();
    if (!writes || !plan.is_primary(rank)) return ShardRecord{};
    const std::string file = (fs::path(t.partial) / shard_file_name(rank, world)).string();
    uint64_t payload = 0;
    for (int u = 0; u < plan.num_units(); ++u) payload += 3 * sizeof(float) * plan.primary_range(u, rank).size();
    require_free_space(t.partial, payload, file);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<DataRegion> regions;
    {
        // Large datasets start on 4 KiB boundaries, so their bytes can go to the disk by
        // direct I/O once HDF5 has written the structure and closed the file.
        H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        h5_require(fapl.ok() && H5Pset_alignment(fapl.get(), kDirectMinBytes, kDirectAlign) >= 0, false, file,
                   "cannot set up the file");
        H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
        h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
        for (int u = 0; u < plan.num_units(); ++u) {
            const ElementRange r = plan.primary_range(u, rank);
            if (r.empty()) continue;
            H5Handle gcpl(untimed_create_plist(H5P_GROUP_CREATE), H5Pclose);
            H5Handle g(H5Gcreate2(f.get(), unit_group_name(u).c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                       H5Gclose);
            h5_require(g.ok(), false, file, str("cannot create group ", unit_group_name(u)));
            write_u64_attr(g.get(), "begin", r.begin, file);
            write_u64_attr(g.get(), "end", r.end, file);
            for (int which = 0; which < 3; ++which) {
                if (auto region = create_float_dataset(g.get(), u, which, r.begin, r.size(), src, file)) {
                    regions.push_back(*region);
                }
            }
        }
        h5_require(H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0, false, file, "cannot flush (disk full?)");
    }
    ShardRecord mine;
    mine.written = 1;
    mine.shard_rank = static_cast<uint64_t>(rank);
    mine.fnv = write_regions(file, std::move(regions), src, &report.direct_io, pacer);
    report.shard_write_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    fsync_path(file, false);
    report.shard_sync_s = seconds_since(t0);
    mine.bytes = static_cast<uint64_t>(fs::file_size(file));
    return mine;
}

/// The manifest's shard list: every written file with its size, hash and ranges.
nlohmann::json shard_manifest(const ShardPlan& plan, const std::vector<ShardRecord>& records) {
    // Records come in world-rank order, files in shard-rank order (the same order unless
    // the groups are the nodes and ranks are placed round-robin).
    std::vector<ShardRecord> written;
    for (const ShardRecord& rec : records) {
        if (rec.written) written.push_back(rec);
    }
    std::sort(written.begin(), written.end(),
              [](const ShardRecord& a, const ShardRecord& b) { return a.shard_rank < b.shard_rank; });
    nlohmann::json shard_list = nlohmann::json::array();
    for (const ShardRecord& rec : written) {
        const int r = static_cast<int>(rec.shard_rank);
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

/// The manifest fields that describe the model: fixed for a run.
nlohmann::json layout_meta(const ModelLayout& layout) {
    nlohmann::json meta;
    meta["model"] = model_record(layout.model);
    meta["units"] = layout.unit_numel;
    meta["tensors"] = layout_json(layout);
    return meta;
}

/// meta_json (fields: checkpoint.hpp) without its shard list.
/// `state`'s run: world size, shard group and stage are information for people and the
/// resume notes (the shard list says who saved what).
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
    meta["world_size"] = group * state.replicas();
    meta["shard_group"] = group;
    meta["zero_stage"] = state.zero_stage();
    meta["dtype"] = record.dtype;
    meta["seed"] = record.seed;
    meta["scaler"] = {{"scale", progress.loss_scale},
                      {"mode", progress.loss_scale_mode},
                      {"clean_steps", progress.scaler_clean_steps},
                      {"hysteresis_left", progress.scaler_hysteresis_left}};
    meta["bad_steps"] = progress.bad_steps;
    meta["config_ini"] = record.config_ini;
    for (const auto& [key, value] : layout_fields.items()) meta[key] = value;
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

size_t save_staging_bytes(size_t largest_range_floats) {
    return (kWritesInFlight + 1) * std::min(kStageFloats, largest_range_floats) * sizeof(float);
}

namespace {

/// The save's phases on every rank: prepare step_N.partial (rank 0), write the shards, then
/// on rank 0 meta.h5, the renames, `latest` and pruning. Each phase ends in an agreement.
/// `pacer` (may be null) paces the shard's data pass.
CheckpointWriteReport publish_checkpoint(const std::string& ckpt_dir, long step, const ShardPlan& plan,
                                         int shard_rank, bool writes, ShardSource& src, nlohmann::json meta,
                                         Communicator& comm, int keep, WritePacer* pacer) {
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
    agree_on_manifest(comm, [&] { mine = write_shard(target, plan, src, shard_rank, writes, report, pacer); });
    if (pacer) pacer->end();
    t0 = std::chrono::steady_clock::now();
    std::vector<ShardRecord> records(static_cast<size_t>(comm.size()));
    comm.all_gather_bytes(&mine, records.data(), sizeof(ShardRecord));
    for (const ShardRecord& r : records) report.bytes += r.bytes;
    uint64_t meta_bytes = 0;
    agree_on_manifest(comm, [&] {
        if (rank != 0) return;
        meta["shards"] = shard_manifest(plan, records);
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
    return publish_checkpoint(ckpt_dir, record.progress.step, plan, state.shard_rank(), state.replica() == 0, src,
                              make_meta_base(layout_meta(state.layout()), state, record), comm, keep,
                              nullptr);  // a synchronous save is never paced
}

CheckpointWriteReport write_checkpoint(const std::string& ckpt_dir, const CheckpointSnapshot& snapshot,
                                       Communicator& comm, int keep, WritePacer* pacer) {
    ZT_REQUIRE(snapshot.step() >= 0, "write_checkpoint: the snapshot was never captured");
    SnapshotSource src(snapshot);
    return publish_checkpoint(ckpt_dir, snapshot.step(), snapshot.plan(), snapshot.rank(), snapshot.writes(), src,
                              snapshot.meta_base(), comm, keep, pacer);
}

std::string save_checkpoint(const std::string& ckpt_dir, ModelState& state, Communicator& comm,
                            const CheckpointRecord& record, int keep) {
    return write_checkpoint(ckpt_dir, state, comm, record, keep).dir;
}

// ---------------------------------------------------------------------------------------
// Snapshot
// ---------------------------------------------------------------------------------------
namespace {
/// A snapshot block's floats rounded up to whole 4 KiB pages: every block starts
/// page-aligned, so its bytes can go to the disk by direct I/O.
size_t page_floats(size_t n) {
    constexpr size_t per_page = kDirectAlign / sizeof(float);
    return (n + per_page - 1) / per_page * per_page;
}
}  // namespace

size_t CheckpointSnapshot::planned_bytes(const ShardPlan& plan, int rank) {
    size_t floats = 0;
    for (int u = 0; u < plan.num_units(); ++u) floats += 3 * page_floats(plan.primary_range(u, rank).size());
    return floats * sizeof(float);
}

CheckpointSnapshot::CheckpointSnapshot(const ModelState& state, DeviceMemory* pinned)
    : m_plan(std::make_unique<ShardPlan>(state.shard_plan())),
      m_rank(state.shard_rank()),
      m_writes(state.replica() == 0),
      m_pinned(pinned) {
    m_unit_offset.resize(static_cast<size_t>(m_plan->num_units()));
    for (int u = 0; u < m_plan->num_units(); ++u) {
        m_unit_offset[static_cast<size_t>(u)] = m_floats;
        if (m_writes) m_floats += 3 * page_floats(m_plan->primary_range(u, m_rank).size());
    }
    const size_t bytes = std::max<size_t>(m_floats, 1) * sizeof(float);
    if (m_pinned) {
        m_host = static_cast<float*>(m_pinned->alloc_host(bytes));  // page-aligned
    } else {
        void* p = nullptr;
        if (::posix_memalign(&p, kDirectAlign, bytes) != 0) {
            throw Error(str("cannot allocate the ", bytes, "-byte checkpoint snapshot"));
        }
        m_host = static_cast<float*>(p);
    }
    std::memset(m_host, 0, bytes);  // touch every page now, not during a capture
    m_layout_json = layout_meta(state.layout());
}

CheckpointSnapshot::~CheckpointSnapshot() {
    if (m_pinned) {
        m_pinned->free_host(m_host);
    } else {
        std::free(m_host);
    }
}

const float* CheckpointSnapshot::data(int unit, int which) const {
    const size_t n = page_floats(m_plan->primary_range(unit, m_rank).size());
    return m_host + m_unit_offset[static_cast<size_t>(unit)] + static_cast<size_t>(which) * n;
}

void CheckpointSnapshot::capture(ModelState& state, const CheckpointRecord& record) {
    for (int u = 0; m_writes && u < m_plan->num_units(); ++u) {
        const ElementRange r = m_plan->primary_range(u, m_rank);
        if (r.empty()) continue;
        for (int which = 0; which < 3; ++which) {
            state.snapshot_to_host(const_cast<float*>(data(u, which)), state_buffer(state, u, which) + r.begin,
                                   r.size());
        }
    }
    m_step = record.progress.step;
    m_meta_base = make_meta_base(m_layout_json, state, record);
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
    record.shard_group = meta.value("shard_group", record.world_size);
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
        for (int which = 0; which < 3; ++which) {
            for (size_t at = r.begin; at < r.end; at += kStageFloats) {
                const size_t end = std::min(r.end, at + kStageFloats);
                reader.read(u, at, end, kStateDatasets[static_cast<size_t>(which)], stage.data());
                state.copy_from_host(state_buffer(state, u, which) + at, stage.data(), end - at);
            }
        }
    }
}

}  // namespace

CheckpointRecord load_checkpoint(const std::string& step_dir, ModelState& state, Communicator& comm) {
    silence_hdf5();
    CheckpointRecord record;
    agree_on_manifest(comm, [&] {
        CheckpointReader reader(step_dir);
        require_same_model(reader, state.layout());
        record = record_of(reader.meta());
        read_owned_state(reader, state, state.shard_rank());
    });
    state.sync_working_from_master();
    return record;
}

}  // namespace zt
