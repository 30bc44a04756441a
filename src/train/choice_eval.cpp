// Multiple-choice evaluation (choice_eval.hpp): rows, forwards, scoring.
#include "ztrain/train/choice_eval.hpp"

#include <algorithm>
#include <cstdio>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/model/transformer.hpp"

namespace zt {

void ChoiceCounts::add(const ChoiceCounts& o) {
    n += o.n;
    acc += o.acc;
    acc_norm += o.acc_norm;
    acc_token += o.acc_token;
}

void score_example(const std::vector<EndingScore>& endings, int label, ChoiceCounts& counts) {
    ZT_REQUIRE(!endings.empty() && label >= 0 && label < static_cast<int>(endings.size()), "label ", label, " of ",
               endings.size(), " endings");
    auto pick = [&](auto value) {
        int best = 0;
        for (int k = 1; k < static_cast<int>(endings.size()); ++k)
            if (value(endings[static_cast<size_t>(k)]) > value(endings[static_cast<size_t>(best)])) best = k;
        return best;
    };
    ++counts.n;
    counts.acc += pick([](const EndingScore& e) { return e.loglik; }) == label;
    counts.acc_norm += pick([](const EndingScore& e) { return e.loglik / std::max(1, e.chars); }) == label;
    counts.acc_token += pick([](const EndingScore& e) { return e.loglik / std::max(1, e.tokens); }) == label;
}

ChoiceRow choice_row(const ChoiceExample& ex, int ending, int seq_len, uint32_t bos) {
    std::vector<uint32_t> seq;
    if (ex.context.empty()) seq.push_back(bos);
    seq.insert(seq.end(), ex.context.begin(), ex.context.end());
    const size_t context = seq.size();
    const std::vector<uint32_t>& end = ex.endings.at(static_cast<size_t>(ending));
    seq.insert(seq.end(), end.begin(), end.end());
    // Too long: the context loses tokens from its left (an ending longer than the window
    // loses its own first tokens too; at least one token stays as context).
    const size_t keep = std::min(seq.size(), static_cast<size_t>(seq_len) + 1);
    const size_t drop = seq.size() - keep;
    ChoiceRow row;
    for (size_t i = drop; i + 1 < seq.size(); ++i) {
        row.inputs.push_back(static_cast<int32_t>(seq[i]));
        const bool predicts_ending = i + 1 >= context;
        row.targets.push_back(predicts_ending ? static_cast<int32_t>(seq[i + 1]) : -1);
        row.scored += predicts_ending;
    }
    return row;
}

ChoiceRows distinct_rows(const ChoiceExample& ex, int seq_len, uint32_t bos) {
    ChoiceRows out;
    for (int k = 0; k < static_cast<int>(ex.endings.size()); ++k) {
        ChoiceRow row = choice_row(ex, k, seq_len, bos);
        size_t same = 0;
        while (same < out.rows.size() &&
               (out.rows[same].inputs != row.inputs || out.rows[same].targets != row.targets))
            ++same;
        out.row_of.push_back(same);
        if (same < out.rows.size()) continue;
        out.rows.push_back(std::move(row));
        out.first_ending.push_back(k);
    }
    return out;
}

double row_loglik(const ChoiceRow& row, const float* position_losses) {
    double sum = 0.0;
    for (size_t t = 0; t < row.targets.size(); ++t)
        if (row.targets[t] >= 0) sum -= static_cast<double>(position_losses[t]);
    return sum;
}

ChoiceEvaluator::ChoiceEvaluator(Transformer& model, UnitStore& store, Communicator& comm, int max_batch,
                                 uint32_t bos)
    : ChoiceEvaluator(
          [&model, &store](const int32_t* inputs, const int32_t* targets, int B, int T) {
              model.forward(store, inputs, targets, B, T, 0.f);
              return model.position_losses().data();
          },
          model.config().seq_len, comm, max_batch, bos) {}

ChoiceEvaluator::ChoiceEvaluator(PositionLosses forward, int seq_len, Communicator& comm, int max_batch,
                                 uint32_t bos)
    : m_forward(std::move(forward)), m_seq_len(seq_len), m_comm(comm), m_max_batch(max_batch), m_bos(bos) {}

namespace {

/// The distinct candidate rows of examples [first, last), in example order, and where each
/// (example, ending) finds its row. An ending whose row equals an earlier ending's of the
/// same example (a repeated ending, or two that the window cuts to the same tokens) shares
/// that row: scored once, the two tie exactly, whichever forward either would have been in.
struct RowPlan {
    std::vector<std::pair<long, int>> rows;  ///< (example, ending) of each distinct row
    std::vector<std::vector<size_t>> row_of;  ///< [example - first][ending]: index into rows
};

RowPlan plan_rows(const ChoiceTask& task, long first, long last, int seq_len, uint32_t bos) {
    RowPlan plan;
    for (long i = first; i < last; ++i) {
        const ChoiceRows ex = distinct_rows(task.examples[static_cast<size_t>(i)], seq_len, bos);
        const size_t base = plan.rows.size();
        for (int k : ex.first_ending) plan.rows.emplace_back(i, k);
        std::vector<size_t>& of = plan.row_of.emplace_back();
        for (size_t r : ex.row_of) of.push_back(base + r);
    }
    return plan;
}

/// Each ending's score from its row's (loglik, tokens) pair in `row_sums`.
std::vector<std::vector<EndingScore>> ending_scores(const ChoiceTask& task, const RowPlan& plan, long first,
                                                    const std::vector<double>& row_sums) {
    std::vector<std::vector<EndingScore>> scores;
    for (size_t e = 0; e < plan.row_of.size(); ++e) {
        const ChoiceExample& ex = task.examples[static_cast<size_t>(first) + e];
        std::vector<EndingScore>& example = scores.emplace_back(plan.row_of[e].size());
        for (size_t k = 0; k < example.size(); ++k) {
            const size_t row = plan.row_of[e][k];
            example[k].loglik = row_sums[2 * row];
            example[k].tokens = static_cast<int>(row_sums[2 * row + 1]);
            example[k].chars = ex.ending_chars[k];
        }
    }
    return scores;
}

}  // namespace

void ChoiceEvaluator::run_forwards(const ChoiceTask& task, const std::vector<std::pair<long, int>>& rows,
                                   long first_forward, long end_forward, long forwards,
                                   std::vector<double>& row_sums) {
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;
    const size_t max_batch = static_cast<size_t>(m_max_batch);
    for (long f = first_forward; f < first_forward + forwards; ++f) {
        const size_t begin = f < end_forward ? static_cast<size_t>(f) * max_batch : rows.size();
        const size_t end = std::min(rows.size(), begin + max_batch);
        std::vector<ChoiceRow> batch;
        for (size_t r = begin; r < end; ++r)
            batch.push_back(choice_row(task.examples[static_cast<size_t>(rows[r].first)], rows[r].second, m_seq_len,
                                       m_bos));
        if (batch.empty()) batch.push_back(ChoiceRow{{0}, {-1}, 0});  // this rank has no rows left
        size_t T = 0;
        for (const ChoiceRow& r : batch) T = std::max(T, r.inputs.size());
        // Padding goes after each row's tokens: causal attention keeps it out of their scores.
        inputs.assign(batch.size() * T, 0);
        targets.assign(batch.size() * T, -1);
        for (size_t b = 0; b < batch.size(); ++b) {
            std::copy(batch[b].inputs.begin(), batch[b].inputs.end(), inputs.begin() + static_cast<long>(b * T));
            std::copy(batch[b].targets.begin(), batch[b].targets.end(), targets.begin() + static_cast<long>(b * T));
        }
        const float* losses = m_forward(inputs.data(), targets.data(), static_cast<int>(batch.size()),
                                        static_cast<int>(T));
        for (size_t r = begin; r < end; ++r) {
            row_sums[2 * r] = row_loglik(batch[r - begin], losses + (r - begin) * T);
            row_sums[2 * r + 1] = batch[r - begin].scored;
        }
    }
}

std::vector<std::vector<EndingScore>> ChoiceEvaluator::score_examples(const ChoiceTask& task, long first, long last) {
    const RowPlan plan = plan_rows(task, first, last, m_seq_len, m_bos);
    const long forwards = (static_cast<long>(plan.rows.size()) + m_max_batch - 1) / m_max_batch;
    std::vector<double> row_sums(2 * plan.rows.size(), 0.0);
    run_forwards(task, plan.rows, 0, forwards, forwards, row_sums);
    return ending_scores(task, plan, first, row_sums);
}

ChoiceCounts ChoiceEvaluator::evaluate(const ChoiceTask& task, long limit,
                                       std::vector<std::vector<EndingScore>>* items) {
    const long total = static_cast<long>(task.examples.size());
    const long n = limit > 0 ? std::min(limit, total) : total;
    // The forwards are those of one rank scoring every row (the same rows in the same
    // batches at any world size, so the same numbers), split over the ranks in contiguous
    // blocks; every rank runs as many as the largest block (a sharded forward is collective).
    const RowPlan plan = plan_rows(task, 0, n, m_seq_len, m_bos);
    const long forwards = (static_cast<long>(plan.rows.size()) + m_max_batch - 1) / m_max_batch;
    const long world = m_comm.size();
    const long rank = m_comm.rank();
    std::vector<double> row_sums(2 * plan.rows.size(), 0.0);
    run_forwards(task, plan.rows, forwards * rank / world, forwards * (rank + 1) / world, (forwards + world - 1) / world,
                 row_sums);
    // Each row's pair is set on one rank and 0 on the others: the sum is exact.
    m_comm.all_reduce_scalars(row_sums.data(), row_sums.size());
    std::vector<std::vector<EndingScore>> scores = ending_scores(task, plan, 0, row_sums);
    ChoiceCounts counts;
    for (long i = 0; i < n; ++i)
        score_example(scores[static_cast<size_t>(i)], task.examples[static_cast<size_t>(i)].label, counts);
    if (items != nullptr) *items = std::move(scores);
    return counts;
}

std::string choice_summary(const std::string& task, const ChoiceCounts& c) {
    const double n = static_cast<double>(std::max(1L, c.n));
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s: n %ld  acc %.4f  acc_norm %.4f  acc_token %.4f", task.c_str(), c.n,
                  static_cast<double>(c.acc) / n, static_cast<double>(c.acc_norm) / n,
                  static_cast<double>(c.acc_token) / n);
    return buf;
}

}  // namespace zt
