#include "ztrain/train/evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/stage_training.hpp"
#include "ztrain/train/step_reporter.hpp"
#include "ztrain/train/train_setup.hpp"

namespace zt {

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

Evaluator::Evaluator(const TrainConfig& tc, StageTraining& training, const TrainSetup& setup, StepReporter& reporter)
    : m_tc(tc),
      m_training(training),
      m_setup(setup),
      m_reporter(reporter),
      m_choice([&training](const int32_t* inputs, const int32_t* targets, int B, int T) {
                   return training.position_losses(inputs, targets, B, T);
               },
               training.model().config().seq_len, setup.data(), tc.micro_batch,
               setup.tokenizer ? setup.tokenizer->eot() : 0) {}

void Evaluator::set_tasks(const std::vector<ChoiceTask>& tasks, const EvalConfig& ec) {
    m_tasks = &tasks;
    m_eval = ec;
}

std::optional<Evaluation> Evaluator::evaluate_at_start() {
    std::optional<Evaluation> ev = m_tc.eval_every > 0 ? evaluate(0) : std::nullopt;
    evaluate_tasks(0);
    return ev;
}

void Evaluator::evaluate_tasks(long done) {
    if (m_tasks == nullptr || m_tasks->empty()) return;
    if (!((m_eval.every > 0 && done % m_eval.every == 0) || done == m_tc.max_steps)) return;
    for (const ChoiceTask& task : *m_tasks) {
        m_reporter.choice_eval(done, task.name, m_choice.evaluate(task, m_eval.limit));
    }
    std::fflush(stdout);
}

std::optional<Evaluation> Evaluator::evaluate(long step) {
    if (!m_setup.has_validation()) return std::nullopt;
    Evaluation ev;
    const TokenCorpora* val = m_setup.val_data.get();
    if (val != nullptr && val->weighted()) {
        // Each corpus on its own leading windows; the loss is their mean under data.val's weights.
        CorpusLosses by_corpus;
        for (size_t c = 0; c < val->size(); ++c) {
            by_corpus.emplace_back(val->spec(c).pattern, m_training.val_loss(c));
            ev.val_loss += val->spec(c).weight * by_corpus.back().second;
        }
        m_reporter.val_loss(step, ev.val_loss, by_corpus);
    } else {
        ev.val_loss = m_training.val_loss(0);
        m_reporter.val_loss(step, ev.val_loss);
    }
    if (m_tc.sample_tokens > 0) {
        // Every rank generates (the same tokens, from the same counter-based draws): with
        // sharded parameters or stages each forward is collective. Only rank 0 prints. On
        // examples the sample answers the first validation example's prompt (a chat's
        // rendered user turn and assistant header) and stops at the token that ends its
        // first answer.
        const Tokenizer* tokenizer = m_setup.tokenizer.get();
        std::vector<uint32_t> prompt{tokenizer ? tokenizer->eot() : 0};
        std::optional<uint32_t> stop;
        std::string text;
        if (m_setup.examples && m_setup.examples->val()) {
            const SamplePrompt sp = m_setup.examples->sample_prompt();
            prompt = sp.prompt;
            stop = sp.stop;
            text = sample_text(tokenizer, prompt);
        }
        const NextLogits next = [this](const int32_t* window, int T, float* row) {
            m_training.next_logits(window, T, row);
        };
        text += sample_text(tokenizer, generate(next, m_training.model().config(), prompt, m_tc.sample_tokens,
                                                m_tc.seed, step, stop));
        m_reporter.sample(step, text);
        ev.sample = text;
    }
    std::fflush(stdout);
    return ev;
}

}  // namespace zt
