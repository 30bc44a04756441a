#include "ztrain/train/metrics.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ztrain/core/error.hpp"

namespace zt {

namespace {

/// fsync of a file or directory by path; Error naming it on failure.
void sync_path(const std::string& path, bool directory) {
    const int fd = open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        const int e = errno;
        if (fd >= 0) close(fd);
        throw Error(str("cannot sync ", path, ": ", std::strerror(e)));
    }
    close(fd);
}

}  // namespace

MetricsRepair supersede_metrics(const std::string& path, long step) {
    MetricsRepair repair;
    std::ifstream in(path, std::ios::binary);
    if (!in) return repair;
    std::vector<std::string> kept;
    std::string line;
    while (std::getline(in, line)) {
        // getline sets eof when the last line had no newline: a write the crash cut short.
        if (in.eof()) {
            repair.cut_line = !line.empty();
            break;
        }
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (in.peek() == std::char_traits<char>::eof() && j.is_discarded()) {
            repair.cut_line = true;  // the last line, complete but not JSON: cut as well
            break;
        }
        const bool rollback = j.is_object() && j.value("event", std::string()) == "rollback";
        if (j.is_object() && !rollback && j.contains("step") && j["step"].is_number() &&
            j["step"].get<double>() > step) {
            ++repair.superseded;
            continue;
        }
        kept.push_back(std::move(line));
    }
    if (in.bad()) throw Error(str("cannot read ", path, ": ", std::strerror(errno)));
    in.close();
    if (!repair.changed()) return repair;
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        for (const std::string& l : kept) out << l << '\n';
        out.flush();
        if (!out) throw Error(str("cannot write ", tmp, ": ", std::strerror(errno)));
    }
    sync_path(tmp, false);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        throw Error(str("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
    }
    const std::string parent = std::filesystem::path(path).parent_path().string();
    sync_path(parent.empty() ? "." : parent, true);
    return repair;
}

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

void MetricsLog::supersede_after(long step) {
    if (m_file == nullptr) return;
    std::fclose(m_file);
    m_file = nullptr;
    supersede_metrics(m_path, step);
    m_file = std::fopen(m_path.c_str(), "a");
    if (m_file == nullptr) throw Error(str("cannot open ", m_path, " for writing: ", std::strerror(errno)));
}

void MetricsLog::write(const nlohmann::ordered_json& record) {
    if (m_file == nullptr) return;
    const std::string line = record.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), m_file) != line.size() || std::fflush(m_file) != 0) {
        throw Error(str("cannot write ", m_path, ": ", std::strerror(errno)));
    }
}

}  // namespace zt
