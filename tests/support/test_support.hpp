// Helpers shared by the tests: scratch directories and small file utilities.
#pragma once

#include <string>

namespace zt::test {

/// A fresh, empty directory under the system temp dir, removed when the object dies.
class ScratchDir {
  public:
    explicit ScratchDir(const std::string& tag);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::string& path() const { return m_path; }
    std::string file(const std::string& name) const { return m_path + "/" + name; }

  private:
    std::string m_path;
};

/// Writes `content` to `path` (binary).
void write_file(const std::string& path, const std::string& content);
/// Reads a whole file (binary).
std::string read_file(const std::string& path);

}  // namespace zt::test
