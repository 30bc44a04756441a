// One job per directory: an exclusive lock on run.dir and on checkpoint.dir, taken by rank 0
// before the run reads or writes anything there and held for the run's life.
//
// The lock is a kernel lock (an open-file-description fcntl lock, F_OFD_SETLK) on
// DIR/ztrain.lock, so it dies with its process: a crashed job never blocks the next one. The
// file also records the holder (host, PID, Slurm job id, start time), because shared file
// systems differ in how far a kernel lock reaches (docs/reliability.md): where a
// lock may be node-local only, a record naming another host is honoured as held until
// --force-unlock breaks it (never automatically across hosts), except by a requeue of the
// same Slurm job. A clean exit removes the file (and the directories the lock created, when
// they are still empty), so a refused or finished run leaves the directory as it found it.
//
// Not here: what the run then does in the directory (resume_policy.hpp, step_reporter.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"

namespace zt {

/// Who holds (or held) a directory lock, as DIR/ztrain.lock records it.
struct LockHolder {
    std::string host;
    long pid = 0;
    std::string slurm_job_id;  ///< empty outside Slurm
    std::string started;       ///< UTC, ISO 8601
    /// "host node1, PID 1234, Slurm job 55, started 2026-01-01T00:00:00Z"
    std::string describe() const;
    /// This process: gethostname, getpid, SLURM_JOB_ID, now.
    static LockHolder self();
};

/// The lock of one directory. Throws InputError (exit 2) naming the key, the directory and
/// the holder when another job holds it, or when a record left on another host may still be
/// held and `force_unlock` is false.
class DirectoryLock {
  public:
    static constexpr const char* kFileName = "ztrain.lock";

    /// Creates `dir` when missing and takes its lock. `key` names the setting in messages
    /// ("run.dir"). A line worth telling the user (a stale record taken over, a file system
    /// without locks) goes to `*note`.
    DirectoryLock(const std::string& dir, const char* key, bool force_unlock, std::string* note);
    /// Removes the lock file (while still holding the lock), releases it, and removes the
    /// directories the constructor created if they are empty.
    ~DirectoryLock();
    DirectoryLock(const DirectoryLock&) = delete;
    DirectoryLock& operator=(const DirectoryLock&) = delete;

    const std::string& path() const { return m_path; }

  private:
    void acquire(const char* key, bool force_unlock, std::string* note);
    void check_record(const LockHolder& previous, bool kernel_locked, const char* key, bool force_unlock,
                      std::string* note) const;

    std::string m_dir;
    std::string m_path;
    int m_fd = -1;
    std::vector<std::string> m_created;  ///< directories made here, deepest first
};

/// The locks of one run: run.dir, and checkpoint.dir when it is another directory. Rank 0
/// takes them (trainer.cpp agrees the outcome across ranks); rank 0 prints the notes.
class RunLocks {
  public:
    RunLocks(const Config& cfg, const std::string& ckpt_dir, bool force_unlock);
    ~RunLocks();
    RunLocks(const RunLocks&) = delete;
    RunLocks& operator=(const RunLocks&) = delete;

  private:
    std::unique_ptr<DirectoryLock> m_run;
    std::unique_ptr<DirectoryLock> m_ckpt;
};

}  // namespace zt
