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

class StageTraining;
class StepReporter;
class Tokenizer;
class Transformer;
class UnitStore;
struct ChoiceTask;
struct TrainSetup;

/// Writes the logits (host memory, cfg.padded_vocab() floats) of the last of the T tokens at
/// `window`, after a forward over them.
using NextLogits = std::function<void(const int32_t* window, int T, float* row)>;
/// Samples `n` tokens after the tokens of `prompt` (the last seq_len of the context are seen)
/// with temperature 1 and top-k 40, from a counter-based generator keyed by (seed, step):
/// every rank draws the same. Ends early after a sampled `stop` token (which is returned).
/// `next`: the forward (StageTraining::next_logits).
std::vector<uint32_t> generate(const NextLogits& next, const ModelConfig& mc, const std::vector<uint32_t>& prompt,
                               int n, uint64_t seed, long step, std::optional<uint32_t> stop);
/// Tokens as text: decoded with the tokenizer where there is one (null: the ids).
std::string sample_text(const Tokenizer* tokenizer, const std::vector<uint32_t>& toks);

struct Evaluation {
    double val_loss = 0.0;
    std::optional<std::string> sample;  ///< when train.sample_tokens > 0
};

/// The evaluations of a run, through the model in training (stage_training.hpp), whatever
/// the mesh.
class Evaluator {
  public:
    /// The validation data, the tokenizer (null: samples are shown as token ids) and the
    /// example shards (the sample answers the first validation example's prompt) are
    /// `setup`'s; without validation data evaluate() does nothing.
    Evaluator(const TrainConfig& tc, StageTraining& training, const TrainSetup& setup, StepReporter& reporter);

    /// The multiple-choice tasks to evaluate on eval.every's schedule (`tasks` outlives this).
    void set_tasks(const std::vector<ChoiceTask>& tasks, const EvalConfig& ec);

    /// A fresh run's evaluation before its first step: the validation loss when
    /// train.eval_every > 0, the tasks when eval.every > 0.
    std::optional<Evaluation> evaluate_at_start();

    /// Evaluates every task and reports an eval record each when `done` steps are on the
    /// schedule: a multiple of eval.every (step 0 included), or train.max_steps (collective).
    void evaluate_tasks(long done);

    /// Evaluates after `step` steps and reports it (collective); nothing without data.val.
    std::optional<Evaluation> evaluate(long step);

  private:
    const TrainConfig& m_tc;
    StageTraining& m_training;
    const TrainSetup& m_setup;
    StepReporter& m_reporter;
    const std::vector<ChoiceTask>* m_tasks = nullptr;
    EvalConfig m_eval;
    ChoiceEvaluator m_choice;
};

}  // namespace zt
