// Token shards (llm.c layout), shard globbing, the windowed dataset and the batch sampler.
//
// Implements: writing shards atomically (PATH.tmp + rename), reading them with full
// validation of the header against the file size before any allocation, glob expansion,
// cutting shards into training windows and the (seed, epoch)-pure sample order.
// Deliberately does not: memory-map shards or stream them (the whole corpus is held in
// memory, which is fine for the corpora this trainer targets), or handle big-endian hosts
// (llm.c shards are little-endian and so are all supported machines; see the static_assert).
#include "ztrain/data/token_data.hpp"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <system_error>

#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/examples.hpp"
#include "shard_file.hpp"

namespace zt {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token shards are little-endian; reading them natively needs a little-endian host");

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                       bool force_u32) {
    // The header stores the count as int32 (llm.c), so larger shards cannot be described.
    ZT_REQUIRE(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), path,
               ": ", tokens.size(), " tokens do not fit one shard (int32 count)");
    bool u16 = !force_u32;
    if (u16) {
        u16 = std::all_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t < 65536u; });
    }

    std::vector<int32_t> header(kShardHeaderInts, 0);
    header[0] = kShardMagic;
    header[1] = u16 ? kShardVersionU16 : kShardVersionU32;
    header[2] = static_cast<int32_t>(tokens.size());

    detail::write_atomically(path, [&](std::ofstream& out) {
        out.write(reinterpret_cast<const char*>(header.data()),
                  static_cast<std::streamsize>(detail::kShardHeaderBytes));
        detail::write_tokens(out, tokens, u16);
    });
}

namespace detail {

void write_tokens(std::ofstream& out, const std::vector<uint32_t>& tokens, bool u16) {
    if (!u16) {
        out.write(reinterpret_cast<const char*>(tokens.data()),
                  static_cast<std::streamsize>(tokens.size() * sizeof(uint32_t)));
        return;
    }
    // Narrow in chunks so a large shard does not need a second full-size buffer.
    constexpr size_t kChunk = 1 << 16;
    std::vector<uint16_t> buf;
    buf.reserve(kChunk);
    for (size_t i = 0; i < tokens.size(); i += kChunk) {
        const size_t n = std::min(kChunk, tokens.size() - i);
        buf.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                   tokens.begin() + static_cast<std::ptrdiff_t>(i + n));
        out.write(reinterpret_cast<const char*>(buf.data()),
                  static_cast<std::streamsize>(n * sizeof(uint16_t)));
    }
}

void read_tokens(std::ifstream& in, size_t count, uint64_t token_bytes, std::vector<uint32_t>& tokens) {
    tokens.resize(count);
    if (token_bytes == 2) {
        std::vector<uint16_t> raw(count);
        in.read(reinterpret_cast<char*>(raw.data()),
                static_cast<std::streamsize>(raw.size() * sizeof(uint16_t)));
        std::copy(raw.begin(), raw.end(), tokens.begin());
    } else {
        in.read(reinterpret_cast<char*>(tokens.data()),
                static_cast<std::streamsize>(tokens.size() * sizeof(uint32_t)));
    }
}

void write_atomically(const std::string& path, const std::function<void(std::ofstream&)>& write) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) {
            throw Error(str(tmp, ": cannot open for writing (", std::strerror(errno), ")"));
        }
        write(out);
        out.flush();
        if (!out) {
            throw Error(str(tmp, ": write failed (", std::strerror(errno), ")"));
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        throw Error(str("cannot rename ", tmp, " to ", path, " (", std::strerror(err), ")"));
    }
}

ShardFile open_shard(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) {
        throw InputError(str(path, ": no such file (expected ", kShardKind, ")"));
    }
    if (fs::is_directory(st)) {
        throw InputError(str(path, ": is a directory (expected ", kShardKind, ")"));
    }
    // A FIFO or a process substitution would block the open until a writer came, for ever
    // (and shards are read at offsets); a device has no size.
    if (!fs::is_regular_file(st)) {
        throw InputError(str(path, ": is not a regular file (a FIFO, device or socket; expected ", kShardKind, ")"));
    }

    ShardFile f;
    f.in.open(path, std::ios::binary);
    if (!f.in) {
        throw InputError(str(path, ": cannot open (", std::strerror(errno), ")"));
    }
    std::ifstream& in = f.in;
    in.seekg(0, std::ios::end);
    const std::streamoff end = in.tellg();
    in.seekg(0, std::ios::beg);
    if (end < 0 || !in) {
        throw InputError(str(path, ": cannot determine the file size (expected ", kShardKind, ")"));
    }
    f.file_bytes = static_cast<uint64_t>(end);
    if (f.file_bytes == 0) {
        throw InputError(str(path, ": empty file (expected ", kShardKind, ")"));
    }
    if (f.file_bytes < kShardHeaderBytes) {
        throw InputError(str(path, ": ", f.file_bytes, " bytes, shorter than the ", kShardHeaderBytes,
                             "-byte header of ", kShardKind, " (truncated?)"));
    }

    f.header.resize(kShardHeaderInts);
    in.read(reinterpret_cast<char*>(f.header.data()), static_cast<std::streamsize>(kShardHeaderBytes));
    if (!in) {
        throw InputError(str(path, ": cannot read the header"));
    }
    if (f.header[0] != kShardMagic) {
        throw InputError(str(path, ": bad magic ", f.header[0], " (expected ", kShardMagic, ", ",
                             kShardKind, ")"));
    }
    return f;
}

}  // namespace detail

int32_t read_shard_version(const std::string& path) { return detail::open_shard(path).header[1]; }

std::vector<uint32_t> read_token_shard(const std::string& path, int vocab_size) {
    detail::ShardFile f = detail::open_shard(path);
    std::ifstream& in = f.in;
    const std::vector<int32_t>& header = f.header;
    const uint64_t file_bytes = f.file_bytes;
    constexpr uint64_t kHeaderBytes = detail::kShardHeaderBytes;
    const int32_t version = header[1];
    if (version == kShardVersionExamples) {
        throw InputError(str(path, ": an example shard (version ", version,
                             ", written by zt-prepare --format jsonl), not a token stream "
                             "(expected version ", kShardVersionU16, " or ", kShardVersionU32, ")"));
    }
    if (version != kShardVersionU16 && version != kShardVersionU32) {
        throw InputError(str(path, ": unsupported version ", version, " (expected ",
                             kShardVersionU16, " for uint16 tokens or ", kShardVersionU32,
                             " for uint32 tokens)"));
    }
    const int32_t count = header[2];
    if (count < 0) {
        throw InputError(str(path, ": negative token count ", count, " in the header"));
    }
    const uint64_t token_bytes = version == kShardVersionU16 ? 2 : 4;
    // Compare sizes before allocating: a hostile count cannot make us allocate more than
    // the file actually holds.
    const uint64_t expected = kHeaderBytes + static_cast<uint64_t>(count) * token_bytes;
    if (file_bytes < expected) {
        throw InputError(str(path, ": truncated: the header says ", count, " tokens (", expected,
                             " bytes with the header) but the file has ", file_bytes, " bytes"));
    }
    if (file_bytes > expected) {
        throw InputError(str(path, ": ", file_bytes - expected, " trailing bytes: the header says ",
                             count, " tokens (", expected,
                             " bytes with the header) but the file has ", file_bytes, " bytes"));
    }

    std::vector<uint32_t> tokens;
    detail::read_tokens(in, static_cast<size_t>(count), token_bytes, tokens);
    if (!in) {
        throw InputError(str(path, ": read failed after the header (file changed while reading?)"));
    }

    if (vocab_size > 0) {
        const uint32_t limit = static_cast<uint32_t>(vocab_size);
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] >= limit) {
                throw InputError(str(path, ": token ", tokens[i], " at position ", i,
                                     " is out of range (expected < vocab_size ", vocab_size,
                                     "; was the shard made with another tokenizer?)"));
            }
        }
    }
    return tokens;
}

std::vector<std::string> expand_shard_glob(const std::string& pattern, const std::string& key) {
    if (pattern.empty()) {
        throw InputError(str(key, ": empty file pattern"));
    }
    glob_t g{};
    // Default flags: results are sorted, and a pattern without wildcards matches only an
    // existing file, so "no match" also covers a misspelt plain file name.
    const int rc = glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> files;
    if (rc == 0) {
        files.reserve(g.gl_pathc);
        for (size_t i = 0; i < g.gl_pathc; ++i) {
            files.emplace_back(g.gl_pathv[i]);
        }
    }
    globfree(&g);
    if (rc == GLOB_NOMATCH) {
        throw InputError(str(key, ": no file matches '", pattern, "'"));
    }
    if (rc == GLOB_ABORTED) {
        throw InputError(str(key, ": cannot read a directory while expanding '", pattern, "'"));
    }
    if (rc != 0) {
        throw Error(str(key, ": glob('", pattern, "') failed with code ", rc));
    }
    return files;
}

TokenDataset::TokenDataset(const std::string& pattern, const std::string& key, int vocab_size,
                           int seq_len)
    : m_seq_len(seq_len) {
    ZT_REQUIRE(seq_len >= 1, key, ": seq_len must be positive, got ", seq_len);
    m_files = expand_shard_glob(pattern, key);
    const size_t window = static_cast<size_t>(seq_len) + 1;
    size_t largest = 0;
    for (const std::string& file : m_files) {
        std::vector<uint32_t> shard;
        try {
            shard = read_token_shard(file, vocab_size);
        } catch (const InputError& e) {
            // The shard's own message names the file, value and expectation; say which
            // config key led to the file too (one key may expand to many files).
            throw InputError(str(key, ": ", e.what()));
        }
        largest = std::max(largest, shard.size());
        const size_t base = m_tokens.size();
        // Stride seq_len: window k covers [k*T, k*T + T], so the inputs never overlap and
        // the last target of one window is the first input of the next (as in llm.c).
        // A window never crosses into the next shard.
        for (size_t s = 0; s + window <= shard.size(); s += static_cast<size_t>(seq_len)) {
            m_window_starts.push_back(base + s);
        }
        m_tokens.insert(m_tokens.end(), shard.begin(), shard.end());
    }
    if (m_window_starts.empty()) {
        throw InputError(str(key, ": '", pattern, "' holds ", m_tokens.size(), " tokens in ",
                             m_files.size(), " file(s), but one window of seq_len+1 = ", window,
                             " tokens needs a shard of at least ", window,
                             " tokens (the largest has ", largest,
                             "; windows never cross shards)"));
    }
}

void TokenDataset::window(size_t w, int32_t* inputs, int32_t* targets) const {
    ZT_REQUIRE(w < m_window_starts.size(), "window ", w, " of ", m_window_starts.size());
    const uint32_t* src = m_tokens.data() + m_window_starts[w];
    for (int t = 0; t < m_seq_len; ++t) {
        inputs[t] = static_cast<int32_t>(src[t]);
        targets[t] = static_cast<int32_t>(src[t + 1]);
    }
}

BatchSampler::BatchSampler(const TokenDataset& data, uint64_t seed, bool shuffle)
    : m_data(data), m_seed(seed), m_shuffle(shuffle) {
    ZT_REQUIRE(data.num_windows() > 0, "a sampler needs at least one window");
    ZT_REQUIRE(data.num_windows() <= std::numeric_limits<uint32_t>::max(),
               "too many windows for a 32-bit permutation: ", data.num_windows());
}

size_t BatchSampler::window_of(uint64_t g) const {
    const uint64_t n = m_data.num_windows();
    const uint64_t i = g % n;
    if (!m_shuffle) {
        return static_cast<size_t>(i);
    }
    return permutation(g / n)[static_cast<size_t>(i)];
}

void BatchSampler::fill(uint64_t first, int count, int32_t* inputs, int32_t* targets) const {
    const size_t T = static_cast<size_t>(m_data.seq_len());
    for (int j = 0; j < count; ++j) {
        const size_t w = window_of(first + static_cast<uint64_t>(j));
        m_data.window(w, inputs + static_cast<size_t>(j) * T, targets + static_cast<size_t>(j) * T);
    }
}

void epoch_permutation(uint64_t seed, uint64_t epoch, std::vector<uint32_t>& perm) {
    const size_t n = perm.size();
    std::iota(perm.begin(), perm.end(), 0u);
    if (n < 2) {
        return;
    }
    // The epoch is mixed into the seed (not the counter), so epochs draw from unrelated
    // sequences; the permutation is a pure function of (seed, epoch).
    const uint64_t epoch_seed = seed ^ mix64(epoch ^ 0x5eed0fe90c4ull);
    for (size_t i = n - 1; i > 0; --i) {
        const uint64_t r = random_bits(epoch_seed, static_cast<uint64_t>(RandomStream::kData), i);
        // Lemire's multiply-shift maps r to [0, i] with bias < 2^-32 for n < 2^32.
        const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
        std::swap(perm[i], perm[j]);
    }
}

const std::vector<uint32_t>& BatchSampler::permutation(uint64_t epoch) const {
    const size_t n = m_data.num_windows();
    // The size check also covers the sentinel epoch UINT64_MAX before the first fill.
    if (epoch == m_cached_epoch && m_perm.size() == n) {
        return m_perm;
    }
    m_perm.resize(n);
    epoch_permutation(m_seed, epoch, m_perm);
    m_cached_epoch = epoch;
    return m_perm;
}

}  // namespace zt
