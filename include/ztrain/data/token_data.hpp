// Token shards (llm.c layout) and the batch sampler.
//
// File layout: 256 int32 header words, then the tokens.
//   header[0] = 20240520 (magic), header[1] = version, header[2] = token count.
//   version 1: tokens are uint16 (llm.c's format, vocabularies up to 65536);
//   version 2: tokens are uint32 (ztrain's variant for larger vocabularies).
// Every other header word is written as 0 and ignored on read.
//
// The dataset cuts the corpus into windows of seq_len+1 tokens at stride seq_len: the
// inputs of consecutive windows never overlap, and the last target of one window is the
// first input of the next (as in llm.c). A window never crosses a shard boundary, so a
// shard of n >= 1 tokens holds (n - 1) / seq_len windows. The sampler visits them in an
// order that is a pure function of (seed, epoch): sample g of the run
// (g = step * global_batch + j) is window perm_{seed, g / n_windows}[g % n_windows].
// Nothing depends on the world size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardVersionU32 = 2;
constexpr size_t kShardHeaderInts = 256;

/// Writes a shard; uses version 1 (uint16) when every token < 65536 and force_u32 is false.
/// Writes to PATH.tmp then renames, so a reader never sees a half-written file.
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                       bool force_u32 = false);

/// Reads and validates one shard: magic, version, token count vs file size, and every
/// token < vocab_size (when vocab_size > 0). Throws InputError naming the file.
std::vector<uint32_t> read_token_shard(const std::string& path, int vocab_size);

/// Expands a file name or glob pattern (sorted). Throws InputError naming `key` when
/// nothing matches.
std::vector<std::string> expand_shard_glob(const std::string& pattern, const std::string& key);

/// A corpus of one or many shards, cut into windows of (seq_len + 1) tokens.
class TokenDataset {
  public:
    /// `key` names the config key in error messages (e.g. "data.train"), also in front of
    /// read_token_shard's messages about a file the pattern matched.
    TokenDataset(const std::string& pattern, const std::string& key, int vocab_size, int seq_len);

    size_t num_windows() const { return m_window_starts.size(); }
    size_t num_tokens() const { return m_tokens.size(); }
    int seq_len() const { return m_seq_len; }
    const std::vector<std::string>& files() const { return m_files; }

    /// Copies window w into inputs[0..T) and targets[0..T) (targets shifted by one).
    void window(size_t w, int32_t* inputs, int32_t* targets) const;

  private:
    std::vector<std::string> m_files;
    std::vector<uint32_t> m_tokens;        // all shards concatenated
    std::vector<size_t> m_window_starts;   // offsets into m_tokens
    int m_seq_len;
};

/// Fills perm (of its size n) with the shuffle of 0..n-1 for (seed, epoch): the order
/// BatchSampler visits windows in, and ExampleRows examples.
void epoch_permutation(uint64_t seed, uint64_t epoch, std::vector<uint32_t>& perm);

/// Deterministic order over a dataset's windows: a pure function of (seed, sample index).
/// Not thread-safe: it caches the current epoch's permutation (use one sampler per thread).
class BatchSampler {
  public:
    BatchSampler(const TokenDataset& data, uint64_t seed, bool shuffle);

    /// Window index of global sample g (g counts samples since the start of the run).
    size_t window_of(uint64_t g) const;

    /// Fills `count` consecutive samples starting at global sample index `first`:
    /// inputs/targets are (count, T) row-major.
    void fill(uint64_t first, int count, int32_t* inputs, int32_t* targets) const;

  private:
    const std::vector<uint32_t>& permutation(uint64_t epoch) const;
    const TokenDataset& m_data;
    uint64_t m_seed;
    bool m_shuffle;
    mutable uint64_t m_cached_epoch = UINT64_MAX;
    mutable std::vector<uint32_t> m_perm;
};

}  // namespace zt
