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

void ChoiceEvaluator::run_rows(const ChoiceTask& task, const std::vector<std::pair<long, int>>& rows, long forwards,
                               std::vector<std::vector<EndingScore>>& scores, long first) {
    const int seq_len = m_seq_len;
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;
    size_t next = 0;
    for (long f = 0; f < forwards; ++f) {
        std::vector<ChoiceRow> batch;
        const size_t begin = next;
        while (next < rows.size() && batch.size() < static_cast<size_t>(m_max_batch)) {
            const auto [ex, k] = rows[next++];
            batch.push_back(choice_row(task.examples[static_cast<size_t>(ex)], k, seq_len, m_bos));
        }
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
        for (size_t b = 0; b < batch.size() && begin + b < next; ++b) {
            const auto [ex, k] = rows[begin + b];
            EndingScore& s = scores[static_cast<size_t>(ex - first)][static_cast<size_t>(k)];
            s.loglik = row_loglik(batch[b], losses + b * T);
            s.tokens = batch[b].scored;
            s.chars = task.examples[static_cast<size_t>(ex)].ending_chars[static_cast<size_t>(k)];
        }
    }
}

namespace {
long rows_of(const ChoiceTask& task, long first, long last) {
    long n = 0;
    for (long i = first; i < last; ++i) n += static_cast<long>(task.examples[static_cast<size_t>(i)].endings.size());
    return n;
}

/// The (example, ending) rows of examples [first, last), and a score slot for each.
void list_rows(const ChoiceTask& task, long first, long last, std::vector<std::pair<long, int>>& rows,
               std::vector<std::vector<EndingScore>>& scores) {
    for (long i = first; i < last; ++i) {
        const size_t n = task.examples[static_cast<size_t>(i)].endings.size();
        scores.emplace_back(n);
        for (size_t k = 0; k < n; ++k) rows.emplace_back(i, static_cast<int>(k));
    }
}
}  // namespace

std::vector<std::vector<EndingScore>> ChoiceEvaluator::score_examples(const ChoiceTask& task, long first, long last) {
    std::vector<std::pair<long, int>> rows;
    std::vector<std::vector<EndingScore>> scores;
    list_rows(task, first, last, rows, scores);
    const long forwards = (static_cast<long>(rows.size()) + m_max_batch - 1) / m_max_batch;
    run_rows(task, rows, forwards, scores, first);
    return scores;
}

ChoiceCounts ChoiceEvaluator::evaluate(const ChoiceTask& task, long limit) {
    const long total = static_cast<long>(task.examples.size());
    const long n = limit > 0 ? std::min(limit, total) : total;
    const long world = m_comm.size();
    auto block_start = [&](long r) { return n * r / world; };
    // Every rank holds the task, so each knows every rank's row count: the number of
    // forwards all run is the largest, with no collective to agree on it.
    long forwards = 0;
    for (long r = 0; r < world; ++r)
        forwards = std::max(forwards, (rows_of(task, block_start(r), block_start(r + 1)) + m_max_batch - 1) / m_max_batch);
    const long first = block_start(m_comm.rank());
    const long last = block_start(m_comm.rank() + 1);
    std::vector<std::pair<long, int>> rows;
    std::vector<std::vector<EndingScore>> scores;
    list_rows(task, first, last, rows, scores);
    run_rows(task, rows, forwards, scores, first);
    ChoiceCounts local;
    for (long i = first; i < last; ++i)
        score_example(scores[static_cast<size_t>(i - first)], task.examples[static_cast<size_t>(i)].label, local);
    double sums[4] = {static_cast<double>(local.n), static_cast<double>(local.acc),
                      static_cast<double>(local.acc_norm), static_cast<double>(local.acc_token)};
    m_comm.all_reduce_scalars(sums, 4);
    ChoiceCounts all;
    all.n = static_cast<long>(sums[0]);
    all.acc = static_cast<long>(sums[1]);
    all.acc_norm = static_cast<long>(sums[2]);
    all.acc_token = static_cast<long>(sums[3]);
    return all;
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
