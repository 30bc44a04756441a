// Helpers shared by the token and example shard readers and writers (not public API):
// opening a shard with the header checks common to every version, writing tokens narrowed
// to 16 bits, and the write-to-PATH.tmp-then-rename that keeps readers from seeing a
// half-written file.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace zt::detail {

constexpr uint64_t kShardHeaderBytes = 256 * sizeof(int32_t);
constexpr const char* kShardKind = "an llm.c token shard";

/// A shard whose size, header and magic have been checked; `in` is positioned after the
/// header.
struct ShardFile {
    std::ifstream in;
    uint64_t file_bytes = 0;
    std::vector<int32_t> header;
};

/// Opens `path` and checks that it exists, is a file, holds at least a header, and has
/// the magic number; InputError naming the file otherwise.
ShardFile open_shard(const std::string& path);

/// Writes tokens as uint16 (when `u16`; every token must be < 65536) or uint32.
void write_tokens(std::ofstream& out, const std::vector<uint32_t>& tokens, bool u16);

/// Reads `count` tokens of 2 or 4 bytes each into `tokens`.
void read_tokens(std::ifstream& in, size_t count, uint64_t token_bytes, std::vector<uint32_t>& tokens);

/// Calls `write` on PATH.tmp, flushes, renames to PATH; zt::Error naming the file on failure.
void write_atomically(const std::string& path, const std::function<void(std::ofstream&)>& write);

}  // namespace zt::detail
