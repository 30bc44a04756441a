#include "test_support.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace zt::test {

ScratchDir::ScratchDir(const std::string& tag) {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("zt-" + tag + "-XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    m_path = tmpl;
}

ScratchDir::~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
}

void write_file(const std::string& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << content;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string numpy_python() {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("ZT_PYTHON")) candidates.emplace_back(env);
    candidates.emplace_back("python3");
    candidates.emplace_back("/usr/bin/python3");
    for (const std::string& py : candidates) {
        if (std::system((py + " -c 'import numpy' > /dev/null 2>&1").c_str()) == 0) return py;
    }
    return "";
}

void write_npy(const std::string& path, const void* data, const char* descr, size_t elem,
               const std::vector<size_t>& shape) {
    std::string dims;
    size_t n = 1;
    for (size_t d : shape) {
        dims += std::to_string(d) + ",";
        n *= d;
    }
    if (shape.size() > 1) dims.pop_back();
    std::string header = str("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", dims, "), }");
    // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes, '\n' last.
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), 2);
    out << header;
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * elem));
    if (!out.good()) throw std::runtime_error("cannot write " + path);
}

}  // namespace zt::test
