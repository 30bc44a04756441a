// Multiple-choice scoring through the inference path (choice_eval.hpp, CachedChoiceEvaluator):
// an example's shared context once into the key/value cache, its endings as branches over it.
#include <algorithm>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/train/choice_eval.hpp"

namespace zt {

int longest_choice_row(const ChoiceTask& task, long limit, int seq_len, uint32_t bos) {
    const long total = static_cast<long>(task.examples.size());
    const long n = limit > 0 ? std::min(limit, total) : total;
    size_t longest = 1;
    for (long i = 0; i < n; ++i) {
        const ChoiceExample& ex = task.examples[static_cast<size_t>(i)];
        for (int k = 0; k < static_cast<int>(ex.endings.size()); ++k)
            longest = std::max(longest, choice_row(ex, k, seq_len, bos).inputs.size());
    }
    return static_cast<int>(longest);
}

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

}  // namespace

void CachedChoiceEvaluator::run_branches(const std::vector<ChoiceRow>& rows, const std::vector<size_t>& members,
                                         size_t shared, std::vector<double>& loglik) {
    std::vector<int> lengths;
    std::vector<int32_t> tokens;
    std::vector<int32_t> targets;
    for (size_t b : members) {
        const ChoiceRow& row = rows[b];
        lengths.push_back(static_cast<int>(row.inputs.size() - shared));
        tokens.insert(tokens.end(), row.inputs.begin() + static_cast<long>(shared), row.inputs.end());
        targets.insert(targets.end(), row.targets.begin() + static_cast<long>(shared), row.targets.end());
    }
    m_gen.forward_branches(m_weights, tokens.data(), lengths);
    m_gen.row_losses(targets.data(), m_losses.data());
    size_t r = 0;
    for (size_t m = 0; m < members.size(); ++m) {
        for (int i = 0; i < lengths[m]; ++i, ++r)
            if (targets[r] >= 0) loglik[members[m]] -= static_cast<double>(m_losses[r]);
    }
}

std::vector<EndingScore> CachedChoiceEvaluator::example_scores(const ChoiceExample& ex) {
    const ChoiceRows distinct = distinct_rows(ex, m_gen.config().seq_len, m_bos);
    const std::vector<ChoiceRow>& rows = distinct.rows;
    const std::vector<size_t>& row_of = distinct.row_of;
    std::vector<double> loglik(rows.size(), 0.0);
    const size_t shared = shared_prefix(rows);
    m_gen.reset();
    if (shared > 0) {
        m_gen.forward(m_weights, rows.front().inputs.data(), static_cast<int>(shared), 1);
        std::vector<int32_t> target(1);
        for (size_t b = 0; b < rows.size(); ++b) {
            target[0] = rows[b].targets[shared - 1];
            if (target[0] < 0) continue;
            m_gen.row_losses(target.data(), m_losses.data());
            loglik[b] -= static_cast<double>(m_losses[0]);
        }
    }
    // The branches (rows longer than the shared part), at most max_branches of them and as
    // many rows as a forward takes at a time (a row fits the context, which max_rows is at
    // least).
    const size_t most = static_cast<size_t>(std::min(m_gen.max_rows(), m_gen.logits_rows()));
    std::vector<size_t> members;
    size_t rows_in = 0;
    for (size_t b = 0; b < rows.size(); ++b) {
        const size_t len = rows[b].inputs.size() - shared;
        if (len == 0) continue;
        if (!members.empty() && (rows_in + len > most || members.size() == m_max_branches)) {
            run_branches(rows, members, shared, loglik);
            members.clear();
            rows_in = 0;
        }
        members.push_back(b);
        rows_in += len;
    }
    if (!members.empty()) run_branches(rows, members, shared, loglik);
    std::vector<EndingScore> scores(ex.endings.size());
    for (size_t k = 0; k < scores.size(); ++k) {
        scores[k].loglik = loglik[row_of[k]];
        scores[k].tokens = rows[row_of[k]].scored;
        scores[k].chars = ex.ending_chars[k];
    }
    return scores;
}

ChoiceCounts CachedChoiceEvaluator::evaluate(const ChoiceTask& task, long limit,
                                             std::vector<std::vector<EndingScore>>* items) {
    const long total = static_cast<long>(task.examples.size());
    const long n = limit > 0 ? std::min(limit, total) : total;
    const long world = m_comm.size();
    const long rank = m_comm.rank();
    // (loglik, tokens) of every ending of every example, set by the rank that scored it and 0
    // on the others: the sum is exact.
    std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
    for (long i = 0; i < n; ++i)
        offset[static_cast<size_t>(i) + 1] = offset[static_cast<size_t>(i)] +
                                             2 * task.examples[static_cast<size_t>(i)].endings.size();
    std::vector<double> sums(offset.back(), 0.0);
    for (long i = n * rank / world; i < n * (rank + 1) / world; ++i) {
        const std::vector<EndingScore> scores = example_scores(task.examples[static_cast<size_t>(i)]);
        for (size_t k = 0; k < scores.size(); ++k) {
            sums[offset[static_cast<size_t>(i)] + 2 * k] = scores[k].loglik;
            sums[offset[static_cast<size_t>(i)] + 2 * k + 1] = scores[k].tokens;
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
