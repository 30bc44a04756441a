// Multiple-choice evaluation (HellaSwag-style tasks, data/choice_task.hpp): each candidate
// ending is scored from the model's per-token losses on the ending's tokens only, and an
// example counts as right under three rules (docs/evaluation.md):
//   acc        argmax of the summed log-likelihood (lm-evaluation-harness's acc)
//   acc_norm   argmax of the summed log-likelihood / the ending's length in characters
//              (lm-evaluation-harness's acc_norm)
//   acc_token  argmax of the mean log-likelihood per token (llm.c's reported number)
// Ties go to the first ending (numpy's argmax).
#pragma once

#include <functional>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zt {

class Communicator;
class Generator;
class Transformer;
class UnitStore;
struct ChoiceExample;
struct ChoiceTask;

/// One candidate ending's score: the summed log-likelihood of its (scored) tokens.
struct EndingScore {
    double loglik = 0.0;
    int tokens = 0;  ///< tokens scored (the ending's, after any truncation)
    int chars = 0;   ///< characters of the ending (without the space before it)
};

/// Examples and how many each rule got right.
struct ChoiceCounts {
    long n = 0;
    long acc = 0;
    long acc_norm = 0;
    long acc_token = 0;
    void add(const ChoiceCounts& o);
};

/// Scores one example: adds 1 to n and to each rule whose choice is `label`.
void score_example(const std::vector<EndingScore>& endings, int label, ChoiceCounts& counts);

/// One row of a batch: context + ending, cut from the left of the context to at most
/// seq_len + 1 tokens; `targets` is -1 except at the positions that predict the ending.
struct ChoiceRow {
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;
    int scored = 0;  ///< targets >= 0
};
/// `bos` is put before an empty context so that the ending's first token is predicted.
ChoiceRow choice_row(const ChoiceExample& ex, int ending, int seq_len, uint32_t bos);

/// An example's distinct rows (choice_row's), in ending order, and each ending's row: an
/// ending whose row equals an earlier ending's (a repeated ending, or two the window cuts to
/// the same tokens) shares that row, scored once, so the two tie exactly.
struct ChoiceRows {
    std::vector<ChoiceRow> rows;
    std::vector<int> first_ending;  ///< [row]: the ending it was built for
    std::vector<size_t> row_of;     ///< [ending]: index into rows
};
ChoiceRows distinct_rows(const ChoiceExample& ex, int seq_len, uint32_t bos);

/// The row's summed log-likelihood: minus the sum of `position_losses` (the row's
/// cross-entropy per position, at least row.inputs.size() of them) where a target is set.
double row_loglik(const ChoiceRow& row, const float* position_losses);

/// A forward over B rows of T tokens with their targets, giving the per-position losses
/// (B*T, host memory) as Transformer::position_losses: the model's, or a pipeline's.
using PositionLosses = std::function<const float*(const int32_t* inputs, const int32_t* targets, int B, int T)>;

/// Runs the forward over candidate rows, `max_batch` rows at a time, and scores examples.
/// The rows of the examples evaluated, in example order, make the forwards one rank scoring
/// them all would run; these are split in contiguous blocks over the communicator's ranks,
/// so that every row's score (and so every count) is the same at any world size. Every rank
/// runs the same number of forwards (a sharded forward is collective). An ending whose row
/// equals an earlier ending's of the same example is scored once (the two tie exactly).
class ChoiceEvaluator {
  public:
    ChoiceEvaluator(Transformer& model, UnitStore& store, Communicator& comm, int max_batch, uint32_t bos);
    /// The same over `forward` (rows of at most `seq_len` + 1 tokens).
    ChoiceEvaluator(PositionLosses forward, int seq_len, Communicator& comm, int max_batch, uint32_t bos);

    /// The first `limit` examples (0: all) of `task`, counted over every rank (collective).
    /// With `items`, also those examples' ending scores, in example order, on every rank
    /// (zt-eval --per-item).
    ChoiceCounts evaluate(const ChoiceTask& task, long limit, std::vector<std::vector<EndingScore>>* items = nullptr);

    /// The log-likelihoods of every ending of examples [first, last) on this rank alone
    /// (not collective: for tests and the reference comparison on an unsharded model).
    std::vector<std::vector<EndingScore>> score_examples(const ChoiceTask& task, long first, long last);

  private:
    /// Runs `forwards` forwards from `first_forward` over `rows` (pairs of example and
    /// ending), forward f holding rows [f * max_batch, (f + 1) * max_batch); those from
    /// `end_forward` on run a one-token dummy. Writes each row's (loglik, tokens) into
    /// row_sums[2 * row], row_sums[2 * row + 1].
    void run_forwards(const ChoiceTask& task, const std::vector<std::pair<long, int>>& rows, long first_forward,
                      long end_forward, long forwards, std::vector<double>& row_sums);

    PositionLosses m_forward;
    int m_seq_len;
    Communicator& m_comm;
    int m_max_batch;
    uint32_t m_bos;
};

/// Of the first `limit` examples (0: all) of `task`: the longest row (inputs, choice_row's
/// cut at seq_len), the context a Generator needs to score them; and the longest branch (a
/// distinct row's inputs after what the example's rows share), the logits rows a forward of
/// CachedChoiceEvaluator needs at least.
struct ChoiceExtents {
    int row = 1;
    int branch = 1;
};
ChoiceExtents choice_extents(const ChoiceTask& task, long limit, int seq_len, uint32_t bos);

/// Scores the candidate endings of a model held whole on every rank through its inference
/// path (model/generator.hpp), the same rows as choice_row cuts them: what an example's rows
/// share from their start, up to the first position that predicts an ending token, runs once
/// into the key/value cache; the rest of every distinct row then runs as a branch over that
/// cache. Consecutive examples form a group whose contexts sit side by side in the cache and
/// run in one forward, and whose branches (up to max_branches of them, of any of the group's
/// examples) share the next forwards, of at most the generator's max_rows rows: the products
/// run on many rows even when each example has few. Only each context's last row and the
/// branch rows reach the LM head, and no context is computed twice. The groups are cut from
/// the task's first example whatever the world size and split over the ranks in contiguous
/// blocks, so an example is computed in the same forwards, with the same neighbours, at any
/// world size. The generator's context must hold the longest row.
class CachedChoiceEvaluator {
  public:
    CachedChoiceEvaluator(Generator& gen, UnitStore& weights, Communicator& comm, int max_branches, uint32_t bos);

    /// As ChoiceEvaluator::evaluate (collective).
    ChoiceCounts evaluate(const ChoiceTask& task, long limit, std::vector<std::vector<EndingScore>>* items = nullptr);
    /// One example's ending scores on this rank alone (a group of one).
    std::vector<EndingScore> example_scores(const ChoiceExample& ex);

  private:
    /// An example's distinct rows, what they share, and where it sits in the cache.
    struct GroupItem {
        ChoiceRows distinct;
        size_t shared = 0;
        int cache = 0;
        std::vector<double> loglik;  ///< [distinct row]
    };
    /// Fills each item's loglik: the contexts in one forward, then the branches.
    void score_group(std::vector<GroupItem>& group);
    /// Adds each context's last-row log-likelihoods (the first scored target of rows whose
    /// first scored position is the context's last).
    void score_contexts(std::vector<GroupItem>& group);
    /// Adds the log-likelihood of each member's (item, row) tokens from the item's shared
    /// position on, in one forward of their branches.
    void run_branches(std::vector<GroupItem>& group, const std::vector<std::pair<size_t, size_t>>& members);

    Generator& m_gen;
    UnitStore& m_weights;
    Communicator& m_comm;
    size_t m_max_branches;
    uint32_t m_bos;
    std::vector<float> m_losses;
};

/// The fractions of `counts` as the metrics record and zt-eval's output give them.
std::string choice_summary(const std::string& task, const ChoiceCounts& counts);

}  // namespace zt
