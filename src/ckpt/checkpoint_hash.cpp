// The checkpoint hash (checkpoint.hpp): hash64 and the hash of a whole file. Shard files
// are hashed as they are written (shard_writer.cpp), meta.h5 by CHECKSUM, and the reader
// checks both.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

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

}  // namespace zt
