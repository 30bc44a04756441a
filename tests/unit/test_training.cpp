// End-to-end training on one rank: the tiny deck learns a synthetic task, and the same
// seed gives the same metrics twice.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/step_reporter.hpp"
#include "ztrain/train/trainer.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

class MpiEnvironment : public ::testing::Environment {
  public:
    void SetUp() override { MPI_Init(nullptr, nullptr); }
    void TearDown() override { MPI_Finalize(); }
};
const auto* const kMpiEnv = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

/// A first-order Markov chain that is a single random cycle over 32 tokens: every token
/// determines the next, so a model that learns the transition reaches ~zero loss.
std::vector<uint32_t> cycle_corpus(size_t n) {
    const uint32_t V = 32;
    std::vector<uint32_t> order(V);
    std::iota(order.begin(), order.end(), 0u);
    for (uint32_t i = V - 1; i > 0; --i) std::swap(order[i], order[random_bits(9, 9, i) % (i + 1)]);
    std::vector<uint32_t> next(V);
    for (uint32_t i = 0; i < V; ++i) next[order[i]] = order[(i + 1) % V];
    std::vector<uint32_t> out(n);
    uint32_t t = 0;
    for (size_t i = 0; i < n; ++i) {
        out[i] = t;
        t = next[t];
    }
    return out;
}

Config tiny_config(const test::ScratchDir& dir, const std::string& run, const std::string& deck_name = "tiny.ini") {
    const std::string deck = std::string(ZT_SOURCE_DIR) + "/inputs/" + deck_name;
    const std::string train = "--data.train=" + dir.file("train.bin");
    const std::string val = "--data.val=" + dir.file("val.bin");
    const std::string run_dir = "--run.dir=" + dir.file(run);
    const char* argv[] = {"ztrain", "--config", deck.c_str(), train.c_str(), val.c_str(), run_dir.c_str(),
                          "--train.sample_tokens=0", "--train.threads=1"};
    return parse_command_line(static_cast<int>(std::size(argv)), argv, family_key_rules).config;
}

/// The records of a metrics.jsonl, by default without the fields that differ run to run.
std::vector<nlohmann::json> read_metrics(const std::string& path, bool erase_timing = true) {
    std::ifstream in(path);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) {
        nlohmann::json j = nlohmann::json::parse(line);
        if (erase_timing) test::erase_timing_fields(j);
        out.push_back(j);
    }
    return out;
}

TEST(Training, TinyDeckLearnsACycleToNearZeroLoss) {
    test::ScratchDir dir("train");
    write_token_shard(dir.file("train.bin"), cycle_corpus(20000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    const TrainSummary s = train(tiny_config(dir, "run"));
    ASSERT_EQ(s.steps, 60);
    EXPECT_GT(s.losses.front(), 4.0) << "initial loss should be near ln(257) = 5.55";
    EXPECT_LT(s.losses.back(), 0.05) << "final train loss " << s.losses.back();
    ASSERT_FALSE(s.val_losses.empty());
    EXPECT_LT(s.val_losses.back(), 0.05) << "final val loss " << s.val_losses.back();
}

// The same task with the Llama deck (RMSNorm, RoPE, grouped-query attention, SwiGLU).
TEST(Training, LlamaTinyDeckLearnsACycleToNearZeroLoss) {
    test::ScratchDir dir("train-llama");
    write_token_shard(dir.file("train.bin"), cycle_corpus(20000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    const TrainSummary s = train(tiny_config(dir, "run", "llama_tiny.ini"));
    ASSERT_EQ(s.steps, 60);
    EXPECT_GT(s.losses.front(), 4.0) << "initial loss should be near ln(257) = 5.55";
    EXPECT_LT(s.losses.back(), 0.05) << "final train loss " << s.losses.back();
    ASSERT_FALSE(s.val_losses.empty());
    EXPECT_LT(s.val_losses.back(), 0.05) << "final val loss " << s.val_losses.back();
}

// At every evaluation rank 0 prints a sample generated from the current weights, decoded
// with the tokenizer found beside the shards (here the byte tokenizer):
//   sample at step N:
//       TEXT        (a newline in TEXT continues on a new line indented by 4, control bytes print as ?)
TEST(Training, PrintsADecodedSampleAtEachEvaluation) {
    test::ScratchDir dir("sample");
    write_token_shard(dir.file("train.bin"), cycle_corpus(5000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    make_byte_tokenizer()->save(dir.path());  // tokenizer.json beside the train shard
    Config c = tiny_config(dir, "run");
    c.train.max_steps = 4;
    c.train.eval_every = 2;  // evaluations at steps 0, 2 and 4
    c.train.sample_tokens = 16;
    ::testing::internal::CaptureStdout();
    const TrainSummary s = train(c);
    const std::string out = ::testing::internal::GetCapturedStdout();
    ASSERT_EQ(s.val_losses.size(), 3u);

    // The sample blocks, in order: the header, then the lines indented by 4.
    std::istringstream in(out);
    std::string line;
    std::vector<long> steps;
    std::vector<std::string> texts;
    bool in_sample = false;
    bool first_line = false;
    while (std::getline(in, line)) {
        long step = -1;
        char colon = 0;
        if (std::sscanf(line.c_str(), "sample at step %ld%c", &step, &colon) == 2 && colon == ':') {
            steps.push_back(step);
            texts.emplace_back();
            in_sample = first_line = true;
        } else if (in_sample && line.rfind("    ", 0) == 0) {
            if (!first_line) texts.back() += '\n';  // a newline of the text
            texts.back() += line.substr(4);
            first_line = false;
        } else {
            in_sample = false;
        }
    }
    ASSERT_EQ(steps, (std::vector<long>{0, 2, 4})) << out;
    const std::string eot = "<|endoftext|>";
    for (size_t k = 0; k < texts.size(); ++k) {
        // Decoded by the byte tokenizer, each of the 16 tokens is one byte (a newline, a
        // control or non-UTF-8 byte printed as \xNN, or any other byte) or the text
        // <|endoftext|>; printed as token ids ("17 203 ...") the 16 tokens would take at least
        // 32 characters.
        std::string bytes;
        for (size_t i = 0; i < texts[k].size(); ++i) {
            if (texts[k].compare(i, 2, "\\x") == 0 && i + 4 <= texts[k].size()) {
                bytes += static_cast<char>(std::stoi(texts[k].substr(i + 2, 2), nullptr, 16));
                i += 3;
            } else {
                bytes += texts[k][i];
            }
        }
        size_t eots = 0;
        for (size_t at = bytes.find(eot); at != std::string::npos; at = bytes.find(eot, at + 1)) ++eots;
        EXPECT_EQ(bytes.size(), 16 + eots * (eot.size() - 1))
            << "sample at step " << steps[k] << " is not 16 decoded tokens: '" << texts[k] << "'";
        for (unsigned char ch : texts[k]) {
            EXPECT_TRUE(ch >= 32 || ch == '\n' || ch == '\t') << "raw control byte " << int(ch) << " printed";
        }
    }
    // The last one is the run's last_sample, as printed (printable_text; the parse above
    // took the continuation lines' indentation off).
    ASSERT_FALSE(s.last_sample.empty());
    std::string shown = printable_text(s.last_sample);
    for (size_t at = shown.find("\n    "); at != std::string::npos; at = shown.find("\n    ", at + 1)) {
        shown.erase(at + 1, 4);
    }
    EXPECT_EQ(texts.back(), shown) << out;
}

TEST(Training, SameSeedGivesIdenticalMetrics) {
    test::ScratchDir dir("determinism");
    write_token_shard(dir.file("train.bin"), cycle_corpus(20000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    Config a = tiny_config(dir, "a");
    a.train.max_steps = 12;
    Config b = tiny_config(dir, "b");
    b.train.max_steps = 12;
    train(a);
    train(b);
    const auto ma = read_metrics(dir.file("a/metrics.jsonl"));
    const auto mb = read_metrics(dir.file("b/metrics.jsonl"));
    ASSERT_EQ(ma.size(), mb.size());
    ASSERT_GE(ma.size(), 13u);  // memory record + 12 steps (+ eval)
    for (size_t i = 0; i < ma.size(); ++i) {
        EXPECT_EQ(ma[i], mb[i]) << "metrics line " << i << " differs:\n" << ma[i].dump() << "\n" << mb[i].dump();
    }
}

TEST(Training, MetricsCarryTheContractFields) {
    test::ScratchDir dir("fields");
    write_token_shard(dir.file("train.bin"), cycle_corpus(5000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    Config c = tiny_config(dir, "run");
    c.train.max_steps = 3;
    train(c);
    // Raw records: the timing fields are part of the contract too (the other tests erase
    // them before comparing runs, so only this test would notice them missing).
    const auto m = read_metrics(dir.file("run/metrics.jsonl"), /*erase_timing=*/false);
    ASSERT_GE(m.size(), 4u);
    EXPECT_EQ(m[0]["event"], "memory");
    for (const char* k : {"params", "grads", "master", "optimizer", "activations", "world_size", "zero_stage"}) {
        EXPECT_TRUE(m[0].contains(k) && m[0][k].is_number_integer()) << "memory record: " << k << " in " << m[0];
    }
    EXPECT_TRUE(m[0].contains("dtype") && m[0]["dtype"].is_string()) << m[0];
    int steps = 0;
    int evals = 0;
    int saves = 0;
    // The last record is the measured peak memory per rank against the plan.
    ASSERT_EQ(m.back()["event"], "memory_peak") << m.back();
    EXPECT_TRUE(m.back()["predicted_peak"].is_number() && m.back()["measured_peak"].is_array() &&
                m.back()["measured_peak"].size() == 1 && m.back()["measured_peak"][0].get<double>() > 0)
        << m.back();
    EXPECT_TRUE(m[0]["predicted_peak"].is_number() && m[0]["predicted_peak"].get<double>() > 0) << m[0];
    for (size_t i = 1; i + 1 < m.size(); ++i) {
        const nlohmann::json& r = m[i];
        ASSERT_TRUE(r.contains("step") && r["step"].is_number_integer()) << "record " << i << ": " << r;
        if (r.contains("val_loss")) {
            EXPECT_TRUE(r["val_loss"].is_number()) << r;
            ++evals;
            continue;
        }
        if (r.value("event", "") == "checkpoint") {
            // One per save (the end of the run here), with the contract's fields.
            EXPECT_EQ(r["step"], 3) << r;
            EXPECT_TRUE(r["async"].is_boolean()) << r;
            EXPECT_TRUE(r["bytes"].is_number_integer() && r["bytes"].get<int64_t>() > 0) << r;
            for (const char* k : {"blocked_ms", "write_ms"}) {
                EXPECT_TRUE(r.contains(k) && r[k].is_number() && r[k].get<double>() >= 0.0)
                    << "checkpoint record: " << k << " in " << r;
            }
            EXPECT_LE(r["blocked_ms"].get<double>(), r["write_ms"].get<double>()) << r;
            ++saves;
            continue;
        }
        ++steps;
        EXPECT_EQ(r["step"], steps) << r;
        for (const char* k : {"loss", "lr", "grad_norm", "loss_scale"}) {
            EXPECT_TRUE(r.contains(k) && r[k].is_number()) << "step record: " << k << " in " << r;
        }
        EXPECT_TRUE(r.contains("tokens") && r["tokens"].is_number_integer()) << r;
        EXPECT_TRUE(r.contains("skipped") && r["skipped"].is_boolean()) << r;
        EXPECT_TRUE(r.contains("comm_bytes") && r["comm_bytes"].is_object()) << r;
        // Throughput, the step time and the per-phase times: numbers >= 0.
        for (const char* k : {"tokens_per_s", "step_ms", "zero_ms", "fwd_ms", "bwd_ms", "comm_ms", "opt_ms"}) {
            EXPECT_TRUE(r.contains(k) && r[k].is_number() && r[k].get<double>() >= 0.0)
                << "step record: " << k << " in " << r;
        }
        EXPECT_GT(r.value("tokens_per_s", 0.0), 0.0) << r;
        EXPECT_GT(r.value("step_ms", 0.0), 0.0) << r;
    }
    EXPECT_EQ(steps, 3);
    EXPECT_GE(evals, 1);
    EXPECT_EQ(saves, 1);
    EXPECT_TRUE(m[m.size() - 3].contains("val_loss"))
        << "the last evaluation comes before the final checkpoint's and the memory_peak record";
}

// A run whose gradients keep going non-finite stops with a message instead of training on:
// bf16/fp32 after train.max_bad_steps consecutive skipped steps, fp16 when the loss scale
// is at its floor and still overflows.
TEST(Training, PersistentNonFiniteGradientsStopTheRun) {
    test::ScratchDir dir("bad");
    write_token_shard(dir.file("train.bin"), cycle_corpus(5000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    TrainOptions poison;
    poison.after_grad_sync = [](long step, ModelState& state) {
        if (step >= 3) ModelStateTestAccess::poison_owned_grad(state);
    };
    Config c = tiny_config(dir, "bf16");
    c.precision.dtype = DType::kBF16;
    c.train.max_bad_steps = 3;
    try {
        train(c, poison);
        ADD_FAILURE() << "bf16 run with poisoned gradients did not stop";
    } catch (const AgreedError& e) {  // every rank stops together: exit 1 without MPI_Abort
        EXPECT_NE(std::string(e.what()).find("step 5: 3 consecutive steps with non-finite gradients"), std::string::npos)
            << e.what();
    }
    // The stopping step is in metrics.jsonl, marked skipped, like the two before it.
    const auto records = read_metrics(dir.file("bf16/metrics.jsonl"), /*erase_timing=*/false);
    std::vector<long> skipped_steps;
    for (const auto& r : records) {
        if (r.contains("skipped") && r["skipped"].get<bool>()) skipped_steps.push_back(r["step"].get<long>());
    }
    EXPECT_EQ(skipped_steps, (std::vector<long>{3, 4, 5}));
    Config h = tiny_config(dir, "fp16");
    h.precision.dtype = DType::kF16;
    h.precision.init_scale = 4;
    h.precision.min_scale = 1;
    h.precision.hysteresis = 1;
    try {
        train(h, poison);
        ADD_FAILURE() << "fp16 run with poisoned gradients did not stop";
    } catch (const AgreedError& e) {
        // Scale 4 -> 2 (step 3) -> 1 (step 4) -> overflow at the floor (step 5).
        EXPECT_NE(std::string(e.what()).find("step 5: fp16 gradients overflow even at the minimum loss scale"),
                  std::string::npos)
            << e.what();
    }
}

// With the default hysteresis 2 the floor is not the end at once: the first overflow at the
// minimum scale is absorbed like any other, the second stops the run.
TEST(Training, Fp16AtTheFloorWithHysteresis2AbsorbsOneOverflowAndStopsAtTheSecond) {
    test::ScratchDir dir("floor");
    write_token_shard(dir.file("train.bin"), cycle_corpus(5000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    TrainOptions poison;
    std::vector<bool> skipped;
    poison.after_grad_sync = [](long step, ModelState& state) {
        if (step >= 3) ModelStateTestAccess::poison_owned_grad(state);
    };
    poison.after_step = [&](long, ModelState&, bool s) { skipped.push_back(s); };
    Config h = tiny_config(dir, "fp16");
    h.precision.dtype = DType::kF16;
    h.precision.init_scale = 2;
    h.precision.min_scale = 1;
    ASSERT_EQ(h.precision.hysteresis, 2) << "this case is about the default hysteresis";
    try {
        train(h, poison);
        ADD_FAILURE() << "fp16 run with poisoned gradients did not stop";
    } catch (const Error& e) {
        // Scale 2: step 3 absorbed, step 4 halves to 1 (the floor), step 5 absorbed at the
        // floor, step 6 would halve below it: stop.
        EXPECT_NE(std::string(e.what()).find("step 6: fp16 gradients overflow even at the minimum loss scale 1"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(skipped, (std::vector<bool>{false, false, true, true, true, true}))
        << "steps 3-5 skipped, step 6 skipped and stops";
}

// A static fp16 scale cannot back off, so an overflow that persists is bounded by
// train.max_bad_steps (1e30 overflows fp16 in every step).
TEST(Training, StaticFp16ScaleThatAlwaysOverflowsStopsAfterMaxBadSteps) {
    test::ScratchDir dir("static");
    write_token_shard(dir.file("train.bin"), cycle_corpus(5000));
    write_token_shard(dir.file("val.bin"), cycle_corpus(2000));
    Config c = tiny_config(dir, "fp16");
    c.precision.dtype = DType::kF16;
    set_config_value(c, "precision.loss_scale", "1e30");  // kept as written: the message quotes it
    c.train.max_bad_steps = 3;
    TrainOptions watch;
    long last_step = 0;
    watch.after_step = [&](long step, ModelState&, bool skipped) {
        EXPECT_TRUE(skipped) << "step " << step << " at loss scale 1e30 was not skipped";
        last_step = step;
    };
    try {
        train(c, watch);
        ADD_FAILURE() << "fp16 run at a static loss scale of 1e30 did not stop";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("step 3: 3 consecutive steps with fp16 gradient overflow at the static "
                                             "loss scale precision.loss_scale = 1e30 (train.max_bad_steps = 3)"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(last_step, 3) << "the run must stop after step 3 (skipped, recorded), not before or later";
}

}  // namespace
}  // namespace zt
