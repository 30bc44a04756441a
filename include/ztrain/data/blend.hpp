// Blends of pretraining corpora: data.train / data.val written as a weighted list
// `GLOB:W, GLOB:W, ...` (as Megatron's --data-path), each corpus a TokenDataset of its own.
//
// Which corpus a training sample comes from is a pure function of (seed, weights, sample
// index): a nested low-discrepancy interleaving. Corpus 0 takes the samples where
// floor((i + 1) q0 / R0 + phase) steps (a Beatty sequence over its integer quota q0 of the
// remaining total R0), corpus 1 the same way among the samples corpus 0 left, and so on; the
// last takes what remains. Among any n consecutive samples corpus c therefore gets n * w_c
// within C (the number of corpora), every global batch is mixed in the weights'
// proportions, and the k-th draw of corpus c is known in closed form (no scan from the
// start), so every rank computes its own micro-batches at any world size. The phases come
// from train.seed. Within its draws a corpus visits its windows as BatchSampler does, epoch
// after epoch of its own: corpus 0 with train.seed itself, so one corpus without weights is
// exactly the single-corpus order.
//
// A BlendCursor re-bases the schedule: from sample `origin` on, with each corpus's draws
// starting at drawn[c]. A run starts at origin 0; a resume that changes the weights
// continues each corpus where it stopped, in the new proportions from the checkpoint's
// sample on (train/blend_cursor.hpp).
//
// Not here: what the checkpoint records (train/blend_cursor.hpp), validation per corpus
// (the stages' val_loss).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/data/token_data.hpp"

namespace zt {

/// One corpus of a list: its file or glob and its weight (normalised: the list's sum to 1).
struct CorpusSpec {
    std::string pattern;
    double weight = 1.0;
};

/// data.train or data.val as written.
struct CorpusList {
    std::vector<CorpusSpec> corpora;
    bool weighted = false;  ///< written as GLOB:W, ... (false: one plain file or glob)
    std::string note;       ///< the weights' normalisation, "" when they summed to 1
};

/// Parses a plain file or glob (one corpus, weight 1) or `GLOB:W, GLOB:W, ...` (W after the
/// last ':'; a number > 0). Weights that do not sum to 1 are normalised (`note` says so).
/// InputError naming `key` and the corpus for an empty entry, a missing, unparsable, zero or
/// negative weight, or a corpus listed twice. A single entry whose weight does not parse
/// but which matches files as a whole is a plain file name with a ':' in it.
CorpusList parse_corpus_list(const std::string& text, const std::string& key);

/// The first corpus's pattern of a list as written (the text itself when it is no list),
/// without parsing the rest: where the tools look for tokenizer.json. Never throws.
std::string first_corpus_pattern(const std::string& text);

/// The buffers a list's corpora take when read (TokenDataset): tokens as uint32, a window
/// start (8 B) and a permutation entry (4 B) per window. Reads the shard headers only.
/// InputError naming `key` and the file for a missing or bad one.
double planned_corpus_bytes(const CorpusList& list, const std::string& key, int seq_len);

/// The corpora of a list, each read into windows.
class TokenCorpora {
  public:
    /// `key` names the config key in error messages (data.train, data.val).
    TokenCorpora(const CorpusList& list, const std::string& key, int vocab_size, int seq_len);

    size_t size() const { return m_data.size(); }
    bool weighted() const { return m_list.weighted; }
    const CorpusList& list() const { return m_list; }
    const CorpusSpec& spec(size_t c) const { return m_list.corpora[c]; }
    const TokenDataset& dataset(size_t c) const { return *m_data[c]; }
    /// Every corpus's files, corpus after corpus.
    std::vector<std::string> files() const;
    size_t num_windows() const;

  private:
    CorpusList m_list;
    std::vector<std::unique_ptr<TokenDataset>> m_data;
};

/// Where a blend's schedule starts: sample `origin` of the run, with drawn[c] windows of
/// corpus c already taken.
struct BlendCursor {
    uint64_t origin = 0;
    std::vector<uint64_t> drawn;
};

/// Which corpus each sample draws from (the interleaving above), relative to an origin.
class BlendSchedule {
  public:
    BlendSchedule(const std::vector<double>& weights, uint64_t seed);
    struct Draw {
        size_t corpus;
        uint64_t index;  ///< this corpus's draws before it since the origin
    };
    /// The corpus of sample i (from the origin) and its draw within that corpus.
    Draw draw(uint64_t i) const;
    /// Draws per corpus among the first n samples.
    std::vector<uint64_t> counts(uint64_t n) const;
    size_t size() const { return m_quota.size(); }

  private:
    std::vector<uint64_t> m_quota;      ///< integer weight of each corpus
    std::vector<uint64_t> m_remaining;  ///< quota of corpus c and every later one
    std::vector<uint64_t> m_phase;      ///< seeded, in [0, m_remaining[c])
};

/// The training order over a blend: global sample g -> (corpus, window). One corpus without
/// weights gives BatchSampler's order exactly. Not thread-safe (the corpus samplers cache
/// their epoch's permutation).
class BlendSampler {
  public:
    BlendSampler(const TokenCorpora& corpora, uint64_t seed, bool shuffle);

    /// Fills `count` consecutive samples from global sample `first` (>= the cursor's
    /// origin): inputs/targets are (count, T) row-major.
    void fill(uint64_t first, int count, int32_t* inputs, int32_t* targets) const;
    /// Windows taken from each corpus by samples [0, g) (g >= the cursor's origin).
    std::vector<uint64_t> drawn(uint64_t g) const;
    const BlendCursor& cursor() const { return m_cursor; }
    void set_cursor(BlendCursor cursor);

  private:
    const TokenCorpora& m_corpora;
    BlendSchedule m_schedule;
    std::vector<std::unique_ptr<BatchSampler>> m_samplers;
    BlendCursor m_cursor;
};

/// The seed corpus c's windows are shuffled with: train.seed for corpus 0.
uint64_t corpus_seed(uint64_t seed, size_t corpus);

}  // namespace zt
