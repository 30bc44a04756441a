// One rank's shard file (format: checkpoint.hpp): HDF5 writes the file's structure, with
// every large dataset allocated 4 KiB-aligned but unwritten; then the data goes from host
// memory to its place in the file by pipelined direct I/O, hashed from the memory it is
// written from. Also where a save's floats come from (checkpoint_internal.hpp: the live
// state or a snapshot) and the file helpers the other save phases share.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <optional>
#include <utility>

#include "checkpoint_format.hpp"
#include "checkpoint_internal.hpp"
#include "hdf5_util.hpp"
#include "ztrain/ckpt/write_pacer.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::untimed_create_plist;
using h5::write_u64_attr;
using namespace ckpt_format;

namespace ckpt_impl {

void fsync_path(const std::string& path, bool directory) {
    const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) throw Error(str("cannot open ", path, " to sync it: ", std::strerror(errno)));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) throw Error(str("fsync ", path, " failed: ", std::strerror(err)));
}

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

}  // namespace ckpt_impl

using namespace ckpt_impl;

size_t save_staging_bytes(size_t largest_range_floats) {
    return (kWritesInFlight + 1) * std::min(kStageFloats, largest_range_floats) * sizeof(float);
}

namespace {

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

/// The first half of writing a shard: HDF5 creates `file` with a group per unit holding
/// this rank's primary range (attributes begin, end) and its three datasets, writes the
/// small datasets and closes the file. Returns the large datasets, allocated but unwritten
/// (write_regions writes them).
std::vector<DataRegion> write_shard_structure(const std::string& file, const ShardPlan& plan,
                                              const PipelineStage& stage, ShardSource& src, int rank) {
    std::vector<DataRegion> regions;
    // Large datasets start on 4 KiB boundaries, so their bytes can go to the disk by
    // direct I/O once HDF5 has written the structure and closed the file.
    H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    h5_require(fapl.ok() && H5Pset_alignment(fapl.get(), kDirectMinBytes, kDirectAlign) >= 0, false, file,
               "cannot set up the file");
    H5Handle f(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    h5_require(f.ok(), false, file, "cannot create (permissions? disk full?)");
    for (int u = 0; u < plan.num_units(); ++u) {
        const ElementRange r = saved_range(plan, stage, u, rank);
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
    return regions;
}

}  // namespace

namespace ckpt_impl {

ShardRecord write_shard(const SaveTarget& t, const ShardPlan& plan, ShardSource& src, int rank, bool writes,
                        const ShardFile& which, CheckpointWriteReport& report, WritePacer* pacer) {
    const int world = plan.world_size();
    if (!writes || !plan.is_primary(rank)) return ShardRecord{};
    const TensorSplit& split = which.split;
    const std::string file =
        (fs::path(t.partial) /
         shard_file_name(rank, world, split.rank, split.size, which.stage.rank, which.stage.size))
            .string();
    uint64_t payload = 0;
    for (int u = 0; u < plan.num_units(); ++u) {
        payload += 3 * sizeof(float) * saved_range(plan, which.stage, u, rank).size();
    }
    require_free_space(t.partial, payload, file);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<DataRegion> regions = write_shard_structure(file, plan, which.stage, src, rank);
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

}  // namespace ckpt_impl
}  // namespace zt
