// Multiple-choice scores against a float64 numpy reference (tests/reference/choice_reference.py,
// on llama_reference.py's model), both reading the tiny model's Hugging Face export
// (zt-consolidate's directory): every candidate ending's summed log-likelihood within 1e-5
// relative, and the acc / acc_norm / acc_token counts of the script's own argmax. The rows
// include left-truncated contexts (seq_len 8), and ztrain runs them three to a padded batch
// while the script runs each alone. Skipped (GTEST_SKIP) without python3 and numpy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_state_access.hpp"
#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/choice_eval.hpp"

namespace zt {
namespace {

const char* kScript = ZT_SOURCE_DIR "/tests/reference/choice_reference.py";

/// Eight examples of 2 to 4 endings over a vocabulary of `vocab`: contexts of 0 to 10 tokens
/// (longer than the window of 8 some), endings of 1 to 4.
ChoiceTask synthetic_task(int vocab) {
    ChoiceTask task;
    task.name = "synthetic";
    uint64_t i = 0;
    auto token = [&] { return static_cast<uint32_t>(random_bits(21, 0, i++) % static_cast<uint64_t>(vocab)); };
    for (int e = 0; e < 8; ++e) {
        ChoiceExample ex;
        const int ctx = e == 0 ? 0 : static_cast<int>(random_bits(21, 1, static_cast<uint64_t>(e)) % 11);
        for (int t = 0; t < ctx; ++t) ex.context.push_back(token());
        const int n_endings = 2 + e % 3;
        for (int k = 0; k < n_endings; ++k) {
            std::vector<uint32_t> end;
            const int len = 1 + static_cast<int>(random_bits(21, 2, static_cast<uint64_t>(e * 7 + k)) % 4);
            for (int t = 0; t < len; ++t) end.push_back(token());
            ex.endings.push_back(end);
            ex.ending_chars.push_back(3 * len + k);
        }
        ex.label = e % n_endings;
        task.examples.push_back(ex);
    }
    return task;
}

TEST(ChoiceReference, LoglikelihoodsAndCountsMatchNumpy) {
    const std::string python = test::numpy_python();
    if (python.empty()) GTEST_SKIP() << "no python3 with numpy ($ZT_PYTHON, python3, /usr/bin/python3)";
    const ModelConfig mc = test::small_llama(2, true, false);
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, 3);
    ModelState state(model.layout(), *backend, 11);
    const ModelLayout& layout = model.layout();
    // Weights larger than the init (std 0.02) so the endings' scores differ clearly.
    for (const ParamSpec& p : layout.params) {
        float* w = ModelStateTestAccess::unit_params(state, p.unit);
        const size_t live = p.unit == 0 ? static_cast<size_t>(mc.vocab_size) * mc.n_embd : p.numel;
        for (size_t i = 0; i < live; ++i) w[p.offset + i] += static_cast<float>(0.3 * random_normal(9, 3, p.global_index + i));
    }
    const ChoiceTask task = synthetic_task(mc.vocab_size);
    const uint32_t bos = 1;

    // The model as a user has it: a checkpoint exported to a Hugging Face directory, which
    // ztrain imports and the script reads.
    const test::ScratchDir scratch("choice-reference");
    const std::string& dir = scratch.path();
    Config deck;
    deck.model = mc;
    CheckpointRecord record;
    record.dtype = "fp32";
    record.seed = 11;
    record.config_ini = to_ini(deck);
    const std::string step_dir = save_checkpoint(dir + "/ckpt", state, self_communicator(), record, 1);
    const std::string hf = dir + "/hf";
    consolidate(step_dir, hf + "/", DType::kF32, false);
    ModelState imported(layout, *backend, 99);
    import_weights(hf, layout, mc, imported);
    nlohmann::json cfg;
    const size_t T = static_cast<size_t>(mc.seq_len);
    std::vector<int32_t> tokens, targets;
    for (size_t e = 0; e < task.examples.size(); ++e) {
        cfg["labels"].push_back(task.examples[e].label);
        for (size_t k = 0; k < task.examples[e].endings.size(); ++k) {
            const ChoiceRow row = choice_row(task.examples[e], static_cast<int>(k), mc.seq_len, bos);
            cfg["rows"].push_back({{"example", e}, {"ending", k}, {"chars", task.examples[e].ending_chars[k]}});
            std::vector<int32_t> in(T, 0), tg(T, -1);
            std::copy(row.inputs.begin(), row.inputs.end(), in.begin());
            std::copy(row.targets.begin(), row.targets.end(), tg.begin());
            tokens.insert(tokens.end(), in.begin(), in.end());
            targets.insert(targets.end(), tg.begin(), tg.end());
        }
    }
    const size_t R = tokens.size() / T;
    std::ofstream(dir + "/config.json") << cfg.dump(1);
    test::write_npy(dir + "/tokens.npy", tokens.data(), "<i4", 4, {R, T});
    test::write_npy(dir + "/targets.npy", targets.data(), "<i4", 4, {R, T});
    const std::string cmd = str(python, " ", kScript, " --hf ", hf, " ", dir);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream ref_in(dir + "/choice_reference.json");
    const nlohmann::json ref = nlohmann::json::parse(ref_in);

    ChoiceEvaluator evaluator(model, imported, self_communicator(), 3, bos);
    const auto scores = evaluator.score_examples(task, 0, static_cast<long>(task.examples.size()));
    ChoiceCounts counts;
    size_t r = 0;
    for (size_t e = 0; e < scores.size(); ++e) {
        for (const EndingScore& s : scores[e]) {
            const double want = ref.at("loglik").at(r++).get<double>();
            EXPECT_NEAR(s.loglik, want, 1e-5 * std::fabs(want) + 1e-6) << "example " << e;
        }
        score_example(scores[e], task.examples[e].label, counts);
    }
    EXPECT_EQ(r, R);
    EXPECT_EQ(counts.acc, ref.at("acc").get<long>());
    EXPECT_EQ(counts.acc_norm, ref.at("acc_norm").get<long>());
    EXPECT_EQ(counts.acc_token, ref.at("acc_token").get<long>());
}

}  // namespace
}  // namespace zt
