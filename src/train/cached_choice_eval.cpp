// Multiple-choice scoring through the inference path (choice_eval.hpp, CachedChoiceEvaluator):
// an example's shared context once into the key/value cache, its endings as branches over it.
#include <algorithm>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/train/choice_eval.hpp"

namespace zt {

CachedChoiceEvaluator::CachedChoiceEvaluator(Generator& gen, UnitStore& weights, Communicator& comm, int max_branches,
                                             uint32_t bos)
    : m_gen(gen),
      m_weights(weights),
      m_comm(comm),
      m_max_branches(static_cast<size_t>(max_branches)),
      m_bos(bos),
      m_losses(static_cast<size_t>(gen.logits_rows())) {
    ZT_REQUIRE(max_branches >= 1, "CachedChoiceEvaluator: max_branches ", max_branches, " < 1");
}

namespace {

/// The number of leading inputs every row shares, cut after the first position any row
/// scores (a scored position's logits are the shared row's, but its target is the row's own).
size_t shared_prefix(const std::vector<ChoiceRow>& rows) {
    size_t shared = rows.front().inputs.size();
    for (const ChoiceRow& row : rows) {
        size_t same = 0;
        while (same < shared && same < row.inputs.size() && row.inputs[same] == rows.front().inputs[same]) ++same;
        size_t first_scored = 0;
        while (first_scored < row.targets.size() && row.targets[first_scored] < 0) ++first_scored;
        shared = std::min({shared, same, first_scored + 1});
    }
    return shared;
}

/// What a group of consecutive examples may take: its contexts' rows in one forward, their
/// last rows' logits, the cache's rows, and distinct rows (endings).
struct GroupLimits {
    size_t rows = 0;
    size_t logits = 0;
    size_t context = 0;
    size_t endings = 0;
};

/// Where each group of consecutive examples starts (and, last, n): a group takes examples
/// while their contexts fit one forward, their rows the cache (each example the length of
/// its longest row) and their distinct rows `limits.endings`. The cuts depend on the task
/// alone, not on the world size.
std::vector<long> group_starts(const std::vector<size_t>& shared, const std::vector<size_t>& longest,
                               const std::vector<size_t>& distinct, const GroupLimits& limits) {
    std::vector<long> starts{0};
    size_t ctx = 0;
    size_t cache = 0;
    size_t ends = 0;
    const long n = static_cast<long>(shared.size());
    for (long i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        const bool full = ctx + shared[k] > limits.rows || static_cast<size_t>(i - starts.back()) >= limits.logits ||
                          cache + longest[k] > limits.context || ends + distinct[k] > limits.endings;
        if (i > starts.back() && full) {
            starts.push_back(i);
            ctx = cache = ends = 0;
        }
        ctx += shared[k];
        cache += longest[k];
        ends += distinct[k];
    }
    starts.push_back(n);
    return starts;
}

size_t longest_input(const ChoiceRows& rows) {
    size_t longest = 0;
    for (const ChoiceRow& row : rows.rows) longest = std::max(longest, row.inputs.size());
    return longest;
}

}  // namespace

ChoiceExtents choice_extents(const ChoiceTask& task, long limit, int seq_len, uint32_t bos) {
    const long total = static_cast<long>(task.examples.size());
    const long n = limit > 0 ? std::min(limit, total) : total;
    ChoiceExtents ext;
    for (long i = 0; i < n; ++i) {
        const ChoiceRows distinct = distinct_rows(task.examples[static_cast<size_t>(i)], seq_len, bos);
        const size_t shared = shared_prefix(distinct.rows);
        for (const ChoiceRow& row : distinct.rows) {
            ext.row = std::max(ext.row, static_cast<int>(row.inputs.size()));
            ext.branch = std::max(ext.branch, static_cast<int>(row.inputs.size() - shared));
        }
    }
    return ext;
}

void CachedChoiceEvaluator::score_contexts(std::vector<GroupItem>& group) {
    std::vector<DecodeSpan> spans;
    std::vector<int32_t> tokens;
    std::vector<size_t> with_context;
    size_t widest = 0;
    for (size_t j = 0; j < group.size(); ++j) {
        const GroupItem& item = group[j];
        widest = std::max(widest, item.distinct.rows.size());
        if (item.shared == 0) continue;
        const std::vector<int32_t>& in = item.distinct.rows.front().inputs;
        spans.push_back(DecodeSpan{item.cache, 0, static_cast<int>(item.shared)});
        tokens.insert(tokens.end(), in.begin(), in.begin() + static_cast<long>(item.shared));
        with_context.push_back(j);
    }
    if (spans.empty()) return;
    m_gen.forward_spans(m_weights, tokens.data(), spans, 1);
    // Kept row c is context c's last: each of its items' rows reads it with its own target.
    std::vector<int32_t> targets(with_context.size());
    for (size_t b = 0; b < widest; ++b) {
        bool any = false;
        for (size_t c = 0; c < with_context.size(); ++c) {
            const GroupItem& item = group[with_context[c]];
            targets[c] = b < item.distinct.rows.size() ? item.distinct.rows[b].targets[item.shared - 1] : -1;
            any = any || targets[c] >= 0;
        }
        if (!any) continue;
        m_gen.row_losses(targets.data(), m_losses.data());
        for (size_t c = 0; c < with_context.size(); ++c)
            if (targets[c] >= 0) group[with_context[c]].loglik[b] -= static_cast<double>(m_losses[c]);
    }
}

void CachedChoiceEvaluator::run_branches(std::vector<GroupItem>& group,
                                         const std::vector<std::pair<size_t, size_t>>& members) {
    std::vector<DecodeSpan> spans;
    std::vector<int32_t> tokens;
    std::vector<int32_t> targets;
    for (const auto& [j, b] : members) {
        const GroupItem& item = group[j];
        const ChoiceRow& row = item.distinct.rows[b];
        const long from = static_cast<long>(item.shared);
        spans.push_back(DecodeSpan{item.cache, static_cast<int>(item.shared),
                                   static_cast<int>(row.inputs.size() - item.shared)});
        tokens.insert(tokens.end(), row.inputs.begin() + from, row.inputs.end());
        targets.insert(targets.end(), row.targets.begin() + from, row.targets.end());
    }
    m_gen.forward_spans(m_weights, tokens.data(), spans, 0);
    m_gen.row_losses(targets.data(), m_losses.data());
    size_t r = 0;
    for (size_t m = 0; m < members.size(); ++m) {
        for (int i = 0; i < spans[m].length; ++i, ++r)
            if (targets[r] >= 0) group[members[m].first].loglik[members[m].second] -= static_cast<double>(m_losses[r]);
    }
}

void CachedChoiceEvaluator::score_group(std::vector<GroupItem>& group) {
    int cache = 0;
    for (GroupItem& item : group) {
        item.cache = cache;
        cache += static_cast<int>(longest_input(item.distinct));
        item.loglik.assign(item.distinct.rows.size(), 0.0);
    }
    ZT_REQUIRE(cache <= m_gen.context(), "CachedChoiceEvaluator: a group of ", cache,
               " rows exceeds the generator's context of ", m_gen.context());
    score_contexts(group);
    // The branches (rows longer than their shared part), of any of the group's examples, at
    // most max_branches of them and as many rows as a forward takes at a time (a row fits the
    // context, which max_rows is at least).
    const size_t most = static_cast<size_t>(std::min(m_gen.max_rows(), m_gen.logits_rows()));
    std::vector<std::pair<size_t, size_t>> members;
    size_t rows_in = 0;
    for (size_t j = 0; j < group.size(); ++j) {
        for (size_t b = 0; b < group[j].distinct.rows.size(); ++b) {
            const size_t len = group[j].distinct.rows[b].inputs.size() - group[j].shared;
            if (len == 0) continue;
            if (!members.empty() && (rows_in + len > most || members.size() == m_max_branches)) {
                run_branches(group, members);
                members.clear();
                rows_in = 0;
            }
            members.emplace_back(j, b);
            rows_in += len;
        }
    }
    if (!members.empty()) run_branches(group, members);
}

namespace {

std::vector<EndingScore> ending_scores(const ChoiceExample& ex, const ChoiceRows& distinct,
                                       const std::vector<double>& loglik) {
    std::vector<EndingScore> scores(ex.endings.size());
    for (size_t k = 0; k < scores.size(); ++k) {
        scores[k].loglik = loglik[distinct.row_of[k]];
        scores[k].tokens = distinct.rows[distinct.row_of[k]].scored;
        scores[k].chars = ex.ending_chars[k];
    }
    return scores;
}

}  // namespace

std::vector<EndingScore> CachedChoiceEvaluator::example_scores(const ChoiceExample& ex) {
    std::vector<GroupItem> group(1);
    group[0].distinct = distinct_rows(ex, m_gen.config().seq_len, m_bos);
    group[0].shared = shared_prefix(group[0].distinct.rows);
    score_group(group);
    return ending_scores(ex, group[0].distinct, group[0].loglik);
}

ChoiceCounts CachedChoiceEvaluator::evaluate(const ChoiceTask& task, long limit,
                                             std::vector<std::vector<EndingScore>>* items) {
    const long total = static_cast<long>(task.examples.size());
    const long n = limit > 0 ? std::min(limit, total) : total;
    const long world = m_comm.size();
    const long rank = m_comm.rank();
    std::vector<ChoiceRows> distinct(static_cast<size_t>(n));
    std::vector<size_t> shared(distinct.size());
    std::vector<size_t> longest(distinct.size());
    std::vector<size_t> count(distinct.size());
    for (size_t i = 0; i < distinct.size(); ++i) {
        distinct[i] = distinct_rows(task.examples[i], m_gen.config().seq_len, m_bos);
        shared[i] = shared_prefix(distinct[i].rows);
        longest[i] = longest_input(distinct[i]);
        count[i] = distinct[i].rows.size();
    }
    const GroupLimits limits{static_cast<size_t>(m_gen.max_rows()), static_cast<size_t>(m_gen.logits_rows()),
                             static_cast<size_t>(m_gen.context()), m_max_branches};
    const std::vector<long> starts = group_starts(shared, longest, count, limits);
    const long groups = static_cast<long>(starts.size()) - 1;
    // (loglik, tokens) of every ending of every example, set by the rank that scored it and 0
    // on the others: the sum is exact.
    std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
    for (long i = 0; i < n; ++i)
        offset[static_cast<size_t>(i) + 1] = offset[static_cast<size_t>(i)] +
                                             2 * task.examples[static_cast<size_t>(i)].endings.size();
    std::vector<double> sums(offset.back(), 0.0);
    for (long g = groups * rank / world; g < groups * (rank + 1) / world; ++g) {
        const long first = starts[static_cast<size_t>(g)];
        std::vector<GroupItem> group(static_cast<size_t>(starts[static_cast<size_t>(g) + 1] - first));
        for (size_t j = 0; j < group.size(); ++j) {
            group[j].distinct = std::move(distinct[static_cast<size_t>(first) + j]);
            group[j].shared = shared[static_cast<size_t>(first) + j];
        }
        score_group(group);
        for (size_t j = 0; j < group.size(); ++j) {
            const size_t i = static_cast<size_t>(first) + j;
            const std::vector<EndingScore> scores = ending_scores(task.examples[i], group[j].distinct, group[j].loglik);
            for (size_t k = 0; k < scores.size(); ++k) {
                sums[offset[i] + 2 * k] = scores[k].loglik;
                sums[offset[i] + 2 * k + 1] = scores[k].tokens;
            }
        }
    }
    m_comm.all_reduce_scalars(sums.data(), sums.size());
    ChoiceCounts counts;
    std::vector<std::vector<EndingScore>> all(static_cast<size_t>(n));
    for (long i = 0; i < n; ++i) {
        const ChoiceExample& ex = task.examples[static_cast<size_t>(i)];
        std::vector<EndingScore>& scores = all[static_cast<size_t>(i)];
        scores.resize(ex.endings.size());
        for (size_t k = 0; k < scores.size(); ++k) {
            scores[k].loglik = sums[offset[static_cast<size_t>(i)] + 2 * k];
            scores[k].tokens = static_cast<int>(sums[offset[static_cast<size_t>(i)] + 2 * k + 1]);
            scores[k].chars = ex.ending_chars[k];
        }
        score_example(scores, ex.label, counts);
    }
    if (items != nullptr) *items = std::move(all);
    return counts;
}

}  // namespace zt
