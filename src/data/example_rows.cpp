// Example datasets (example shards with data.overlong applied) and the rows they are laid
// into for training (data.packing = pack | pad), with per-token positions and the first
// position each token may attend to, so a packed example is computed exactly as if alone.
//
// Row layout: an example of n tokens takes n - 1 consecutive positions of a row (inputs
// tokens[0..n-1), targets tokens[1..n) where marked), its positions restart at 0, and its
// tokens attend only to positions from the example's first one on (segment_start). Padding
// (the tail of a packed row, or beyond an example in a padded micro-batch) is input token 0,
// never a target, position 0, and attends only to itself, so no real token ever sees it and
// its softmax is well defined.
// Order: the examples of epoch e in epoch_permutation(seed, e) order (input order without
// shuffle); pack places each, in that order, into the first row with room (first fit) and
// emits rows in the order they were opened; pad makes one row per example. Both depend on
// (seed, epoch) only, so every world size sees the same rows.
// Deliberately does not: sort by length (it would change which examples share a step), or
// split an example across rows.
#include <algorithm>
#include <numeric>

#include "ztrain/core/error.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"

namespace zt {

ExampleDataset::ExampleDataset(const std::string& pattern, const std::string& key, int vocab_size, int seq_len,
                               Overlong overlong)
    : m_seq_len(seq_len) {
    ZT_REQUIRE(seq_len >= 1, key, ": seq_len must be positive, got ", seq_len);
    m_files = expand_shard_glob(pattern, key);
    size_t global_index = 0;
    for (const std::string& file : m_files) {
        ExampleSet shard;
        try {
            shard = read_example_shard(file, vocab_size);
        } catch (const InputError& e) {
            throw InputError(str(key, ": ", e.what()));
        }
        for (size_t e = 0; e < shard.num_examples(); ++e, ++global_index) {
            add(shard, e, global_index, key, overlong);
        }
    }
    ZT_INPUT_CHECK(m_examples.num_examples() > 0, key, ": '", pattern, "' holds no example to train on (",
                   global_index, " read; ", m_dropped, " longer than seq_len + 1 = ", seq_len + 1,
                   " dropped, ", m_without_targets, " without a target)");
}

void ExampleDataset::add(const ExampleSet& shard, size_t e, size_t global_index, const std::string& key,
                         Overlong overlong) {
    const size_t n = shard.length(e);
    const size_t fit = static_cast<size_t>(m_seq_len) + 1;
    size_t keep = n;
    if (n > fit) {
        if (overlong == Overlong::kError) {
            throw InputError(str(key, ": example ", global_index, " has ", n, " tokens, more than seq_len + 1 = ",
                                 fit, " (data.overlong = error; set data.overlong = truncate or drop, or "
                                 "a larger model.seq_len)"));
        }
        if (overlong == Overlong::kDrop) {
            ++m_dropped;
            return;
        }
        keep = fit;
        ++m_truncated;
    }
    const auto begin = static_cast<std::ptrdiff_t>(shard.starts[e]);
    const std::vector<uint8_t> target(shard.target.begin() + begin,
                                      shard.target.begin() + begin + static_cast<std::ptrdiff_t>(keep));
    if (keep < 2 || std::count(target.begin() + 1, target.end(), uint8_t{1}) == 0) {
        ++m_without_targets;
        return;
    }
    m_examples.append(std::vector<uint32_t>(shard.tokens.begin() + begin,
                                            shard.tokens.begin() + begin + static_cast<std::ptrdiff_t>(keep)),
                      target);
}

ExampleRows::ExampleRows(const ExampleDataset& data, Packing packing, uint64_t seed, bool shuffle)
    : m_data(data), m_packing(packing), m_seed(seed), m_shuffle(shuffle) {
    ZT_REQUIRE(data.examples().num_examples() > 0, "rows need at least one example");
    ZT_REQUIRE(data.examples().num_examples() <= UINT32_MAX, "too many examples for 32-bit indices");
}

void ExampleRows::build_epoch(uint64_t epoch) const {
    if (epoch == m_cached_epoch) {
        return;
    }
    const ExampleSet& ex = m_data.examples();
    std::vector<uint32_t> order(ex.num_examples());
    if (m_shuffle) {
        epoch_permutation(m_seed, epoch, order);
    } else {
        std::iota(order.begin(), order.end(), 0u);
    }
    m_rows.clear();
    if (m_packing == Packing::kPad) {
        for (uint32_t e : order) {
            m_rows.push_back({e});
        }
    } else {
        // First fit: the first open row with room. Rows fill up front to back, so the search
        // starts at the first row that still has room for the smallest example (1 position).
        std::vector<size_t> room;
        size_t first_open = 0;
        const auto positions = [&](uint32_t e) { return ex.length(e) - 1; };
        for (uint32_t e : order) {
            const size_t need = positions(e);
            size_t r = first_open;
            while (r < m_rows.size() && room[r] < need) {
                ++r;
            }
            if (r == m_rows.size()) {
                m_rows.emplace_back();
                room.push_back(static_cast<size_t>(m_data.seq_len()));
            }
            m_rows[r].push_back(e);
            room[r] -= need;
            while (first_open < room.size() && room[first_open] == 0) {
                ++first_open;
            }
        }
    }
    m_cached_epoch = epoch;
}

size_t ExampleRows::rows_in_epoch(uint64_t epoch) const {
    if (m_packing == Packing::kPad) {
        return m_data.examples().num_examples();
    }
    build_epoch(epoch);
    return m_rows.size();
}

std::pair<uint64_t, size_t> ExampleRows::locate(uint64_t g) const {
    // Epoch lengths differ when packing, so the boundaries are accumulated epoch by epoch
    // (cheap: one first-fit pass per epoch, once).
    while (m_epoch_end.empty() || m_epoch_end.back() <= g) {
        const uint64_t before = m_epoch_end.empty() ? 0 : m_epoch_end.back();
        m_epoch_end.push_back(before + rows_in_epoch(m_epoch_end.size()));
    }
    const auto it = std::upper_bound(m_epoch_end.begin(), m_epoch_end.end(), g);
    const auto epoch = static_cast<uint64_t>(it - m_epoch_end.begin());
    const uint64_t start = epoch == 0 ? 0 : m_epoch_end[epoch - 1];
    return {epoch, static_cast<size_t>(g - start)};
}

const std::vector<uint32_t>& ExampleRows::row(uint64_t epoch, size_t r) const {
    build_epoch(epoch);
    ZT_REQUIRE(r < m_rows.size(), "row ", r, " of ", m_rows.size(), " in epoch ", epoch);
    return m_rows[r];
}

namespace {

/// Positions a row's examples take.
size_t row_positions(const ExampleSet& ex, const std::vector<uint32_t>& examples) {
    size_t n = 0;
    for (uint32_t e : examples) {
        n += ex.length(e) - 1;
    }
    return n;
}

/// Writes one row's examples at positions [0, used) of row `b` and padding after them.
void write_row(const ExampleSet& ex, const std::vector<uint32_t>& examples, int b, RowBatch& batch) {
    const size_t T = static_cast<size_t>(batch.T);
    const size_t base = static_cast<size_t>(b) * T;
    size_t t = 0;
    for (uint32_t e : examples) {
        const size_t start = static_cast<size_t>(ex.starts[e]);
        const size_t n = ex.length(e);
        for (size_t i = 0; i + 1 < n; ++i, ++t) {
            const size_t at = base + t;
            batch.inputs[at] = static_cast<int32_t>(ex.tokens[start + i]);
            const bool is_target = ex.target[start + i + 1] != 0;
            batch.targets[at] = is_target ? static_cast<int32_t>(ex.tokens[start + i + 1]) : -1;
            batch.positions[at] = static_cast<int32_t>(i);
            batch.segment_start[at] = static_cast<int32_t>(t - i);
            batch.num_targets += is_target ? 1 : 0;
        }
    }
    batch.num_tokens += t;
    for (; t < T; ++t) {
        const size_t at = base + t;
        batch.inputs[at] = 0;
        batch.targets[at] = -1;
        batch.positions[at] = 0;
        batch.segment_start[at] = static_cast<int32_t>(t);
    }
}

}  // namespace

void ExampleRows::fill(uint64_t first, int count, RowBatch& batch) const {
    ZT_REQUIRE(count >= 1, "fill needs at least one row, got ", count);
    const ExampleSet& ex = m_data.examples();
    // The rows' example lists (copied: a later row may sit in another epoch, which evicts
    // the cached one).
    std::vector<std::vector<uint32_t>> rows;
    size_t longest = 0;
    for (int j = 0; j < count; ++j) {
        const auto [epoch, r] = locate(first + static_cast<uint64_t>(j));
        rows.push_back(row(epoch, r));
        longest = std::max(longest, row_positions(ex, rows.back()));
    }
    batch.rows = count;
    batch.T = m_packing == Packing::kPack ? m_data.seq_len() : static_cast<int>(longest);
    const size_t n = static_cast<size_t>(count) * static_cast<size_t>(batch.T);
    batch.inputs.assign(n, 0);
    batch.targets.assign(n, -1);
    batch.positions.assign(n, 0);
    batch.segment_start.assign(n, 0);
    batch.num_targets = 0;
    batch.num_tokens = 0;
    for (int j = 0; j < count; ++j) {
        write_row(ex, rows[static_cast<size_t>(j)], j, batch);
    }
}

}  // namespace zt
