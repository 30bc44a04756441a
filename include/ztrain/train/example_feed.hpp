// Fine-tuning on example shards (zt-prepare --format jsonl, shard version 3): the training
// and validation examples with data.overlong applied, their rows (data.packing), and the
// target count of a step's rows (the stages' step, stage_training.hpp, runs the passes).
//
// The loss of a step is the sum of the losses of every target token of the global batch
// (all micro-steps, all ranks) divided by the number of those targets, so gradient
// accumulation and the world size never change the gradient. That count is known before
// any backward without communication: every rank counts the targets of all the step's
// global rows from the (seed, epoch) order the rows are a pure function of.
//
// Rows: global row g of the run (g = step * global_rows + (rank * grad_accum + a) *
// micro_batch + j, as for pretraining windows) is ExampleRows' row g, so any world size
// with the same global batch sees the same rows, and the checkpoint's data cursor
// (TrainProgress::samples_seen, counting rows here) is where a resume continues, in the
// epoch it belongs to.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/data/examples.hpp"

namespace zt {

class ExampleFeed;

/// True when the first file of `pattern` is an example shard (version 3); false when it is
/// a pretraining shard, or no readable shard at all (the pretraining reader says why).
bool is_example_shard(const std::string& pattern, const std::string& key);

/// The deck with train.epochs turned into train.max_steps (steps of micro_batch *
/// grad_accum * world rows, the last epoch completed); the deck itself without epochs.
/// InputError for train.epochs without example shards.
Config with_run_length(const Config& deck, const ExampleFeed* feed, int world);

/// The counts in the example shards' headers of data.train and data.val (examples.hpp):
/// what the memory plan sizes an example run's buffers from.
struct ExampleRunSizes {
    ExampleShardSizes train;
    bool has_val = false;
    ExampleShardSizes val;
};

/// The headers of data.train (and data.val, when set) read for their counts alone, as
/// `ztrain --plan` does before any example is read. InputError naming the key and file.
ExampleRunSizes read_example_run_sizes(const Config& cfg);

/// An example run's buffers per rank, besides the model's: the memory plan's items.
struct ExampleFeedBytes {
    double examples = 0;  ///< training and validation examples held, target counts per example
    double rows = 0;      ///< the order of the examples in rows (ExampleRows, train and val)
};

/// The prompt of a sample during training: a validation example's tokens before its first
/// target, and the token that ends its first run of targets (a chat's end-of-turn token).
struct SamplePrompt {
    std::vector<uint32_t> prompt;
    uint32_t stop = 0;
};

class ExampleFeed {
  public:
    /// data.train (and data.val, when set) as example shards, data.packing and data.overlong
    /// applied; vocabulary and seq_len from the model. Bad input: InputError naming the key.
    /// `segmented_attention`: the backend's block-diagonal attention may run, so padded
    /// micro-batches are compacted (ExampleRows' compact_padding) unless lora.dropout draws
    /// its masks by row and position.
    ExampleFeed(const Config& cfg, bool segmented_attention);

    /// What an ExampleFeed over shards of `sizes` holds for cfg: what its constructor
    /// allocates (the datasets and rows reserve for every example of the headers, the batch
    /// for micro_batch x seq_len), so exact whatever data.overlong leaves out.
    static ExampleFeedBytes planned_bytes(const Config& cfg, const ExampleRunSizes& sizes);
    /// What it holds (capacities): planned_bytes of its shards.
    ExampleFeedBytes bytes() const;
    /// Its shards' header counts (the datasets read them before their examples).
    ExampleRunSizes sizes() const;

    const ExampleDataset& train() const { return *m_train; }
    /// Null without data.val.
    const ExampleDataset* val() const { return m_val.get(); }

    /// Steps of `epochs` passes over the training examples at `global_rows` rows per step,
    /// the last one completed (rounded up).
    long steps_for_epochs(int epochs, long global_rows) const;
    /// The epoch (0-based) global training row `row` belongs to.
    uint64_t epoch_of(uint64_t row) const { return m_train_rows->locate(row).first; }
    /// Target tokens of training rows [first, first + count).
    uint64_t targets_in_rows(uint64_t first, uint64_t count) const;
    void fill_train(uint64_t first, int count, RowBatch& batch) const { m_train_rows->fill(first, count, batch); }
    void fill_val(uint64_t first, int count, RowBatch& batch) const { m_val_rows->fill(first, count, batch); }
    size_t train_rows_in_epoch() const { return m_train_rows->rows_in_epoch(0); }
    size_t val_rows_in_epoch() const { return m_val_rows ? m_val_rows->rows_in_epoch(0) : 0; }
    /// From the first validation example (requires data.val).
    SamplePrompt sample_prompt() const;
    /// The examples line: examples, targets, rows of epoch 0, truncated/dropped counts.
    std::string describe() const;
    /// The start-up line's data: "360 train examples in 75 rows per epoch (pack; 3
    /// truncated, 1 dropped by data.overlong; 2 left out without a target), 40 val examples
    /// in 9 rows" (pack: epoch 0's rows; the counts only where there are some).
    std::string describe_units() const;

  private:
    Packing m_packing;
    std::unique_ptr<ExampleDataset> m_train;
    std::unique_ptr<ExampleDataset> m_val;
    std::unique_ptr<ExampleRows> m_train_rows;
    std::unique_ptr<ExampleRows> m_val_rows;
    std::vector<uint32_t> m_train_targets;  ///< per training example
};

}  // namespace zt
