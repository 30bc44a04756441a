// The model split into pipeline stages (Transformer with StageBlocks), run stage after stage
// in one process with the boundary activations and their gradients copied across by hand:
// the last stage's loss and every unit's gradient must be the whole model's, and each stage
// must touch its own units only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"

#include "host_store.hpp"
#include "test_support.hpp"

namespace zt {
namespace {

using test::HostStore;

void copy_act(ActPtr to, ConstActPtr from, size_t n) {
    ASSERT_EQ(to.dtype, from.dtype);
    std::memcpy(to.data, from.data, n * dtype_size(from.dtype));
}

struct Case {
    std::string name;
    ModelConfig model;
    std::vector<int> bounds;  ///< stage s runs blocks [bounds[s], bounds[s + 1])
    bool recompute = false;
    DType act = DType::kF32;
};

void check_stages(const Case& c) {
    SCOPED_TRACE(c.name);
    auto backend = make_cpu_backend(1);
    const ModelConfig& mc = c.model;
    const int B = 2;
    const int T = mc.seq_len;
    std::vector<int32_t> inputs(static_cast<size_t>(B * T));
    std::vector<int32_t> targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>(random_bits(5, 1, i) % static_cast<uint64_t>(mc.vocab_size));
        targets[i] = static_cast<int32_t>(random_bits(5, 2, i) % static_cast<uint64_t>(mc.vocab_size));
    }
    targets[1] = -1;
    const float dloss = 1.f / static_cast<float>(B * T);

    Transformer whole(mc, *backend, B, TransformerOptions().with_recompute(c.recompute).with_activation(c.act));
    HostStore whole_store(whole.layout(), 42);
    const float whole_loss = whole.forward(whole_store, inputs.data(), targets.data(), B, T, dloss);
    whole.backward(whole_store);

    const int P = static_cast<int>(c.bounds.size()) - 1;
    std::vector<std::unique_ptr<Transformer>> stages;
    std::vector<std::unique_ptr<HostStore>> stores;
    for (int s = 0; s < P; ++s) {
        const StageBlocks blocks{c.bounds[static_cast<size_t>(s)], c.bounds[static_cast<size_t>(s) + 1]};
        stages.push_back(std::make_unique<Transformer>(
            mc, *backend, B, TransformerOptions().with_recompute(c.recompute).with_activation(c.act).with_stage(blocks)));
        stores.push_back(std::make_unique<HostStore>(whole.layout(), 42));
        EXPECT_EQ(stages.back()->first_stage(), s == 0);
        EXPECT_EQ(stages.back()->last_stage(), s == P - 1);
        // Only the last stage keeps logits: the others' activations are smaller.
        if (s < P - 1) {
            EXPECT_LT(stages.back()->activation_bytes(), whole.activation_bytes());
        }
    }
    float loss = -1.f;
    for (int s = 0; s < P; ++s) {
        Transformer& m = *stages[static_cast<size_t>(s)];
        if (s > 0) {
            copy_act(m.stage_input(), stages[static_cast<size_t>(s) - 1]->stage_output(), m.stage_elements(B, T));
        }
        loss = m.forward(*stores[static_cast<size_t>(s)], inputs.data(), targets.data(), B, T, dloss);
        if (s < P - 1) {
            EXPECT_EQ(loss, 0.f) << "stage " << s << " has no loss";
        }
    }
    EXPECT_EQ(loss, whole_loss);
    for (int s = P - 1; s >= 0; --s) {
        Transformer& m = *stages[static_cast<size_t>(s)];
        if (s < P - 1) {
            copy_act(m.stage_output_grad(), stages[static_cast<size_t>(s) + 1]->stage_input_grad(),
                     m.stage_elements(B, T));
        }
        m.backward(*stores[static_cast<size_t>(s)]);
    }

    const int nL = mc.n_layer;
    for (int s = 0; s < P; ++s) {
        std::set<int> expect;
        if (s == 0 || s == P - 1) expect.insert(0);
        const StageBlocks blocks{c.bounds[static_cast<size_t>(s)], c.bounds[static_cast<size_t>(s) + 1]};
        for (int l = blocks.begin; l < blocks.end; ++l) expect.insert(1 + l);
        if (s == P - 1) expect.insert(nL + 1);
        EXPECT_EQ(stores[static_cast<size_t>(s)]->touched, expect) << "units stage " << s << " read or wrote";
    }
    // Blocks and the final norm: one stage computes each, from the same inputs as the whole
    // model, in the same order of operations: the same bits.
    for (int u = 1; u <= nL + 1; ++u) {
        int s = 0;
        while (u <= nL && c.bounds[static_cast<size_t>(s) + 1] < u) ++s;
        if (u == nL + 1) s = P - 1;
        const std::vector<float>& got = stores[static_cast<size_t>(s)]->grad(u);
        const std::vector<float>& want = whole_store.grad(u);
        size_t differ = 0;
        for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i] ? 1 : 0;
        EXPECT_EQ(differ, 0u) << "unit " << u << " (stage " << s << "): " << differ << " of " << want.size()
                              << " gradient elements differ from the whole model's";
    }
    // Unit 0: the first stage's embedding gradient plus the last stage's head gradient, each
    // zero where the other adds; the sum differs from the whole model's only in the order of
    // the additions.
    const std::vector<float>& first = stores.front()->grad(0);
    const std::vector<float>& last = stores.back()->grad(0);
    const std::vector<float>& want = whole_store.grad(0);
    double worst = 0.0;
    double scale = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double got = static_cast<double>(first[i]) + static_cast<double>(last[i]);
        worst = std::max(worst, std::fabs(got - static_cast<double>(want[i])));
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    EXPECT_LE(worst, 1e-6 * scale) << "unit 0: the stages' summed gradient differs by " << worst << " (largest "
                                   << scale << ")";
}

ModelConfig gpt2(int n_layer) { return test::tiny_stage_model(ModelArch("gpt2"), n_layer); }
ModelConfig llama(int n_layer, bool tied) { return test::tiny_stage_model(ModelArch("llama"), n_layer, tied); }

TEST(PipelineModel, Gpt2TwoStagesMatchTheWholeModel) { check_stages({"gpt2 2+1", gpt2(3), {0, 2, 3}}); }

TEST(PipelineModel, Gpt2FourStagesWithRecompute) {
    check_stages({"gpt2 1+1+1+1 recompute", gpt2(4), {0, 1, 2, 3, 4}, /*recompute=*/true});
}

TEST(PipelineModel, LlamaTiedAndUntiedHeads) {
    check_stages({"llama tied 1+2", llama(3, true), {0, 1, 3}});
    check_stages({"llama untied 2+1+1", llama(4, false), {0, 2, 3, 4}});
}

TEST(PipelineModel, Bf16ActivationsCrossInTheirDtype) {
    auto backend = make_cpu_backend(1);
    if (!backend->capabilities().supports(DType::kBF16)) GTEST_SKIP() << "no bf16 products on this build";
    check_stages({"gpt2 bf16 1+2", gpt2(3), {0, 1, 3}, false, DType::kBF16});
}

// Zero-bubble's split backward: two micro-batches on two models (as two pipeline slots),
// each backward() leaving its weight gradients, then backward_weights() of both, give every
// product's weight and bias gradient bit for bit as the plain backward of the same two
// micro-batches (each element sums the same terms in the same order). A norm's parameter
// gradient is summed over a micro-batch's rows first and then added (the plain backward adds
// row by row): within a rounding of it.
void check_deferred_weights(const ModelConfig& mc, DType act) {
    auto backend = make_cpu_backend(1);
    const int B = 2;
    const int T = mc.seq_len;
    auto tokens = [&](int mb, int stream) {
        std::vector<int32_t> t(static_cast<size_t>(B * T));
        for (size_t i = 0; i < t.size(); ++i) {
            t[i] = static_cast<int32_t>(random_bits(9, static_cast<uint64_t>(stream), i + 1000 * static_cast<size_t>(mb)) %
                                        static_cast<uint64_t>(mc.vocab_size));
        }
        return t;
    };
    const float dloss = 1.f / static_cast<float>(2 * B * T);
    Transformer plain(mc, *backend, B, TransformerOptions().with_activation(act));
    HostStore want(plain.layout(), 42);
    for (int mb = 0; mb < 2; ++mb) {
        plain.forward(want, tokens(mb, 1).data(), tokens(mb, 2).data(), B, T, dloss);
        plain.backward(want);
    }
    Transformer first(mc, *backend, B, TransformerOptions().with_activation(act));
    Transformer second(mc, *backend, B, TransformerOptions().with_activation(act));
    HostStore got(first.layout(), 42);
    first.defer_weight_grads(true);
    second.defer_weight_grads(true);
    first.forward(got, tokens(0, 1).data(), tokens(0, 2).data(), B, T, dloss);
    first.backward(got);
    second.forward(got, tokens(1, 1).data(), tokens(1, 2).data(), B, T, dloss);
    second.backward(got);
    first.backward_weights(got);
    second.backward_weights(got);
    for (int u = 0; u < plain.layout().num_units(); ++u) {
        test::expect_unit_grads(plain.layout(), u, want.grad(u), got.grad(u), /*norms_rounded=*/true, "deferred");
    }
}

TEST(PipelineModel, DeferredWeightGradientsAreThePlainBackwards) {
    check_deferred_weights(gpt2(2), DType::kF32);
    check_deferred_weights(llama(2, false), DType::kF32);
    if (make_cpu_backend(1)->capabilities().supports(DType::kBF16)) check_deferred_weights(gpt2(2), DType::kBF16);
}

// recompute = attention: a pipeline stage's models share one probabilities buffer. Another
// model's forward may run between a model's forward and its backward (1F1B) and overwrite
// the buffer; each block's backward rebuilds its probabilities first, so both models take
// the gradients of models with their own buffers, bit for bit, and the second model holds
// one block's probabilities fewer, as PipelineRunner::stage_activations plans.
TEST(PipelineModel, ModelsOfAStageShareTheAttentionProbabilities) {
    auto backend = make_cpu_backend(1);
    const int B = 2;
    for (const ModelConfig& mc : {gpt2(3), llama(3, false)}) {
        const int T = mc.seq_len;
        std::vector<int32_t> inputs(static_cast<size_t>(2 * B * T)), targets(inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            inputs[i] = static_cast<int32_t>(random_bits(6, 1, i) % static_cast<uint64_t>(mc.vocab_size));
            targets[i] = static_cast<int32_t>(random_bits(6, 2, i) % static_cast<uint64_t>(mc.vocab_size));
        }
        const TransformerOptions options = TransformerOptions().with_recompute(ActivationRecompute::kAttention);
        std::vector<std::vector<float>> grads[2];
        for (const bool share : {false, true}) {
            Transformer first(mc, *backend, B, options);
            Transformer second(mc, *backend, B,
                               TransformerOptions(options).with_shared_probs(share ? first.attention_probs() : ActPtr{}));
            EXPECT_EQ(second.attention_probs().data == first.attention_probs().data, share);
            HostStore a(first.layout(), 42), b(second.layout(), 42);
            // 1F1B's order on a first stage: F0 F1 B0 B1.
            const size_t half = static_cast<size_t>(B * T);
            first.forward(a, inputs.data(), targets.data(), B, T, 1.f);
            second.forward(b, inputs.data() + half, targets.data() + half, B, T, 1.f);
            first.backward(a);
            second.backward(b);
            for (int u = 0; u < first.layout().num_units(); ++u) {
                grads[share].push_back(a.grad(u));
                grads[share].push_back(b.grad(u));
            }
            const double probs = static_cast<double>(B) * mc.n_head * T * T * sizeof(float);
            EXPECT_EQ(static_cast<double>(first.activation_bytes()) - static_cast<double>(second.activation_bytes()),
                      share ? probs : 0.0);
        }
        ASSERT_EQ(grads[0].size(), grads[1].size());
        for (size_t i = 0; i < grads[0].size(); ++i) {
            EXPECT_EQ(grads[1][i], grads[0][i]) << setting_text(mc.arch) << ": unit " << i / 2 << " of model " << i % 2;
        }
        // The plan: 1F1B's first of 2 stages holds 2 models and one buffer of probabilities.
        const std::vector<int> bounds{0, 2, 3};
        const ActivationCount one = Transformer::activations(mc, B, ActivationRecompute::kAttention, 0, 1, false,
                                                             PipelineRunner::chunk_blocks(bounds, 0));
        const ActivationCount stage = PipelineRunner::stage_activations(
            PipelineScheduleKind::k1F1B, PipelineShape{2, 4, 1}, 0, bounds, mc, B, ActivationRecompute::kAttention, 0);
        EXPECT_DOUBLE_EQ(stage.act, 2 * one.act);
        EXPECT_DOUBLE_EQ(stage.probs, one.probs);
    }
}

TEST(PipelineModel, TheStageRangeIsChecked) {
    auto backend = make_cpu_backend(1);
    const ModelConfig mc = gpt2(3);
    EXPECT_THROW(Transformer(mc, *backend, 1, TransformerOptions().with_stage(StageBlocks{2, 2})), Error);
    EXPECT_THROW(Transformer(mc, *backend, 1, TransformerOptions().with_stage(StageBlocks{1, 4})), Error);
    // What the memory plan predicts for a stage is what the stage allocates (the
    // constructor checks it) and less than the whole model's.
    const ActivationCount all = Transformer::activations(mc, 2, ActivationRecompute::kNone, 0);
    const ActivationCount mid = Transformer::activations(mc, 2, ActivationRecompute::kNone, 0, 1, false, StageBlocks{1, 2});
    EXPECT_LT(mid.act, all.act / 2);
}

}  // namespace
}  // namespace zt
