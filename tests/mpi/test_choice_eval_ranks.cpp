// Multiple-choice evaluation across ranks: examples split over the ranks, counts summed,
// give the counts of one rank scoring every example (np 1), at ZeRO stages 0 and 3 (a
// sharded forward is collective, so every rank must run the same number of forwards); every
// ending's score is one rank's, whatever a forward's shape does to its rounding; and the
// in-loop record {"event":"eval",...} of a training run carries the same counts.
#include <gtest/gtest.h>
#include <mpi.h>

#include "mpi_training.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/choice_eval.hpp"

namespace zt {
namespace {

const std::string kTinyTask = std::string(ZT_SOURCE_DIR) + "/inputs/tasks/tiny_choice.jsonl";

ModelConfig eval_model() { return test::model_config(2, 2, 24, 48, 257, 8); }

/// The counts of one rank scoring examples [0, limit) alone, from the weights of `seed`.
ChoiceCounts one_rank_counts(const ChoiceTask& task, long limit, uint64_t seed) {
    auto backend = make_cpu_backend(1);
    Transformer model(eval_model(), *backend, 4);
    ModelState state(model.layout(), *backend, seed);
    ChoiceEvaluator ev(model, state, self_communicator(), 4, 256);
    const auto scores = ev.score_examples(task, 0, limit);
    ChoiceCounts c;
    for (long i = 0; i < limit; ++i) score_example(scores[static_cast<size_t>(i)], task.examples[static_cast<size_t>(i)].label, c);
    return c;
}

void expect_same_counts(const ChoiceCounts& got, const ChoiceCounts& want, const std::string& what) {
    EXPECT_EQ(got.n, want.n) << what;
    EXPECT_EQ(got.acc, want.acc) << what;
    EXPECT_EQ(got.acc_norm, want.acc_norm) << what;
    EXPECT_EQ(got.acc_token, want.acc_token) << what;
}

TEST(ChoiceEvalRanks, CountsEqualOneRanksAtStages0And3) {
    auto tok = make_byte_tokenizer();
    const ChoiceTask task = read_choice_task(kTinyTask, *tok);
    // 30 examples: not a multiple of 4, so at np 4 the ranks hold 7 or 8 (unequal forwards).
    const ChoiceCounts want = one_rank_counts(task, 30, 11);
    auto backend = make_cpu_backend(1);
    auto comm = make_mpi_communicator(MPI_COMM_WORLD);
    for (int stage : {0, 3}) {
        Transformer model(eval_model(), *backend, 3);
        ModelState state(model.layout(), *backend, *comm,
                         StateOptions::zero(stage).with_buckets(1 << 16).with_seed(11));
        ChoiceEvaluator ev(model, state, *comm, 3, tok->eot());
        expect_same_counts(ev.evaluate(task, 30), want, "stage " + std::to_string(stage));
    }
}

// Every ending's score at any world size is one rank's (the same rows in the same forwards),
// even where a forward's rounding depends on its shape: here each loss carries a trace of B,
// T and the row's place. 30 examples: the ranks' blocks of rows are unequal.
TEST(ChoiceEvalRanks, EveryEndingScoresAsAtOneRankWhateverTheForwardsShape) {
    std::vector<float> losses;
    const PositionLosses shaped = [&losses](const int32_t* inputs, const int32_t*, int B, int T) {
        losses.resize(static_cast<size_t>(B) * static_cast<size_t>(T));
        for (size_t i = 0; i < losses.size(); ++i) {
            const size_t place = i / static_cast<size_t>(T);
            losses[i] = 0.01f * static_cast<float>(inputs[i] % 17) + 1e-4f * static_cast<float>(B) +
                        1e-5f * static_cast<float>(T) + 1e-6f * static_cast<float>(place);
        }
        return losses.data();
    };
    auto tok = make_byte_tokenizer();
    const ChoiceTask task = read_choice_task(kTinyTask, *tok);
    auto comm = make_mpi_communicator(MPI_COMM_WORLD);
    for (int batch : {1, 3, 8}) {
        ChoiceEvaluator alone(shaped, 48, self_communicator(), batch, tok->eot());
        ChoiceEvaluator all(shaped, 48, *comm, batch, tok->eot());
        std::vector<std::vector<EndingScore>> want;
        std::vector<std::vector<EndingScore>> got;
        const ChoiceCounts want_counts = alone.evaluate(task, 30, &want);
        expect_same_counts(all.evaluate(task, 30, &got), want_counts, "batch " + std::to_string(batch));
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i].size(), want[i].size());
            for (size_t k = 0; k < got[i].size(); ++k) {
                EXPECT_EQ(got[i][k].loglik, want[i][k].loglik) << "batch " << batch << " example " << i << " ending " << k;
                EXPECT_EQ(got[i][k].tokens, want[i][k].tokens) << "batch " << batch << " example " << i;
                EXPECT_EQ(got[i][k].chars, want[i][k].chars) << "batch " << batch << " example " << i;
            }
        }
    }
}

TEST(ChoiceEvalRanks, TrainingRunRecordsTheCountsOfEveryTask) {
    test::SharedDir dir("choice_eval_run");
    if (test::world_rank() == 0) {
        test::write_random_shard(dir.file("train.bin"), 4096, 256);
        make_byte_tokenizer()->save(dir.path());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    Config c = test::tiny_mpi_config(dir.file("train.bin"), dir.file("run"));
    c.model = eval_model();
    c.train.max_steps = 2;
    c.train.seed = 5;
    c.eval.tasks = kTinyTask + "," + kTinyTask;
    c.eval.every = 2;
    c.eval.limit = 13;
    c.run.tensorboard = false;
    train(c, TrainOptions{});
    if (test::world_rank() != 0) return;
    auto tok = make_byte_tokenizer();
    const ChoiceCounts want = one_rank_counts(read_choice_task(kTinyTask, *tok), 13, 5);
    int at_start = 0;
    std::vector<long> steps;
    for (const nlohmann::json& r : test::read_jsonl(dir.file("run/metrics.jsonl"))) {
        if (r.value("event", "") != "eval") continue;
        EXPECT_EQ(r["task"], "tiny_choice");
        EXPECT_EQ(r["n"], 13);
        steps.push_back(r["step"].get<long>());
        if (r["step"] != 0) continue;
        ++at_start;
        ChoiceCounts got;
        got.n = r["n"].get<long>();
        got.acc = std::lround(r["acc"].get<double>() * 13);
        got.acc_norm = std::lround(r["acc_norm"].get<double>() * 13);
        got.acc_token = std::lround(r["acc_token"].get<double>() * 13);
        expect_same_counts(got, want, "eval record at step 0");
    }
    EXPECT_EQ(at_start, 2);  // both tasks
    EXPECT_EQ(steps, (std::vector<long>{0, 0, 2, 2}));
}

// eval.tasks in a pipeline run (P = 2): each candidate row's forward runs through the stages
// and the last stage's per-position losses are broadcast over the pipeline. The records at
// step 0 and after 2 steps carry the counts of one rank training the same global batch.
TEST(ChoiceEvalRanks, PipelineRunRecordsTheOneRanksCounts) {
    const int D = test::world_size() / 2;
    test::SharedDir dir("choice_eval_pipeline");
    if (test::world_rank() == 0) {
        test::write_random_shard(dir.file("train.bin"), 4096, 256);
        make_byte_tokenizer()->save(dir.path());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    auto configure = [&](const std::string& run) {
        Config c = test::tiny_mpi_config(dir.file("train.bin"), dir.file(run));
        c.model = eval_model();
        c.train.max_steps = 2;
        c.train.seed = 5;
        c.eval.tasks = kTinyTask;
        c.eval.every = 2;
        c.eval.limit = 13;
        c.run.tensorboard = false;
        return c;
    };
    Config c = configure("pipe");
    c.parallel.pipeline = 2;
    train(c, TrainOptions{});
    Config ref = configure("ref" + std::to_string(test::world_rank()));
    ref.train.grad_accum *= D;
    TrainOptions self;
    self.comm = MPI_COMM_SELF;
    train(ref, self);
    if (test::world_rank() != 0) return;
    auto records = [&](const std::string& run) {
        std::vector<nlohmann::json> out;
        for (const nlohmann::json& r : test::read_jsonl(dir.file(run + "/metrics.jsonl"))) {
            if (r.value("event", "") == "eval") out.push_back(r);
        }
        return out;
    };
    const std::vector<nlohmann::json> got = records("pipe");
    const std::vector<nlohmann::json> want = records("ref0");
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(want.size(), 2u);
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i]["step"], want[i]["step"]);
        for (const char* key : {"n", "acc", "acc_norm", "acc_token"}) {
            EXPECT_EQ(got[i][key], want[i][key]) << key << " at step " << got[i]["step"];
        }
    }
    ChoiceCounts start;
    start.n = got[0]["n"].get<long>();
    start.acc = std::lround(got[0]["acc"].get<double>() * 13);
    start.acc_norm = std::lround(got[0]["acc_norm"].get<double>() * 13);
    start.acc_token = std::lround(got[0]["acc_token"].get<double>() * 13);
    expect_same_counts(start, one_rank_counts(read_choice_task(kTinyTask, *make_byte_tokenizer()), 13, 5),
                       "pipeline record at step 0");
}

}  // namespace
}  // namespace zt
