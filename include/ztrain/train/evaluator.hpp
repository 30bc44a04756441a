// Evaluation during training: the validation loss over the same leading windows of
// data.val every time (no shuffle, split over ranks), and a sample generated from the
// current weights. Both are collective (a ZeRO-3 forward gathers parameters), so every rank
// evaluates; the reporter prints on rank 0. Also the multiple-choice tasks of eval.tasks
// (choice_eval.hpp), on eval.every's schedule. Not here: when to evaluate the validation
// loss (the trainer).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/train/choice_eval.hpp"

namespace zt {

class BatchSampler;
class ExampleFeed;
class Communicator;
class Transformer;
class StepReporter;
class Tokenizer;
struct ChoiceTask;
class UnitStore;

/// Samples `n` tokens after `start_token` from the current weights, with temperature 1 and
/// top-k 40, from a counter-based generator keyed by (seed, step): every rank draws the same.
std::vector<uint32_t> generate(Transformer& model, UnitStore& store, uint32_t start_token, int n, uint64_t seed, long step);
/// The same after the tokens of `prompt` (the last seq_len of the context are seen), ending
/// early after a sampled `stop` token (which is returned).
std::vector<uint32_t> generate(Transformer& model, UnitStore& store, const std::vector<uint32_t>& prompt, int n,
                               uint64_t seed, long step, std::optional<uint32_t> stop);
/// Writes the logits (host memory, cfg.padded_vocab() floats) of the last of the T tokens at
/// `window`, after a forward over them.
using NextLogits = std::function<void(const int32_t* window, int T, float* row)>;
/// The same, with the forward `next` (a pipeline's, whose last stage has the logits).
std::vector<uint32_t> generate(const NextLogits& next, const ModelConfig& mc, const std::vector<uint32_t>& prompt,
                               int n, uint64_t seed, long step, std::optional<uint32_t> stop);
/// Tokens as text: decoded with the tokenizer where there is one (null: the ids).
std::string sample_text(const Tokenizer* tokenizer, const std::vector<uint32_t>& toks);

/// Evaluates every task of `tasks` with `choice` and reports an eval record each when `done`
/// steps are on the schedule: a multiple of eval.every (step 0 included), or train.max_steps
/// (collective). Evaluator::evaluate_tasks, and a pipeline run's.
void evaluate_tasks_due(ChoiceEvaluator& choice, const std::vector<ChoiceTask>& tasks, const EvalConfig& ec,
                        const TrainConfig& tc, long done, StepReporter& reporter);

struct Evaluation {
    double val_loss = 0.0;
    std::optional<std::string> sample;  ///< when train.sample_tokens > 0
};

class Evaluator {
  public:
    /// `val_sampler` null: no validation data, evaluate() does nothing. `tokenizer` null:
    /// samples are shown as token ids.
    Evaluator(const TrainConfig& tc, Transformer& model, UnitStore& store, Communicator& comm, BatchSampler* val_sampler,
              const Tokenizer* tokenizer, StepReporter& reporter);

    /// The multiple-choice tasks to evaluate on eval.every's schedule (`tasks` outlives this).
    void set_tasks(const std::vector<ChoiceTask>& tasks, const EvalConfig& ec);
    /// Validate on the feed's validation examples (when it has them): the masked loss, the
    /// sum over every target by their count over all ranks.
    void use_examples(ExampleFeed* feed) { m_examples = feed; }

    /// A fresh run's evaluation before its first step: the validation loss when
    /// train.eval_every > 0, the tasks when eval.every > 0.
    std::optional<Evaluation> evaluate_at_start();

    /// Evaluates every task and reports an eval record each when `done` steps are on the
    /// schedule: a multiple of eval.every (step 0 included), or train.max_steps (collective).
    void evaluate_tasks(long done);

    /// Evaluates after `step` steps and reports it (collective); nothing without data.val.
    std::optional<Evaluation> evaluate(long step);

  private:
    /// The mean loss over the leading validation windows (pretraining shards).
    double window_val_loss();
    /// The masked loss over the leading validation rows (example shards).
    double example_val_loss();

    const TrainConfig& m_tc;
    Transformer& m_model;
    UnitStore& m_store;
    Communicator& m_comm;
    BatchSampler* m_val_sampler;
    ExampleFeed* m_examples = nullptr;
    const Tokenizer* m_tokenizer;
    StepReporter& m_reporter;
    std::vector<int32_t> m_inputs;
    std::vector<int32_t> m_targets;
    const std::vector<ChoiceTask>* m_tasks = nullptr;
    EvalConfig m_eval;
    ChoiceEvaluator m_choice;
};

}  // namespace zt
