// Corpus preparation (prepare.hpp), shards: the parts' segments read as one stream per
// split, cut at fixed token offsets (token shards) or packed by whole examples (example
// shards); each rank writes every ranks'th shard, and a shard already written (by an
// interrupted run) is kept.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "prepare_detail.hpp"
#include "shard_file.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"

namespace fs = std::filesystem;

namespace zt::detail {

namespace {

/// `count` elements of a segment file from element `first`.
struct Piece {
    std::string path;
    uint64_t first = 0;
    uint64_t count = 0;
};

/// One split's stream: its token, target and length pieces, in part order.
struct SplitStream {
    std::vector<Piece> tokens, target, lengths;
    uint64_t records = 0, num_tokens = 0, targets = 0;
};

/// Calls `sink` on elements [begin, begin + count) of the stream of `pieces` (each element
/// `width` bytes), in chunks.
void read_elements(const std::vector<Piece>& pieces, uint64_t begin, uint64_t count, size_t width,
                   const std::function<void(const char*, size_t)>& sink) {
    constexpr uint64_t kChunk = 1 << 20;
    std::vector<char> buf;
    uint64_t at = 0;  // stream offset of the piece
    for (const Piece& p : pieces) {
        if (count == 0) break;
        if (begin >= at + p.count) {
            at += p.count;
            continue;
        }
        std::ifstream in(p.path, std::ios::binary);
        const uint64_t skip = begin - at;
        in.seekg(static_cast<std::streamoff>((p.first + skip) * width));
        uint64_t left = std::min(count, p.count - skip);
        begin += left;
        count -= left;
        at += p.count;
        while (left > 0) {
            const uint64_t n = std::min(left, kChunk);
            buf.resize(n * width);
            in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
            ZT_REQUIRE(static_cast<uint64_t>(in.gcount()) == buf.size(), "the work folder's '", p.path,
                       "' is shorter than its part's record says (changed by another process?)");
            sink(buf.data(), buf.size());
            left -= n;
        }
    }
    ZT_REQUIRE(count == 0, "the work folder's segments hold fewer elements than their records say");
}

template <typename T>
std::vector<T> read_vector(const std::vector<Piece>& pieces, uint64_t begin, uint64_t count) {
    std::vector<T> out;
    out.reserve(count);
    read_elements(pieces, begin, count, sizeof(T), [&](const char* p, size_t n) {
        const size_t k = out.size();
        out.resize(k + n / sizeof(T));
        std::copy(p, p + n, reinterpret_cast<char*>(out.data() + k));
    });
    return out;
}

/// The two splits' streams. When the hash chose no val record while val_fraction > 0 and
/// there are two or more records, the last record moves from train to val.
void build_streams(const std::vector<PartSummary>& parts, const std::string& work, const PrepareOptions& opt,
                   bool examples, SplitStream (&split)[2]) {
    for (int s = 0; s < 2; ++s) {
        for (size_t p = 0; p < parts.size(); ++p) {
            if (parts[p].records[s] == 0) continue;
            split[s].tokens.push_back({segment_path(work, p, s, "tokens"), 0, parts[p].tokens[s]});
            split[s].lengths.push_back({segment_path(work, p, s, "lengths"), 0, parts[p].records[s]});
            if (examples) split[s].target.push_back({segment_path(work, p, s, "target"), 0, parts[p].tokens[s]});
            split[s].records += parts[p].records[s];
            split[s].num_tokens += parts[p].tokens[s];
            split[s].targets += parts[p].targets[s];
        }
    }
    SplitStream& train = split[0];
    SplitStream& val = split[1];
    if (!(val.records == 0 && opt.val_fraction > 0 && train.records >= 2)) return;
    const uint64_t length = read_vector<uint64_t>(train.lengths, train.records - 1, 1).front();
    const uint64_t start = train.num_tokens - length;
    uint64_t targets = 0;
    if (examples) {
        for (uint8_t t : read_vector<uint8_t>(train.target, start, length)) targets += t;
    }
    Piece& last_tokens = train.tokens.back();
    val.tokens = {{last_tokens.path, last_tokens.count - length, length}};
    last_tokens.count -= length;
    Piece& last_lengths = train.lengths.back();
    val.lengths = {{last_lengths.path, last_lengths.count - 1, 1}};
    last_lengths.count -= 1;
    if (examples) {
        Piece& last_target = train.target.back();
        val.target = {{last_target.path, last_target.count - length, length}};
        last_target.count -= length;
    }
    val.records = 1;
    val.num_tokens = length;
    val.targets = targets;
    train.records -= 1;
    train.num_tokens -= length;
    train.targets -= targets;
}

/// Token shard `index` of the stream: shard_tokens tokens (the last shorter).
void write_token_shard_from(const SplitStream& stream, const std::string& path, uint64_t begin, uint64_t count,
                            bool force_u32) {
    std::vector<int32_t> header(kShardHeaderInts, 0);
    header[0] = kShardMagic;
    header[1] = force_u32 ? kShardVersionU32 : kShardVersionU16;
    header[2] = static_cast<int32_t>(count);
    write_atomically(path, [&](std::ofstream& out) {
        out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(kShardHeaderBytes));
        read_elements(stream.tokens, begin, count, force_u32 ? 4 : 2,
                      [&](const char* p, size_t n) { out.write(p, static_cast<std::streamsize>(n)); });
    });
}

/// Example shards: whole examples, at most shard_tokens tokens (a longer example alone);
/// returns each shard's first example (and one past the last).
std::vector<uint64_t> pack_examples(const std::vector<uint64_t>& lengths, uint64_t shard_tokens) {
    std::vector<uint64_t> firsts{0};
    uint64_t tokens = 0;
    for (uint64_t e = 0; e < lengths.size(); ++e) {
        if (e > firsts.back() && tokens + lengths[e] > shard_tokens) {
            firsts.push_back(e);
            tokens = 0;
        }
        tokens += lengths[e];
    }
    if (!lengths.empty()) firsts.push_back(lengths.size());
    return firsts;
}

void write_example_shard_from(const SplitStream& stream, const std::string& path,
                              const std::vector<uint64_t>& lengths, uint64_t first, uint64_t last,
                              uint64_t token_begin, bool force_u32) {
    ExampleSet set;
    uint64_t count = 0;
    for (uint64_t e = first; e < last; ++e) {
        count += lengths[e];
        set.starts.push_back(count);
    }
    if (force_u32) {
        set.tokens = read_vector<uint32_t>(stream.tokens, token_begin, count);
    } else {
        const std::vector<uint16_t> narrow = read_vector<uint16_t>(stream.tokens, token_begin, count);
        set.tokens.assign(narrow.begin(), narrow.end());
    }
    set.target = read_vector<uint8_t>(stream.target, token_begin, count);
    write_example_shard(path, set, force_u32);
}

}  // namespace

std::vector<SplitShards> write_shards(const std::vector<PartSummary>& parts, const std::string& work,
                                      const std::string& dir, const PrepareOptions& opt, bool examples,
                                      bool force_u32, int rank, int ranks) {
    SplitStream split[2];
    build_streams(parts, work, opt, examples, split);
    const auto shard_tokens = static_cast<uint64_t>(opt.shard_tokens);
    std::vector<SplitShards> shards(2);
    size_t global = 0;  // shard number over both splits: who writes it
    const char* prefix[2] = {"train", "val"};
    for (int s = 0; s < 2; ++s) {
        const SplitStream& stream = split[s];
        shards[s].records = stream.records;
        shards[s].tokens = stream.num_tokens;
        shards[s].targets = stream.targets;
        std::vector<uint64_t> lengths;
        std::vector<uint64_t> firsts;
        if (examples) {
            lengths = read_vector<uint64_t>(stream.lengths, 0, stream.records);
            firsts = pack_examples(lengths, shard_tokens);
        }
        const uint64_t n = examples ? firsts.size() - std::min<size_t>(firsts.size(), 1)
                                    : (stream.num_tokens + shard_tokens - 1) / shard_tokens;
        uint64_t token_begin = 0;
        for (uint64_t i = 0; i < n; ++i, ++global) {
            const std::string path = shard_path(dir, prefix[s], i);
            shards[s].files.push_back(path);
            uint64_t count = std::min(shard_tokens, stream.num_tokens - token_begin);
            if (examples) {
                count = 0;
                for (uint64_t e = firsts[i]; e < firsts[i + 1]; ++e) count += lengths[e];
            }
            if (global % static_cast<size_t>(ranks) == static_cast<size_t>(rank) && !fs::exists(path)) {
                if (examples) {
                    write_example_shard_from(stream, path, lengths, firsts[i], firsts[i + 1], token_begin, force_u32);
                } else {
                    write_token_shard_from(stream, path, token_begin, count, force_u32);
                }
            }
            token_begin += count;
        }
    }
    return shards;
}

}  // namespace zt::detail
