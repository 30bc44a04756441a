#include "ztrain/train/metrics.hpp"

#include <cerrno>
#include <cstring>

#include "ztrain/core/error.hpp"

namespace zt {

MetricsLog::MetricsLog(const std::string& path, bool append) : m_path(path) {
    if (path.empty()) return;
    m_file = std::fopen(path.c_str(), append ? "a" : "w");
    if (m_file == nullptr) {
        throw Error(str("cannot open ", path, " for writing: ", std::strerror(errno)));
    }
}

MetricsLog::~MetricsLog() {
    if (m_file != nullptr) std::fclose(m_file);
}

void MetricsLog::write(const nlohmann::ordered_json& record) {
    if (m_file == nullptr) return;
    const std::string line = record.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), m_file) != line.size() || std::fflush(m_file) != 0) {
        throw Error(str("cannot write ", m_path, ": ", std::strerror(errno)));
    }
}

}  // namespace zt
