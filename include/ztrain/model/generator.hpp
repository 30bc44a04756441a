// The model's inference path: a forward over one sequence with a key/value cache per layer,
// for generation (zt-generate). Each call runs only the new tokens: every block computes q,
// k and v for those positions, appends k and v to its layer's cache and attends over the
// cache, so a decoded token costs one row of every product instead of a forward over the
// whole context. The family's own decoder (gpt2_block.cpp, llama_block.cpp) does the block
// math; the logits match the training forward's (Transformer) at the same positions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/model/model_layout.hpp"

namespace zt {

class FamilyDecoder;
struct DecodeRows;

/// A run of new rows of one cached sequence: `length` rows at positions [pos, pos + length)
/// of the sequence whose position 0 is cache row `cache`. Its keys and values go into cache
/// rows [cache + pos, cache + pos + length), over whatever was there, and its rows attend to
/// cache rows [cache, cache + pos) and their own earlier rows only.
struct DecodeSpan {
    int cache = 0;
    int pos = 0;
    int length = 0;
};

/// Every unit's weights resident in backend memory, zeroed at first: the store of an
/// inference run on one process (no gradients, nothing gathered).
class ResidentWeights final : public UnitStore {
  public:
    ResidentWeights(const ModelLayout& layout, Backend& backend);
    ~ResidentWeights() override;
    ResidentWeights(const ResidentWeights&) = delete;
    ResidentWeights& operator=(const ResidentWeights&) = delete;
    /// Elements [begin, begin + n) of `unit` from host memory.
    void set(int unit, size_t begin, const float* data, size_t n);
    const float* acquire(int unit) override { return m_units.at(static_cast<size_t>(unit)); }
    void release(int /*unit*/) override {}
    /// Throws: inference computes no gradients.
    float* grads(int unit) override;

  private:
    Backend& m_backend;
    std::vector<size_t> m_numel;
    std::vector<float*> m_units;
};

/// How the next token is drawn from a row of logits.
struct SamplingOptions {
    double temperature = 1.0;  ///< 0: greedy (the largest logit, the first of equals)
    int top_k = 0;             ///< keep the k most likely tokens; 0: all
    double top_p = 1.0;        ///< keep the smallest set of most likely tokens whose probability reaches p
};

/// The token drawn from logits[0, V) under `opt`, from the counter-based draw (seed, index):
/// the same seed and index give the same token.
int sample_token(const float* logits, int V, const SamplingOptions& opt, uint64_t seed, uint64_t index);

class LoraAdapters;

class Generator {
  public:
    /// Caches `context` rows (0: cfg.seq_len): one sequence's positions, or several sequences
    /// side by side (forward_spans), a position always below cfg.seq_len. A forward takes up to
    /// `max_rows` new rows at a time (0: context; more than context for branches) and keeps
    /// the logits of its last `logits_rows` rows (1 for decoding). Memory: the cache, 2 n_layer
    /// context NKV hs floats, plus max_rows rows of one block's activations.
    Generator(const ModelConfig& cfg, Backend& backend, int logits_rows = 1, int context = 0, int max_rows = 0);
    ~Generator();
    Generator(const Generator&) = delete;
    Generator& operator=(const Generator&) = delete;

    const ModelLayout& layout() const { return m_layout; }
    const ModelConfig& config() const { return m_cfg; }
    /// Positions in the cache: the next token's position.
    int position() const { return m_pos; }
    /// Forgets the cached sequence (the next forward starts at position 0).
    void reset() { m_pos = 0; }

    /// Positions the cache holds.
    int context() const { return m_context; }
    /// New rows one forward takes, and rows whose logits it can keep.
    int max_rows() const { return m_max_rows; }
    int logits_rows() const { return m_logits_rows; }

    /// Runs tokens[0, n) (n <= max_rows) at positions [position(), position() + n), which
    /// must stay within context(), appending them to the cache; then the logits of the last
    /// min(n, logits_rows) rows are ready for logits_row_to_host, or of the last `keep_logits`
    /// (1 <= keep_logits <= logits_rows) when given: the LM head runs on those rows only.
    void forward(UnitStore& store, const int32_t* tokens, int n, int keep_logits = 0);
    /// Runs branches that each continue the cached sequence (the shared context of several
    /// continuations, scored in one forward): lengths[b] tokens each, taken from `tokens` one
    /// branch after another, at positions [position(), position() + lengths[b]). A branch's
    /// rows attend to the cache and their own branch's earlier rows only; position() stays
    /// where it was. Every row's logits are kept (the sum of lengths <= logits_rows and
    /// max_rows), counted back from the last branch's last row as after forward.
    void forward_branches(UnitStore& store, const int32_t* tokens, const std::vector<int>& lengths);
    /// The general forward: several sequences cached side by side, each in its own rows of
    /// the cache (DecodeSpan, model_family.hpp: span s's rows sit at positions [pos, pos +
    /// length) of the sequence cached from row `cache`), their new rows in one forward, the
    /// tokens one span after another. Keeps the logits of each span's last `keep_per_span`
    /// rows (0: every row), span after span, for row_losses and logits_row_to_host. The
    /// spans' rows must fit max_rows and the kept rows logits_rows; position() is unchanged.
    void forward_spans(UnitStore& store, const int32_t* tokens, const std::vector<DecodeSpan>& spans,
                       int keep_per_span);
    /// Copies the logits (Vp floats) of row `row` counted back from the last token of the
    /// last forward (0 = the last token) into host memory at out.
    void logits_row_to_host(int row_from_last, float* out) const;
    /// The cross-entropy -log p(targets[r]) of each row r whose logits the last forward kept
    /// (first to last; a target < 0 gives 0), into losses (host memory), as the training
    /// forward's per-position losses.
    void row_losses(const int32_t* targets, float* losses);

  private:
    /// The rows of `rows` through every block, then each span's last `keep_per_span` rows
    /// (0: all) through the head.
    void run(UnitStore& store, const int32_t* tokens, const DecodeRows& rows, int keep_per_span);

    ModelConfig m_cfg;
    Backend& m_backend;
    ModelLayout m_layout;
    std::unique_ptr<FamilyDecoder> m_decoder;
    int m_logits_rows = 1;
    int m_context = 0;
    int m_max_rows = 0;
    int m_pos = 0;
    int m_last_rows = 0;
    std::vector<void*> m_buffers;  // every backend buffer below, freed with the generator
    std::vector<float*> m_k;       // per layer (context, NKV hs)
    std::vector<float*> m_v;
    float* m_x = nullptr;          // (max_rows, C) the residual stream of the new rows
    float* m_normed = nullptr;     // (logits_rows, C)
    float* m_logits = nullptr;     // (logits_rows, Vp)
    int32_t* m_tokens = nullptr;   // (max_rows) the new tokens in backend memory
    int32_t* m_targets = nullptr;  // (logits_rows) row_losses' targets in backend memory
    float* m_losses = nullptr;     // (logits_rows)
    // LoRA: a block's weights with its adapters merged (a block unit) and the scaled B.
    std::unique_ptr<LoraAdapters> m_lora;
    float* m_merged = nullptr;
    float* m_scaled_b = nullptr;
};

}  // namespace zt
