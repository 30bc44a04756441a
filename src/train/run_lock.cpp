#include "ztrain/train/run_lock.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ztrain/core/error.hpp"

namespace zt {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "?";
    return buf;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

/// The holder recorded in the open lock file (an empty holder when the file is empty or not
/// a record: a holder that is still starting, or a file from something else).
LockHolder read_record(int fd) {
    std::string text;
    char buf[4096];
    for (off_t at = 0;;) {
        const ssize_t n = pread(fd, buf, sizeof buf, at);
        if (n <= 0) break;
        text.append(buf, static_cast<size_t>(n));
        at += n;
        if (text.size() > 65536) break;
    }
    LockHolder h;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) return h;
    h.host = j.value("host", std::string());
    h.pid = j.value("pid", 0L);
    h.slurm_job_id = j.value("slurm_job_id", std::string());
    h.started = j.value("started", std::string());
    return h;
}

/// Records `h` in the lock file; false (errno set) when it cannot be written.
bool write_record(int fd, const LockHolder& h) {
    nlohmann::ordered_json j;
    j["host"] = h.host;
    j["pid"] = h.pid;
    j["slurm_job_id"] = h.slurm_job_id;
    j["started"] = h.started;
    const std::string text = j.dump() + "\n";
    return ftruncate(fd, 0) == 0 && pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()) &&
           fsync(fd) == 0;
}

/// Whether process `pid` exists on this host (EPERM: it exists, owned by someone else).
bool process_alive(long pid) {
    if (pid <= 0) return false;
    return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

/// Creates `dir` and its missing parents; returns those it made, deepest first.
std::vector<std::string> create_missing(const std::string& dir, const char* key) {
    std::vector<std::string> missing;
    std::error_code ec;
    for (fs::path p = fs::absolute(dir, ec); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
        missing.push_back(p.string());
        if (p == p.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    if (ec) throw InputError(str(key, ": cannot create '", dir, "': ", ec.message()));
    return missing;
}

}  // namespace

std::string LockHolder::describe() const {
    if (host.empty()) return "a job that is still starting (no holder recorded yet)";
    std::string s = str("host ", host, ", PID ", pid);
    if (!slurm_job_id.empty()) s += str(", Slurm job ", slurm_job_id);
    return str(s, ", started ", started);
}

LockHolder LockHolder::self() {
    LockHolder h;
    h.host = host_name();
    h.pid = static_cast<long>(getpid());
    const char* job = std::getenv("SLURM_JOB_ID");
    h.slurm_job_id = job != nullptr ? job : "";
    h.started = utc_now();
    return h;
}

DirectoryLock::DirectoryLock(const std::string& dir, const char* key, bool force_unlock, std::string* note)
    : m_dir(dir), m_path((fs::path(dir) / kFileName).string()) {
    m_created = create_missing(dir, key);
    try {
        acquire(key, force_unlock, note);
    } catch (...) {
        if (m_fd >= 0) close(m_fd);
        for (const std::string& d : m_created) rmdir(d.c_str());
        throw;
    }
}

void DirectoryLock::acquire(const char* key, bool force_unlock, std::string* note) {
    const std::string in_use = str(key, " = ", m_dir, " is in use by another ztrain job");
    const std::string why = ": two jobs in one directory would mix or overwrite each other's checkpoints and metrics";
    // A few rounds: a holder that exits unlinks the file under us, and we must lock the
    // file that is at the path, not the one we opened before it went.
    for (int round = 0; round < 8; ++round) {
        m_fd = open(m_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (m_fd < 0) throw InputError(str(key, ": cannot open the lock file ", m_path, ": ", std::strerror(errno)));
        struct flock fl{};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        bool kernel_locked = fcntl(m_fd, F_OFD_SETLK, &fl) == 0;
        const int lock_errno = errno;
        if (!kernel_locked && (lock_errno == EAGAIN || lock_errno == EACCES)) {
            const LockHolder holder = read_record(m_fd);
            // Breakable only when the record names another host: there a kernel lock may
            // outlive its holder (an NFS client that died holds it until its lease ends).
            if (!(force_unlock && !holder.host.empty() && holder.host != host_name())) {
                throw InputError(str(in_use, " (", holder.describe(), "; lock file ", m_path, ")", why,
                                     ". Wait for it to end, or give this job another ", key,
                                     holder.host != host_name() && !holder.host.empty()
                                         ? str("; if that job is gone, break the lock with --force-unlock")
                                         : std::string()));
            }
            if (note != nullptr) *note += str("lock of ", m_path, " held from ", holder.describe(), " broken by --force-unlock; ");
            unlink(m_path.c_str());
            close(m_fd);
            m_fd = -1;
            continue;
        }
        if (!kernel_locked && lock_errno != ENOLCK && lock_errno != ENOSYS && lock_errno != EOPNOTSUPP &&
            lock_errno != EINVAL) {
            throw InputError(str(key, ": cannot lock ", m_path, ": ", std::strerror(lock_errno)));
        }
        struct stat opened {};
        struct stat at_path {};
        if (kernel_locked && (fstat(m_fd, &opened) != 0 || stat(m_path.c_str(), &at_path) != 0 ||
                              opened.st_ino != at_path.st_ino || opened.st_dev != at_path.st_dev)) {
            close(m_fd);  // the file we locked was removed by its last holder: lock the new one
            m_fd = -1;
            continue;
        }
        if (!kernel_locked && note != nullptr) {
            *note += str("the file system of ", m_dir, " gives no file locks (", std::strerror(lock_errno),
                         "): only the holder record in ", m_path, " guards this directory; ");
        }
        check_record(read_record(m_fd), kernel_locked, key, force_unlock, note);
        if (!write_record(m_fd, LockHolder::self())) {
            // A full disk must not keep a run from resuming: the kernel lock still guards it.
            const std::string why_not = std::strerror(errno);
            if (!kernel_locked) throw InputError(str(key, ": cannot record this job in ", m_path, ": ", why_not));
            if (note != nullptr) *note += str("cannot record this job in ", m_path, " (", why_not, "): the kernel lock alone guards it; ");
        }
        return;
    }
    throw InputError(str(key, ": cannot lock ", m_path, ": it keeps being replaced by other processes"));
}

void DirectoryLock::check_record(const LockHolder& previous, bool kernel_locked, const char* key,
                                 bool force_unlock, std::string* note) const {
    if (previous.host.empty()) return;
    const LockHolder me = LockHolder::self();
    const std::string left = str(m_path, " names ", previous.describe());
    if (previous.host == me.host) {
        // Same host: the kernel lock is the truth; without one, the PID is.
        if (!kernel_locked && process_alive(previous.pid) && previous.pid != me.pid) {
            throw InputError(str(key, " = ", m_dir, " is in use by another ztrain job (", previous.describe(),
                                 "; lock file ", m_path, ", the file system gives no kernel locks, and that "
                                 "process is running). Wait for it to end, or give this job another ", key));
        }
        if (note != nullptr) *note += str(left, ", which is no longer running: taken over; ");
        return;
    }
    if (!me.slurm_job_id.empty() && previous.slurm_job_id == me.slurm_job_id) {
        if (note != nullptr) *note += str(left, ", an earlier start of this Slurm job: taken over; ");
        return;
    }
    if (force_unlock) {
        if (note != nullptr) *note += str(left, ": broken by --force-unlock; ");
        return;
    }
    throw InputError(str(key, " = ", m_dir, " may be in use by a job on another host (", previous.describe(),
                         "; lock file ", m_path, "): a lock on a shared file system may not reach across hosts, "
                         "so ztrain never breaks another host's record by itself. If that job is gone, run "
                         "again with --force-unlock; otherwise give this job another ", key));
}

DirectoryLock::~DirectoryLock() {
    if (m_fd >= 0) {
        unlink(m_path.c_str());  // while still locked: a waiter then sees a removed file and retries
        close(m_fd);
    }
    for (const std::string& d : m_created) rmdir(d.c_str());  // only the empty ones go
}

RunLocks::RunLocks(const Config& cfg, const std::string& ckpt_dir, bool force_unlock) {
    std::string note;
    m_run = std::make_unique<DirectoryLock>(cfg.run.dir, "run.dir", force_unlock, &note);
    std::error_code ec;
    const bool same = fs::weakly_canonical(ckpt_dir, ec) == fs::weakly_canonical(cfg.run.dir, ec);
    if (!same) {
        m_ckpt = std::make_unique<DirectoryLock>(ckpt_dir, "checkpoint.dir", force_unlock, &note);
    }
    if (!note.empty()) {
        note.resize(note.size() - 2);
        std::printf("ztrain: note: %s\n", note.c_str());
    }
}

RunLocks::~RunLocks() {
    m_ckpt.reset();  // the checkpoint directory may lie inside run.dir: it goes first
    m_run.reset();
}

}  // namespace zt
