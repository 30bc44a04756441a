// metrics.jsonl: one JSON object per line, written by rank 0 only (fields: docs/metrics.md).
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

/// What supersede_metrics changed in a resumed run's metrics.jsonl.
struct MetricsRepair {
    size_t superseded = 0;  ///< records past the checkpoint's step, dropped
    bool cut_line = false;  ///< a last line cut by a crash (no newline, or not JSON), dropped
    bool changed() const { return superseded > 0 || cut_line; }
};

/// Makes the metrics of a run resumed from a checkpoint at `step` hold each step once: a
/// cut last line is dropped, and so is every record whose "step" is past `step` (the
/// interrupted run's, which the resumed run writes again). Records without a step (the
/// memory records), rollback records (history, whatever step they name) and the rest stay
/// as they were. The file is rewritten beside itself and
/// renamed over it (fsynced), so a crash here leaves the old or the new file, whole; a file
/// that needs no change is not touched. A missing file is fine. Throws Error on I/O failure.
MetricsRepair supersede_metrics(const std::string& path, long step);

class MetricsLog {
  public:
    /// Opens PATH for writing (truncated, or appended to when `append`: a resumed run). An
    /// empty path makes a log that drops records (every rank but 0).
    explicit MetricsLog(const std::string& path, bool append = false);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;

    /// Appends one record and flushes, so a crash loses at most the current line.
    void write(const nlohmann::ordered_json& record);
    /// A loss-spike rollback to `step`: the records past it superseded (supersede_metrics)
    /// and the file reopened for appending.
    void supersede_after(long step);

  private:
    std::FILE* m_file = nullptr;
    std::string m_path;
};

}  // namespace zt
