// Fine-tuning on example shards: rows and the global target count (example_feed.hpp says
// why the loss is normalised the way it is).
#include "ztrain/train/example_feed.hpp"

#include <algorithm>

#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"

namespace zt {
namespace {

Packing to_packing(DataPacking p) { return p == DataPacking::kPad ? Packing::kPad : Packing::kPack; }

Overlong to_overlong(DataOverlong o) {
    switch (o) {
        case DataOverlong::kTruncate: return Overlong::kTruncate;
        case DataOverlong::kDrop: return Overlong::kDrop;
        case DataOverlong::kError: break;
    }
    return Overlong::kError;
}

/// Targets of each example: its first token is never one, so every marked token counts.
/// Reserved for `capacity` examples (the headers'), as the dataset is.
std::vector<uint32_t> targets_per_example(const ExampleSet& ex, size_t capacity) {
    std::vector<uint32_t> out;
    out.reserve(std::max(capacity, ex.num_examples()));
    out.resize(ex.num_examples());
    for (size_t e = 0; e < out.size(); ++e) {
        const auto begin = ex.target.begin() + static_cast<std::ptrdiff_t>(ex.starts[e]);
        out[e] = static_cast<uint32_t>(std::count(begin, begin + static_cast<std::ptrdiff_t>(ex.length(e)), uint8_t{1}));
    }
    return out;
}

}  // namespace

bool is_example_shard(const std::string& pattern, const std::string& key) {
    // What is not a readable shard at all is left to the pretraining reader, which names the
    // problem as it always has.
    try {
        const std::vector<std::string> files = expand_shard_glob(pattern, key);
        return read_shard_version(files.front()) == kShardVersionExamples;
    } catch (const InputError&) {
        return false;
    }
}

Config with_run_length(const Config& deck, const ExampleFeed* feed, int world) {
    Config cfg = deck;
    if (deck.train.epochs == 0) return cfg;
    ZT_INPUT_CHECK(feed != nullptr, "train.epochs = ", deck.train.epochs,
                   ": only example shards (zt-prepare --format jsonl) have epochs; use train.max_steps");
    const long global_rows = static_cast<long>(deck.train.micro_batch) * deck.train.grad_accum * world;
    const long steps = feed->steps_for_epochs(deck.train.epochs, global_rows);
    ZT_INPUT_CHECK(steps <= INT32_MAX, "train.epochs = ", deck.train.epochs, ": ", steps, " steps is too many");
    cfg.train.max_steps = static_cast<int>(steps);
    return cfg;
}

ExampleFeed::ExampleFeed(const Config& cfg, bool segmented_attention) : m_packing(to_packing(cfg.data.packing)) {
    const ModelConfig& mc = cfg.model;
    const Overlong overlong = to_overlong(cfg.data.overlong);
    m_train = std::make_unique<ExampleDataset>(cfg.data.train, "data.train", mc.vocab_size, mc.seq_len, overlong);
    m_train_rows = std::make_unique<ExampleRows>(*m_train, m_packing, cfg.train.seed, true, segmented_attention);
    m_train_targets = targets_per_example(m_train->examples(), m_train->header_sizes().examples);
    if (!cfg.data.val.empty()) {
        ZT_INPUT_CHECK(is_example_shard(cfg.data.val, "data.val"), "data.val = ", cfg.data.val,
                       ": a pretraining shard, while data.train is an example shard; give example shards "
                       "(zt-prepare --format jsonl) for both");
        m_val = std::make_unique<ExampleDataset>(cfg.data.val, "data.val", mc.vocab_size, mc.seq_len, overlong);
        m_val_rows = std::make_unique<ExampleRows>(*m_val, m_packing, cfg.train.seed, false, segmented_attention);
    }
    // The memory plan predicts these figures from the headers: the two must never drift apart.
    const ExampleFeedBytes made = bytes();
    const ExampleFeedBytes plan = planned_bytes(cfg, sizes());
    ZT_REQUIRE(made.examples == plan.examples && made.rows == plan.rows, "example feed allocated ", made.examples,
               " + ", made.rows, " bytes, planned ", plan.examples, " + ", plan.rows);
}

ExampleRunSizes read_example_run_sizes(const Config& cfg) {
    ExampleRunSizes s;
    s.train = example_shard_sizes(cfg.data.train, "data.train");
    s.has_val = !cfg.data.val.empty();
    if (s.has_val) s.val = example_shard_sizes(cfg.data.val, "data.val");
    return s;
}

ExampleFeedBytes ExampleFeed::planned_bytes(const Config& cfg, const ExampleRunSizes& sizes) {
    const Packing packing = to_packing(cfg.data.packing);
    ExampleFeedBytes b;
    b.examples = ExampleDataset::planned_bytes(sizes.train) + static_cast<double>(sizes.train.examples) * sizeof(uint32_t);
    b.rows = ExampleRows::planned_bytes(sizes.train.examples, packing);
    if (sizes.has_val) {
        b.examples += ExampleDataset::planned_bytes(sizes.val);
        b.rows += ExampleRows::planned_bytes(sizes.val.examples, packing);
    }
    return b;
}

ExampleFeedBytes ExampleFeed::bytes() const {
    ExampleFeedBytes b;
    b.examples = static_cast<double>(m_train->bytes() + m_train_targets.capacity() * sizeof(uint32_t));
    b.rows = static_cast<double>(m_train_rows->bytes());
    if (m_val) {
        b.examples += static_cast<double>(m_val->bytes());
        b.rows += static_cast<double>(m_val_rows->bytes());
    }
    return b;
}

ExampleRunSizes ExampleFeed::sizes() const {
    ExampleRunSizes s;
    s.train = m_train->header_sizes();
    s.has_val = m_val != nullptr;
    if (m_val) s.val = m_val->header_sizes();
    return s;
}

long ExampleFeed::steps_for_epochs(int epochs, long global_rows) const {
    uint64_t rows = 0;
    for (int e = 0; e < epochs; ++e) rows += m_train_rows->rows_in_epoch(static_cast<uint64_t>(e));
    const uint64_t per = static_cast<uint64_t>(global_rows);
    return static_cast<long>((rows + per - 1) / per);
}

uint64_t ExampleFeed::targets_in_rows(uint64_t first, uint64_t count) const {
    uint64_t n = 0;
    for (uint64_t g = first; g < first + count; ++g) {
        const auto [epoch, r] = m_train_rows->locate(g);
        for (uint32_t e : m_train_rows->row(epoch, r)) n += m_train_targets[e];
    }
    return n;
}

SamplePrompt ExampleFeed::sample_prompt() const {
    ZT_REQUIRE(m_val != nullptr, "a sample prompt without data.val");
    const ExampleSet& ex = m_val->examples();
    const size_t begin = static_cast<size_t>(ex.starts[0]);
    const size_t end = begin + ex.length(0);
    size_t first = begin;
    while (first < end && ex.target[first] == 0) ++first;  // every example has a target
    size_t last = first;
    while (last + 1 < end && ex.target[last + 1] != 0) ++last;
    return SamplePrompt{std::vector<uint32_t>(ex.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                              ex.tokens.begin() + static_cast<std::ptrdiff_t>(first)),
                        ex.tokens[last]};
}

std::string ExampleFeed::describe() const {
    auto one = [&](const char* what, const ExampleDataset& d, const ExampleRows& rows) {
        return str(what, " ", d.examples().num_examples(), " examples (", d.examples().num_targets(), " targets, ",
                   rows.rows_in_epoch(0), " rows of ", m_packing == Packing::kPack ? "packed" : "padded",
                   " examples in epoch 0; ", d.truncated(), " truncated, ", d.dropped(), " dropped, ",
                   d.without_targets(), " without a target)");
    };
    std::string s = one("train:", *m_train, *m_train_rows);
    if (m_val) s += "; " + one("val:", *m_val, *m_val_rows);
    return s;
}

std::string ExampleFeed::describe_units() const {
    auto left_out = [](const ExampleDataset& d) {
        std::string s;
        if (d.truncated() > 0) s += str(d.truncated(), " truncated");
        if (d.dropped() > 0) s += str(s.empty() ? "" : ", ", d.dropped(), " dropped");
        if (!s.empty()) s += " by data.overlong";
        if (d.without_targets() > 0) s += str(s.empty() ? "" : "; ", d.without_targets(), " left out without a target");
        return s;
    };
    const char* packing = m_packing == Packing::kPack ? "pack" : "pad";
    const std::string train_left = left_out(*m_train);
    std::string s = str(m_train->examples().num_examples(), " train examples in ", m_train_rows->rows_in_epoch(0),
                        " rows per epoch (", packing, train_left.empty() ? "" : "; ", train_left, ")");
    if (m_val) {
        const std::string val_left = left_out(*m_val);
        s += str(", ", m_val->examples().num_examples(), " val examples in ", m_val_rows->rows_in_epoch(0), " rows",
                 val_left.empty() ? "" : str(" (", val_left, ")"));
    }
    return s;
}

}  // namespace zt
