// metrics.jsonl: one JSON object per line, written by rank 0 only (see the README contract).
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

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

  private:
    std::FILE* m_file = nullptr;
    std::string m_path;
};

}  // namespace zt
