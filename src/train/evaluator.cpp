#include "ztrain/train/evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/step_reporter.hpp"

namespace zt {

std::vector<uint32_t> generate(Transformer& model, UnitStore& store, uint32_t start_token, int n, uint64_t seed, long step) {
    return generate(model, store, std::vector<uint32_t>{start_token}, n, seed, step, std::nullopt);
}

std::vector<uint32_t> generate(Transformer& model, UnitStore& store, const std::vector<uint32_t>& prompt, int n,
                               uint64_t seed, long step, std::optional<uint32_t> stop) {
    const NextLogits next = [&](const int32_t* window, int T, float* row) {
        model.forward(store, window, nullptr, 1, T, 0.f);
        model.logits_row_to_host(T - 1, row);
    };
    return generate(next, model.config(), prompt, n, seed, step, stop);
}

std::vector<uint32_t> generate(const NextLogits& next, const ModelConfig& mc, const std::vector<uint32_t>& prompt,
                               int n, uint64_t seed, long step, std::optional<uint32_t> stop) {
    const int V = mc.vocab_size;
    const int Vp = mc.padded_vocab();
    std::vector<int32_t> ctx(prompt.begin(), prompt.end());
    std::vector<uint32_t> out;
    std::vector<std::pair<float, int>> cand(static_cast<size_t>(V));
    std::vector<float> row(static_cast<size_t>(Vp));  // host copy: logits may be device memory
    const int top_k = std::min(40, V);
    for (int i = 0; i < n; ++i) {
        const int T = static_cast<int>(std::min<size_t>(ctx.size(), static_cast<size_t>(mc.seq_len)));
        const int32_t* window = ctx.data() + (ctx.size() - static_cast<size_t>(T));
        next(window, T, row.data());
        for (int v = 0; v < V; ++v) cand[static_cast<size_t>(v)] = {row[static_cast<size_t>(v)], v};
        std::partial_sort(cand.begin(), cand.begin() + top_k, cand.end(),
                          [](const auto& a, const auto& b) { return a.first > b.first; });
        double total = 0.0;
        std::vector<double> p(static_cast<size_t>(top_k));
        for (int k = 0; k < top_k; ++k) {
            p[static_cast<size_t>(k)] = std::exp(static_cast<double>(cand[static_cast<size_t>(k)].first - cand[0].first));
            total += p[static_cast<size_t>(k)];
        }
        double u = total * random_uniform(seed, static_cast<uint64_t>(RandomStream::kSample),
                                          static_cast<uint64_t>(step) * 1000003ull + static_cast<uint64_t>(i));
        int pick = top_k - 1;
        for (int k = 0; k < top_k; ++k) {
            u -= p[static_cast<size_t>(k)];
            if (u <= 0) {
                pick = k;
                break;
            }
        }
        const int token = cand[static_cast<size_t>(pick)].second;
        ctx.push_back(token);
        out.push_back(static_cast<uint32_t>(token));
        if (stop && static_cast<uint32_t>(token) == *stop) break;
    }
    return out;
}

// An id beyond the tokenizer's vocabulary, possible when the model's is larger, shows as
// <id>: a sample never fails a run.
std::string sample_text(const Tokenizer* tokenizer, const std::vector<uint32_t>& toks) {
    std::string text;
    if (tokenizer == nullptr) {
        for (uint32_t t : toks) text += str(t, " ");
        return text;
    }
    const uint32_t known = static_cast<uint32_t>(tokenizer->vocab_size());
    std::vector<uint32_t> run;
    for (uint32_t t : toks) {
        if (t < known) {
            run.push_back(t);
            continue;
        }
        text += tokenizer->decode(run) + str("<", t, ">");
        run.clear();
    }
    return text + tokenizer->decode(run);
}

Evaluator::Evaluator(const TrainConfig& tc, Transformer& model, UnitStore& store, Communicator& comm,
                     BatchSampler* val_sampler, const Tokenizer* tokenizer, StepReporter& reporter)
    : m_tc(tc),
      m_model(model),
      m_store(store),
      m_comm(comm),
      m_val_sampler(val_sampler),
      m_tokenizer(tokenizer),
      m_reporter(reporter),
      m_inputs(static_cast<size_t>(tc.micro_batch) * static_cast<size_t>(model.config().seq_len)),
      m_targets(m_inputs.size()),
      m_choice(model, store, comm, tc.micro_batch, tokenizer ? tokenizer->eot() : 0) {}

void Evaluator::set_tasks(const std::vector<ChoiceTask>& tasks, const EvalConfig& ec) {
    m_tasks = &tasks;
    m_eval = ec;
}

std::optional<Evaluation> Evaluator::evaluate_at_start() {
    std::optional<Evaluation> ev = m_tc.eval_every > 0 ? evaluate(0) : std::nullopt;
    evaluate_tasks(0);
    return ev;
}

void evaluate_tasks_due(ChoiceEvaluator& choice, const std::vector<ChoiceTask>& tasks, const EvalConfig& ec,
                        const TrainConfig& tc, long done, StepReporter& reporter) {
    if (tasks.empty()) return;
    if (!((ec.every > 0 && done % ec.every == 0) || done == tc.max_steps)) return;
    for (const ChoiceTask& task : tasks) reporter.choice_eval(done, task.name, choice.evaluate(task, ec.limit));
    std::fflush(stdout);
}

void Evaluator::evaluate_tasks(long done) {
    if (m_tasks) evaluate_tasks_due(m_choice, *m_tasks, m_eval, m_tc, done, m_reporter);
}

double Evaluator::window_val_loss() {
    const int B = m_tc.micro_batch;
    const int T = m_model.config().seq_len;
    const int rank = m_comm.rank();
    const int world = m_comm.size();
    // Validation covers the same leading windows every time (no shuffle), split over ranks.
    const long per_rank = static_cast<long>(m_tc.eval_batches) * B;
    double sum = 0.0;
    for (int e = 0; e < m_tc.eval_batches; ++e) {
        const uint64_t first = static_cast<uint64_t>(rank * per_rank + e * B);
        m_val_sampler->fill(first, B, m_inputs.data(), m_targets.data());
        sum += m_model.forward(m_store, m_inputs.data(), m_targets.data(), B, T, 0.f);
    }
    m_comm.all_reduce_scalars(&sum, 1);
    return sum / (static_cast<double>(m_tc.eval_batches) * world);
}

double Evaluator::example_val_loss() {
    // The same leading validation rows every time, split over ranks; prompts never count.
    const auto [sum, targets] = m_examples->val_sums(m_model, m_store, m_tc, m_comm.rank());
    double v[2] = {sum, static_cast<double>(targets)};
    m_comm.all_reduce_scalars(v, 2);
    return v[1] > 0 ? v[0] / v[1] : 0.0;
}

std::optional<Evaluation> Evaluator::evaluate(long step) {
    const bool on_examples = m_examples != nullptr && m_examples->val() != nullptr;
    if (!m_val_sampler && !on_examples) return std::nullopt;
    Evaluation ev;
    ev.val_loss = on_examples ? example_val_loss() : window_val_loss();
    m_reporter.val_loss(step, ev.val_loss);
    if (m_tc.sample_tokens > 0) {
        // Every rank generates (the same tokens, from the same counter-based draws): with
        // sharded parameters each forward is collective. Only rank 0 prints. On examples the
        // sample answers the first validation example's prompt (a chat's rendered user turn
        // and assistant header) and stops at the token that ends its first answer.
        std::vector<uint32_t> prompt{m_tokenizer ? m_tokenizer->eot() : 0};
        std::optional<uint32_t> stop;
        std::string text;
        if (on_examples) {
            const SamplePrompt sp = m_examples->sample_prompt();
            prompt = sp.prompt;
            stop = sp.stop;
            text = sample_text(m_tokenizer, prompt);
        }
        text += sample_text(m_tokenizer, generate(m_model, m_store, prompt, m_tc.sample_tokens, m_tc.seed, step, stop));
        m_reporter.sample(step, text);
        ev.sample = text;
    }
    std::fflush(stdout);
    return ev;
}

}  // namespace zt
