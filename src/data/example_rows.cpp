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
// (seed, epoch) only, so every world size sees the same rows. Compacted padding changes
// only how a micro-batch's rows are laid out (fill_compact: its examples first fit, longest
// first, into the fewest positions rows x T, T from its longest example up to seq_len),
// never which examples it holds.
// Memory: the dataset reserves every example its shards' headers hold and the rows reserve
// their arrays for that many examples, both at construction, so the memory plan computes
// them exactly from the headers (planned_bytes) and nothing grows during training.
// Deliberately does not: sort the epoch by length (it would change which examples share a
// step), or split an example across rows.
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
    m_header_sizes = example_shard_sizes(m_files, key);
    m_examples.tokens.reserve(m_header_sizes.tokens);
    m_examples.target.reserve(m_header_sizes.tokens);
    m_examples.starts.reserve(m_header_sizes.examples + 1);
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

double ExampleDataset::planned_bytes(const ExampleShardSizes& sizes) {
    return static_cast<double>(sizes.tokens) * (sizeof(uint32_t) + sizeof(uint8_t)) +
           static_cast<double>(sizes.examples + 1) * sizeof(uint64_t);
}

size_t ExampleDataset::bytes() const {
    return m_examples.tokens.capacity() * sizeof(uint32_t) + m_examples.target.capacity() * sizeof(uint8_t) +
           m_examples.starts.capacity() * sizeof(uint64_t);
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

void RowBatch::reserve(int max_rows, int seq_len) {
    const size_t n = static_cast<size_t>(max_rows) * static_cast<size_t>(seq_len);
    for (std::vector<int32_t>* v : {&inputs, &targets, &positions, &segment_start, &sample}) v->reserve(n);
}

size_t RowBatch::bytes() const {
    return (inputs.capacity() + targets.capacity() + positions.capacity() + segment_start.capacity() +
            sample.capacity()) *
           sizeof(int32_t);
}

ExampleRows::ExampleRows(const ExampleDataset& data, Packing packing, uint64_t seed, bool shuffle,
                         bool compact_padding)
    : m_data(data),
      m_packing(packing),
      m_seed(seed),
      m_shuffle(shuffle),
      m_compact_padding(compact_padding && packing == Packing::kPad) {
    ZT_REQUIRE(data.examples().num_examples() > 0, "rows need at least one example");
    ZT_REQUIRE(data.examples().num_examples() <= UINT32_MAX, "too many examples for 32-bit indices");
    // Sized for every example of the shards' headers, as the dataset is, so the plan made
    // from the headers alone is exact.
    const size_t E = static_cast<size_t>(data.header_sizes().examples);
    m_order.reserve(E);
    if (packing == Packing::kPack) {
        m_row_begin.reserve(E + 1);
        m_arrival.reserve(E);
        m_row_of.reserve(E);
        m_room.reserve(E);
    }
}

double ExampleRows::planned_bytes(size_t num_examples, Packing packing) {
    const double E = static_cast<double>(num_examples);
    return packing == Packing::kPad ? E * sizeof(uint32_t) : (5 * E + 1) * sizeof(uint32_t);
}

size_t ExampleRows::bytes() const {
    return (m_order.capacity() + m_row_begin.capacity() + m_arrival.capacity() + m_row_of.capacity() +
            m_room.capacity()) *
           sizeof(uint32_t);
}

void ExampleRows::build_epoch(uint64_t epoch) const {
    if (epoch == m_cached_epoch) {
        return;
    }
    const ExampleSet& ex = m_data.examples();
    const size_t E = ex.num_examples();
    // Padding: the epoch's order is its rows, one example each.
    std::vector<uint32_t>& order = m_packing == Packing::kPad ? m_order : m_arrival;
    order.resize(E);
    if (m_shuffle) {
        epoch_permutation(m_seed, epoch, order);
    } else {
        std::iota(order.begin(), order.end(), 0u);
    }
    if (m_packing == Packing::kPad) {
        m_num_rows = E;
        m_cached_epoch = epoch;
        return;
    }
    // First fit: the first open row with room. Rows fill up front to back, so the search
    // starts at the first row that still has room for the smallest example (1 position).
    // A row is opened only for an example, so there are at most E rows (the reserve holds).
    m_row_of.resize(E);
    m_room.clear();
    size_t first_open = 0;
    for (size_t k = 0; k < E; ++k) {
        const size_t need = ex.length(order[k]) - 1;
        size_t r = first_open;
        while (r < m_room.size() && m_room[r] < need) {
            ++r;
        }
        if (r == m_room.size()) {
            m_room.push_back(static_cast<uint32_t>(m_data.seq_len()));
        }
        m_row_of[k] = static_cast<uint32_t>(r);
        m_room[r] -= static_cast<uint32_t>(need);
        while (first_open < m_room.size() && m_room[first_open] == 0) {
            ++first_open;
        }
    }
    // Group the examples by row, each row's in arrival order (a counting sort; m_room
    // becomes each row's write cursor).
    const size_t rows = m_room.size();
    m_row_begin.assign(rows + 1, 0);
    for (size_t k = 0; k < E; ++k) {
        ++m_row_begin[m_row_of[k] + 1];
    }
    for (size_t r = 0; r < rows; ++r) {
        m_row_begin[r + 1] += m_row_begin[r];
        m_room[r] = m_row_begin[r];
    }
    m_order.resize(E);
    for (size_t k = 0; k < E; ++k) {
        m_order[m_room[m_row_of[k]]++] = order[k];
    }
    m_num_rows = rows;
    m_cached_epoch = epoch;
}

size_t ExampleRows::rows_in_epoch(uint64_t epoch) const {
    if (m_packing == Packing::kPad) {
        return m_data.examples().num_examples();
    }
    build_epoch(epoch);
    return m_num_rows;
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

std::pair<const uint32_t*, const uint32_t*> ExampleRows::cached_row(size_t r) const {
    ZT_REQUIRE(r < m_num_rows, "row ", r, " of ", m_num_rows, " in epoch ", m_cached_epoch);
    if (m_packing == Packing::kPad) {
        return {m_order.data() + r, m_order.data() + r + 1};
    }
    return {m_order.data() + m_row_begin[r], m_order.data() + m_row_begin[r + 1]};
}

std::vector<uint32_t> ExampleRows::row(uint64_t epoch, size_t r) const {
    build_epoch(epoch);
    const auto [begin, end] = cached_row(r);
    return std::vector<uint32_t>(begin, end);
}

namespace {

/// First fit of examples needing `need` positions, taken in `order` (longest first), into
/// rows of `capacity`: the rows used, each example's row in row_of.
size_t first_fit(const std::vector<size_t>& need, const std::vector<size_t>& order, size_t capacity,
                 std::vector<size_t>& row_of) {
    std::vector<size_t> room;
    for (const size_t j : order) {
        size_t r = 0;
        while (r < room.size() && room[r] < need[j]) ++r;
        if (r == room.size()) room.push_back(capacity);
        room[r] -= need[j];
        row_of[j] = r;
    }
    return room.size();
}

}  // namespace

std::pair<size_t, size_t> compact_layout(const std::vector<size_t>& need, size_t seq_len, std::vector<size_t>& row_of) {
    ZT_REQUIRE(!need.empty() && row_of.size() == need.size(), "compact_layout of ", need.size(), " examples");
    const size_t longest = *std::max_element(need.begin(), need.end());
    const size_t total = std::accumulate(need.begin(), need.end(), size_t{0});
    ZT_REQUIRE(longest <= seq_len, "an example of ", longest, " positions in rows of ", seq_len);
    // Longest first, ties in batch order: the same order at every capacity tried.
    std::vector<size_t> order(need.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return need[a] > need[b]; });
    // For each row count R, the least capacity in [max(longest, total / R), seq_len] at which
    // first fit needs at most R rows (a bisection: first fit decreasing is monotone in the
    // capacity but for rare anomalies, which only cost a slightly larger row); keep the
    // layout with the fewest positions (rows x capacity), then the shortest rows.
    size_t best_rows = need.size();
    size_t best_T = longest;
    std::vector<size_t> scratch(need.size());
    for (size_t R = 1; R < need.size(); ++R) {
        size_t lo = std::max(longest, (total + R - 1) / R);
        if (lo > seq_len || R * lo >= best_rows * best_T) continue;
        size_t hi = seq_len;
        if (first_fit(need, order, hi, scratch) > R) continue;
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (first_fit(need, order, mid, scratch) <= R) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        const size_t rows = first_fit(need, order, lo, scratch);
        if (rows * lo < best_rows * best_T || (rows * lo == best_rows * best_T && lo < best_T)) {
            best_rows = rows;
            best_T = lo;
        }
    }
    const size_t rows = first_fit(need, order, best_T, scratch);
    // Rows numbered in the batch order of their first example: when nothing shares a row,
    // example j is row j, plain padding's layout.
    std::vector<size_t> renumbered(rows, need.size());
    size_t next = 0;
    for (size_t j = 0; j < need.size(); ++j) {
        size_t& r = renumbered[scratch[j]];
        if (r == need.size()) r = next++;
        row_of[j] = r;
    }
    return {rows, best_T};
}

namespace {

/// Writes one row's examples [begin, end) at positions [0, used) of row `b` (stride
/// `stride` positions) and padding up to the stride; returns `used`.
size_t write_row(const ExampleSet& ex, const uint32_t* begin, const uint32_t* end, int b, size_t stride,
                 RowBatch& batch) {
    const size_t base = static_cast<size_t>(b) * stride;
    size_t t = 0;
    for (const uint32_t* it = begin; it != end; ++it) {
        const size_t start = static_cast<size_t>(ex.starts[*it]);
        const size_t n = ex.length(*it);
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
    const size_t used = t;
    batch.num_tokens += used;
    for (; t < stride; ++t) {
        const size_t at = base + t;
        batch.inputs[at] = 0;
        batch.targets[at] = -1;
        batch.positions[at] = 0;
        batch.segment_start[at] = static_cast<int32_t>(t);
    }
    return used;
}

}  // namespace

void ExampleRows::fill(uint64_t first, int count, RowBatch& batch) const {
    ZT_REQUIRE(count >= 1, "fill needs at least one row, got ", count);
    if (m_compact_padding) {
        fill_compact(first, count, batch);
        return;
    }
    const ExampleSet& ex = m_data.examples();
    // Each row is written as it is located (a later row may sit in another epoch, which
    // evicts the cached one) at stride seq_len; padding then keeps the leading T positions
    // of each row, T its longest row's (dynamic padding). So the arrays never exceed
    // count x seq_len (RowBatch::planned_bytes).
    const size_t S = static_cast<size_t>(m_data.seq_len());
    const size_t n = static_cast<size_t>(count) * S;
    batch.sample.clear();
    batch.inputs.resize(n);
    batch.targets.resize(n);
    batch.positions.resize(n);
    batch.segment_start.resize(n);
    batch.num_targets = 0;
    batch.num_tokens = 0;
    size_t longest = 0;
    for (int j = 0; j < count; ++j) {
        const auto [epoch, r] = locate(first + static_cast<uint64_t>(j));
        build_epoch(epoch);
        const auto [begin, end] = cached_row(r);
        longest = std::max(longest, write_row(ex, begin, end, j, S, batch));
    }
    const size_t T = m_packing == Packing::kPack ? S : longest;
    if (T < S) {
        for (std::vector<int32_t>* v : {&batch.inputs, &batch.targets, &batch.positions, &batch.segment_start}) {
            // Row j moves from j * S down to j * T: forward copies never overwrite a row
            // before it is moved.
            for (size_t j = 1; j < static_cast<size_t>(count); ++j) {
                std::copy(v->begin() + static_cast<std::ptrdiff_t>(j * S),
                          v->begin() + static_cast<std::ptrdiff_t>(j * S + T),
                          v->begin() + static_cast<std::ptrdiff_t>(j * T));
            }
            v->resize(static_cast<size_t>(count) * T);
        }
    }
    batch.rows = count;
    batch.T = static_cast<int>(T);
    batch.segmented = m_packing == Packing::kPack;
}

void ExampleRows::fill_compact(uint64_t first, int count, RowBatch& batch) const {
    const ExampleSet& ex = m_data.examples();
    const auto n = static_cast<size_t>(count);
    std::vector<uint32_t> example(n);
    std::vector<size_t> need(n);  // positions: an example of k tokens takes k - 1
    for (size_t j = 0; j < n; ++j) {
        const auto [epoch, r] = locate(first + j);
        build_epoch(epoch);
        example[j] = *cached_row(r).first;
        need[j] = ex.length(example[j]) - 1;
    }
    std::vector<size_t> row_of(n);
    const auto [rows, T] = compact_layout(need, static_cast<size_t>(m_data.seq_len()), row_of);
    // Each row's examples in batch order.
    std::vector<std::vector<size_t>> row_members(rows);
    for (size_t j = 0; j < n; ++j) row_members[row_of[j]].push_back(j);
    // At most count x seq_len: within the reserve.
    for (std::vector<int32_t>* v :
         {&batch.inputs, &batch.targets, &batch.positions, &batch.segment_start, &batch.sample}) {
        v->resize(rows * T);
    }
    batch.num_targets = 0;
    batch.num_tokens = 0;
    std::vector<uint32_t> ids;
    for (size_t r = 0; r < rows; ++r) {
        ids.clear();
        int32_t* sample = batch.sample.data() + r * T;
        for (const size_t j : row_members[r]) {
            ids.push_back(example[j]);
            sample = std::fill_n(sample, need[j], static_cast<int32_t>(j));
        }
        std::fill(sample, batch.sample.data() + (r + 1) * T, static_cast<int32_t>(n + r));
        write_row(ex, ids.data(), ids.data() + ids.size(), static_cast<int>(r), T, batch);
    }
    batch.rows = static_cast<int>(rows);
    batch.T = static_cast<int>(T);
    batch.segmented = rows < n;
}

}  // namespace zt
