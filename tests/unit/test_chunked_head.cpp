// The LM head over row chunks (TransformerOptions::head_rows), its gradients taken in the
// forward: the loss, the per-row losses and every unit's gradient must be those of the head
// that holds all the logits and takes its gradients in backward; the logits it keeps without
// targets are the last rows'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_schedule.hpp"

#include "host_store.hpp"

namespace zt {
namespace {

using test::HostStore;

struct Case {
    std::string name;
    ModelConfig model;
    StageBlocks stage{};  ///< the whole model, or a last pipeline stage
    DType act = DType::kF32;
};

constexpr int kB = 3;
constexpr int kRows = 4;  // 18 rows of a (3, 6) batch: chunks of 4, 4, 4, 4 and 2

/// Forward and backward of both models on the same batch, twice (the second micro-step
/// adds into the first's gradients), each with its own store of the same initial weights.
void check_case(const Case& c) {
    SCOPED_TRACE(c.name);
    auto backend = make_cpu_backend(1);
    const ModelConfig& mc = c.model;
    const int T = mc.seq_len;
    const TransformerOptions plain = TransformerOptions().with_activation(c.act).with_stage(c.stage);
    Transformer whole(mc, *backend, kB, plain);
    Transformer chunked(mc, *backend, kB, TransformerOptions(plain).with_head_rows(kRows));
    EXPECT_LT(chunked.activation_bytes(), whole.activation_bytes());
    HostStore whole_store(whole.layout(), 42);
    HostStore chunked_store(chunked.layout(), 42);
    const size_t n = static_cast<size_t>(kB * T);
    std::vector<int32_t> inputs(n);
    std::vector<int32_t> targets(n);
    for (int micro = 0; micro < 2; ++micro) {
        for (size_t i = 0; i < n; ++i) {
            inputs[i] = static_cast<int32_t>(random_bits(7, 1 + micro, i) % static_cast<uint64_t>(mc.vocab_size));
            targets[i] = static_cast<int32_t>(random_bits(7, 3 + micro, i) % static_cast<uint64_t>(mc.vocab_size));
        }
        targets[static_cast<size_t>(micro) + 2] = -1;
        if (!c.stage.first_stage()) {
            // A stage without the embedding: the same input for both.
            for (Transformer* m : {&whole, &chunked}) {
                const ActPtr in = m->stage_input();
                for (size_t i = 0; i < m->stage_elements(kB, T); ++i) {
                    const float v = 0.5f * std::sin(0.37f * static_cast<float>(i + 11 * micro));
                    if (in.dtype == DType::kF32) {
                        static_cast<float*>(in.data)[i] = v;
                    } else {
                        static_cast<uint16_t*>(in.data)[i] = f32_to_bf16(v);
                    }
                }
            }
        }
        const float dloss = 1.f / static_cast<float>(n);
        const float want = whole.forward(whole_store, inputs.data(), targets.data(), kB, T, dloss);
        const float have = chunked.forward(chunked_store, inputs.data(), targets.data(), kB, T, dloss);
        EXPECT_NEAR(have, want, 1e-6 * std::abs(want)) << "micro-step " << micro;
        for (size_t i = 0; i < n; ++i) {
            if (targets[i] < 0) continue;
            EXPECT_NEAR(chunked.position_losses()[i], whole.position_losses()[i], 1e-5) << "row " << i;
        }
        whole.backward(whole_store);
        chunked.backward(chunked_store);
    }
    EXPECT_EQ(chunked_store.touched, whole_store.touched);
    for (int u : whole_store.touched) {
        const std::vector<float>& want = whole_store.grad(u);
        const std::vector<float>& have = chunked_store.grad(u);
        ASSERT_EQ(have.size(), want.size());
        float largest = 0.f;
        for (float v : want) largest = std::max(largest, std::abs(v));
        size_t worst = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            if (std::abs(have[i] - want[i]) > std::abs(have[worst] - want[worst])) worst = i;
        }
        const float tolerance = (c.act == DType::kF32 ? 2e-6f : 2e-2f) * largest;
        EXPECT_LE(std::abs(have[worst] - want[worst]), tolerance)
            << "unit " << u << ", element " << worst << ": " << have[worst] << " chunked, " << want[worst]
            << " whole (largest " << largest << ")";
    }
}

TEST(ChunkedHead, Gpt2GradientsEqualTheWholeHeads) {
    check_case({"gpt2", test::tiny_stage_model(ModelArch("gpt2"), 2)});
}

TEST(ChunkedHead, UntiedLlamaGradientsEqualTheWholeHeads) {
    check_case({"llama untied", test::tiny_stage_model(ModelArch("llama"), 2, false)});
}

TEST(ChunkedHead, LastPipelineStageGradientsEqualTheWholeHeads) {
    check_case({"gpt2 last stage", test::tiny_stage_model(ModelArch("gpt2"), 2), StageBlocks{1, 2}});
}

TEST(ChunkedHead, Bf16ActivationsGradientsEqualTheWholeHeads) {
    auto backend = make_cpu_backend(1);
    if (!backend->capabilities().supports(DType::kBF16)) GTEST_SKIP() << "no bf16 activations on this backend";
    check_case({"gpt2 bf16", test::tiny_stage_model(ModelArch("gpt2"), 2), StageBlocks{}, DType::kBF16});
}

TEST(ChunkedHead, KeepsTheLastRowsLogitsWithoutTargets) {
    auto backend = make_cpu_backend(1);
    const ModelConfig mc = test::tiny_stage_model(ModelArch("llama"), 1);
    const int T = mc.seq_len;
    Transformer whole(mc, *backend, kB);
    Transformer chunked(mc, *backend, kB, TransformerOptions().with_head_rows(kRows));
    HostStore store(whole.layout(), 5);
    std::vector<int32_t> inputs(static_cast<size_t>(kB * T));
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<int32_t>(i % 11);
    whole.forward(store, inputs.data(), nullptr, kB, T, 0.f);
    chunked.forward(store, inputs.data(), nullptr, kB, T, 0.f);
    const size_t Vp = static_cast<size_t>(mc.padded_vocab());
    std::vector<float> want(Vp), have(Vp);
    for (int row = kB * T - kRows; row < kB * T; ++row) {
        whole.logits_row_to_host(row, want.data());
        chunked.logits_row_to_host(row, have.data());
        for (size_t v = 0; v < Vp; ++v) EXPECT_NEAR(have[v], want[v], 1e-6) << "row " << row << ", token " << v;
    }
    EXPECT_THROW(chunked.logits_row_to_host(kB * T - kRows - 1, have.data()), Error);
}

TEST(ChunkedHead, ChunkRowsSplitTheMicroBatchEvenly) {
    ModelConfig gpt2;
    gpt2.vocab_size = 50257;
    gpt2.seq_len = 256;
    // 2^24 / 50304 = 333 rows at most: 1,024 rows go in 4 chunks of 256.
    EXPECT_EQ(Transformer::chunked_head_rows(gpt2, 4, 1), 256);
    // Half the vocabulary per rank: 666 rows at most, 2 chunks of 512.
    EXPECT_EQ(Transformer::chunked_head_rows(gpt2, 4, 2), 512);
    // A micro-batch under the chunk: one chunk of every row.
    EXPECT_EQ(Transformer::chunked_head_rows(gpt2, 1, 1), 256);
    // A large vocabulary still takes 128 rows at a time.
    ModelConfig llama3 = gpt2;
    llama3.vocab_size = 128256;
    llama3.seq_len = 2048;
    EXPECT_EQ(Transformer::chunked_head_rows(llama3, 1, 1), 128);
}

// Every schedule's last stage holds one chunk of logits per model, even where other passes
// run between a forward of the head and its backward: interleaved P = 4 over 4 micro-batches
// runs all four forwards of its head chunk before the first backward, so it keeps four models.
TEST(ChunkedHead, AnInterleavedLastStageHoldsOneChunkOfLogitsPerMicroBatchInFlight) {
    ModelConfig gpt2;
    gpt2.vocab_size = 50257;
    gpt2.seq_len = 256;
    gpt2.n_layer = 8;
    const PipelineShape shape{4, 4, 2};
    const std::vector<PipelinePass> last = make_pipeline_schedule(PipelineScheduleKind::kInterleaved, shape)[3];
    ASSERT_EQ(PipelineRunner::slots_per_chunk(last, 2), (std::vector<int>{4, 4}));
    const std::vector<int> bounds{0, 1, 2, 3, 4, 5, 6, 7, 8};
    const ActivationCount planned =
        PipelineRunner::stage_activations(PipelineScheduleKind::kInterleaved, shape, 3, bounds, gpt2, 4, ActivationRecompute::kNone, 0);
    // What the four head models would hold with every row's logits (1,024 rows, not 256).
    double whole = 0;
    for (int c = 0; c < 2; ++c) {
        const StageBlocks blocks = PipelineRunner::chunk_blocks(bounds, c * 4 + 3);
        whole += 4 * Transformer::activations(gpt2, 4, ActivationRecompute::kNone, 0, 1, false, blocks, 0).bytes(DType::kF32);
    }
    const double saved = 4.0 * (1024 - 256) * gpt2.padded_vocab() * sizeof(float);
    EXPECT_EQ(whole - planned.bytes(DType::kF32), saved) << "bytes the chunked heads save on the last stage";
}

}  // namespace
}  // namespace zt
