// The inference path (Generator: a forward with a key/value cache) against the training
// forward (Transformer, a full recompute over the context): the same logits at every step,
// and greedy decoding with the cache gives the same tokens as greedy decoding without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/generator.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"

#include "model_state_access.hpp"
#include "test_support.hpp"

namespace zt {
namespace {

/// GPT-2: 2 layers, 2 heads of size 4, vocabulary 11 padded to 16, 16 positions.
ModelConfig tiny_gpt2() { return test::model_config(2, 2, 8, 16, 11, 8); }

/// Llama with 4 query heads over n_kv_head key/value heads, an untied head and llama3 RoPE
/// scaling, 16 positions.
ModelConfig tiny_llama(int n_kv_head, bool tied) {
    ModelConfig mc = test::small_llama(n_kv_head, tied, /*llama3=*/true);
    mc.seq_len = 16;
    return mc;
}

/// That Llama (2 key/value heads, untied) as a Mistral with a sliding window of 5: the cache
/// must attend to the last 5 positions, as the training forward does.
ModelConfig tiny_mistral() {
    ModelConfig mc = tiny_llama(2, false);
    mc.arch = ModelArch("mistral");
    mc.sliding_window = 5;
    return mc;
}

/// Weights larger than init so attention and the norms do real work.
void perturb(ModelState& state, const ModelLayout& layout) {
    for (int u = 0; u < layout.num_units(); ++u) {
        float* w = ModelStateTestAccess::unit_params(state, u);
        for (size_t i = 0; i < layout.unit_numel[static_cast<size_t>(u)]; ++i) {
            w[i] += static_cast<float>(0.3 * random_normal(5, 77, static_cast<uint64_t>(u) * 100000 + i));
        }
    }
}

int argmax(const std::vector<float>& row, int V) {
    return static_cast<int>(std::max_element(row.begin(), row.begin() + V) - row.begin());
}

/// The logits tolerance: 1e-5 of the row's scale.
void expect_rows_match(const std::vector<float>& got, const std::vector<float>& want, int V, int step) {
    float scale = 1.f;
    for (int v = 0; v < V; ++v) scale = std::max(scale, std::fabs(want[static_cast<size_t>(v)]));
    float worst = 0.f;
    for (int v = 0; v < V; ++v) {
        worst = std::max(worst, std::fabs(got[static_cast<size_t>(v)] - want[static_cast<size_t>(v)]));
    }
    EXPECT_LE(worst, 1e-5f * scale) << "step " << step;
}

/// Greedy decoding from a 3-token prompt to seq_len, once with the cache and once by the
/// training forward over the whole context each token; logits compared at every step.
void check_greedy(const ModelConfig& mc) {
    auto backend = make_cpu_backend(2);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 11);
    perturb(state, model.layout());
    // Only what this decoding reaches: seq_len - 1 cached positions, 3 rows at a time.
    Generator gen(mc, *backend, 1, mc.seq_len - 1, 3);
    const int V = mc.vocab_size;
    std::vector<float> cached(static_cast<size_t>(mc.padded_vocab()));
    std::vector<float> full(cached.size());

    std::vector<int32_t> with_cache{1, 7, 3};
    std::vector<int32_t> recomputed = with_cache;
    gen.forward(state, with_cache.data(), static_cast<int>(with_cache.size()));
    for (int step = 0; static_cast<int>(with_cache.size()) < mc.seq_len; ++step) {
        gen.logits_row_to_host(0, cached.data());
        const int T = static_cast<int>(recomputed.size());
        model.forward(state, recomputed.data(), nullptr, 1, T, 0.f);
        model.logits_row_to_host(T - 1, full.data());
        expect_rows_match(cached, full, V, step);
        with_cache.push_back(argmax(cached, V));
        recomputed.push_back(argmax(full, V));
        if (static_cast<int>(with_cache.size()) < mc.seq_len) gen.forward(state, &with_cache.back(), 1);
    }
    EXPECT_EQ(with_cache, recomputed);
    EXPECT_EQ(gen.position(), mc.seq_len - 1);
}

/// A prompt run in uneven pieces, every row's logits kept, against one training forward.
void check_prompt_rows(const ModelConfig& mc) {
    auto backend = make_cpu_backend(2);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 3);
    perturb(state, model.layout());
    Generator gen(mc, *backend, mc.seq_len);
    const int T = mc.seq_len;
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) tokens[static_cast<size_t>(t)] = static_cast<int32_t>((5 * t + 2) % mc.vocab_size);
    model.forward(state, tokens.data(), nullptr, 1, T, 0.f);
    std::vector<float> got(static_cast<size_t>(mc.padded_vocab()));
    std::vector<float> want(got.size());
    int pos = 0;
    for (int piece : {5, 1, T - 6}) {
        gen.forward(state, tokens.data() + pos, piece);
        pos += piece;
        for (int r = 0; r < piece; ++r) {
            gen.logits_row_to_host(piece - 1 - r, got.data());
            model.logits_row_to_host(pos - piece + r, want.data());
            expect_rows_match(got, want, mc.vocab_size, pos - piece + r);
        }
    }
    // After reset the cache is overwritten from position 0.
    gen.reset();
    gen.forward(state, tokens.data(), 2);
    gen.logits_row_to_host(0, got.data());
    model.logits_row_to_host(1, want.data());
    expect_rows_match(got, want, mc.vocab_size, 1);
}

/// A shared context, then three branches of different lengths in one forward: every branch
/// row's logits equal the training forward's over context + that branch alone, and the
/// position is still the context's (the cache goes on from it).
void check_branches(const ModelConfig& mc) {
    auto backend = make_cpu_backend(2);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 5);
    perturb(state, model.layout());
    const std::vector<int> lengths{3, 1, 6};
    Generator gen(mc, *backend, 10, 0, 10);
    const std::vector<int32_t> context{4, 9, 2, 7};
    std::vector<int32_t> branches;
    for (int i = 0; i < 10; ++i) branches.push_back(static_cast<int32_t>((3 * i + 1) % mc.vocab_size));
    gen.forward(state, context.data(), static_cast<int>(context.size()), 1);
    gen.forward_branches(state, branches.data(), lengths);
    EXPECT_EQ(gen.position(), 4);
    std::vector<float> got(static_cast<size_t>(mc.padded_vocab()));
    std::vector<float> want(got.size());
    int first = 0;
    for (int len : lengths) {
        std::vector<int32_t> row = context;
        row.insert(row.end(), branches.begin() + first, branches.begin() + first + len);
        model.forward(state, row.data(), nullptr, 1, static_cast<int>(row.size()), 0.f);
        for (int r = 0; r < len; ++r) {
            gen.logits_row_to_host(10 - 1 - (first + r), got.data());
            model.logits_row_to_host(4 + r, want.data());
            expect_rows_match(got, want, mc.vocab_size, 4 + r);
        }
        first += len;
    }
    // The context's cache is intact: a plain forward from it matches the training forward.
    gen.forward(state, branches.data(), 2);
    std::vector<int32_t> row = context;
    row.insert(row.end(), branches.begin(), branches.begin() + 2);
    model.forward(state, row.data(), nullptr, 1, 6, 0.f);
    gen.logits_row_to_host(0, got.data());
    model.logits_row_to_host(5, want.data());
    expect_rows_match(got, want, mc.vocab_size, 5);
}

/// The training forward's logits at `position` of the row `tokens` (one sequence alone).
std::vector<float> alone(Transformer& model, ModelState& state, const std::vector<int32_t>& tokens, int position) {
    model.forward(state, tokens.data(), nullptr, 1, static_cast<int>(tokens.size()), 0.f);
    std::vector<float> want(static_cast<size_t>(model.config().padded_vocab()));
    model.logits_row_to_host(position, want.data());
    return want;
}

/// Two sequences side by side in a cache longer than seq_len (rows 0.. and 9..): their
/// contexts in one forward keeping each one's last row, then branches of both, interleaved,
/// in another. Every kept row equals the training forward over that sequence alone.
void check_side_by_side(const ModelConfig& mc) {
    auto backend = make_cpu_backend(2);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 5);
    perturb(state, model.layout());
    Generator gen(mc, *backend, 8, mc.seq_len + 4, 8);
    const std::vector<int32_t> a{4, 9, 2, 7};
    const std::vector<int32_t> b{1, 3, 5};
    std::vector<int32_t> tokens = a;
    tokens.insert(tokens.end(), b.begin(), b.end());
    gen.forward_spans(state, tokens.data(), {DecodeSpan{0, 0, 4}, DecodeSpan{9, 0, 3}}, 1);
    std::vector<float> got(static_cast<size_t>(mc.padded_vocab()));
    gen.logits_row_to_host(1, got.data());
    expect_rows_match(got, alone(model, state, a, 3), mc.vocab_size, 3);
    gen.logits_row_to_host(0, got.data());
    expect_rows_match(got, alone(model, state, b, 2), mc.vocab_size, 2);
    // Branches: b + {6, 8}, a + {10, 0, 6}, b + {2}.
    const std::vector<std::vector<int32_t>> ends{{6, 8}, {10, 0, 6}, {2}};
    const std::vector<DecodeSpan> spans{{9, 3, 2}, {0, 4, 3}, {9, 3, 1}};
    tokens.clear();
    for (const auto& e : ends) tokens.insert(tokens.end(), e.begin(), e.end());
    gen.forward_spans(state, tokens.data(), spans, 0);
    int row = 0;
    for (size_t s = 0; s < spans.size(); ++s) {
        std::vector<int32_t> seq = spans[s].cache == 0 ? a : b;
        seq.insert(seq.end(), ends[s].begin(), ends[s].end());
        for (int r = 0; r < spans[s].length; ++r, ++row) {
            gen.logits_row_to_host(6 - 1 - row, got.data());
            expect_rows_match(got, alone(model, state, seq, spans[s].pos + r), mc.vocab_size, spans[s].pos + r);
        }
    }
    EXPECT_EQ(gen.position(), 0);
    // A position past seq_len is refused though the cache has the rows.
    EXPECT_THROW(gen.forward_spans(state, tokens.data(), {DecodeSpan{0, mc.seq_len - 1, 2}}, 0), Error);
}

TEST(Generator, Gpt2GreedyWithCacheMatchesRecompute) { check_greedy(tiny_gpt2()); }
TEST(Generator, LlamaGqaGreedyWithCacheMatchesRecompute) { check_greedy(tiny_llama(2, false)); }
TEST(Generator, LlamaMhaTiedGreedyWithCacheMatchesRecompute) { check_greedy(tiny_llama(4, true)); }
TEST(Generator, Gpt2PromptInPiecesMatchesTrainingForward) { check_prompt_rows(tiny_gpt2()); }
TEST(Generator, LlamaPromptInPiecesMatchesTrainingForward) { check_prompt_rows(tiny_llama(1, false)); }
TEST(Generator, MistralWindowGreedyWithCacheMatchesRecompute) { check_greedy(tiny_mistral()); }
TEST(Generator, MistralWindowPromptInPiecesMatchesTrainingForward) { check_prompt_rows(tiny_mistral()); }
TEST(Generator, Gpt2BranchesOverASharedContextMatchTrainingForward) { check_branches(tiny_gpt2()); }
TEST(Generator, LlamaBranchesOverASharedContextMatchTrainingForward) { check_branches(tiny_llama(2, false)); }
TEST(Generator, MistralWindowBranchesMatchTrainingForward) { check_branches(tiny_mistral()); }
TEST(Generator, Gpt2SequencesSideBySideMatchTrainingForward) { check_side_by_side(tiny_gpt2()); }
TEST(Generator, LlamaSequencesSideBySideMatchTrainingForward) { check_side_by_side(tiny_llama(2, false)); }
TEST(Generator, MistralWindowSequencesSideBySideMatchTrainingForward) { check_side_by_side(tiny_mistral()); }

/// LoRA: the adapters (B perturbed away from zero) merged into each block's weights.
ModelConfig with_lora(ModelConfig mc, const char* targets) {
    mc.lora.rank = 2;
    mc.lora.alpha = 3;
    mc.lora.targets = targets;
    return mc;
}
TEST(Generator, Gpt2LoraMatchesTrainingForward) { check_prompt_rows(with_lora(tiny_gpt2(), "c_attn,c_proj,c_fc")); }
TEST(Generator, LlamaLoraMatchesTrainingForward) {
    check_prompt_rows(with_lora(tiny_llama(1, false), "q_proj,v_proj,o_proj,up_proj,down_proj"));
}

TEST(Sampling, GreedyTopKAndTopP) {
    const std::vector<float> logits{1.f, 3.f, 3.f, 2.f, -1.f};
    SamplingOptions greedy;
    greedy.temperature = 0;
    EXPECT_EQ(sample_token(logits.data(), 5, greedy, 1, 0), 1);  // the first of equal maxima
    SamplingOptions top1;
    top1.top_k = 1;
    EXPECT_EQ(sample_token(logits.data(), 5, top1, 1, 0), 1);
    SamplingOptions top2;
    top2.top_k = 2;
    SamplingOptions nucleus;
    nucleus.top_p = 0.5;  // tokens 1 and 2 hold 0.33 each: both needed to reach 0.5
    SamplingOptions tiny_p;
    tiny_p.top_p = 1e-6;
    std::vector<int> seen(5, 0);
    for (uint64_t i = 0; i < 400; ++i) {
        const int a = sample_token(logits.data(), 5, top2, 9, i);
        EXPECT_TRUE(a == 1 || a == 2);
        EXPECT_EQ(a, sample_token(logits.data(), 5, top2, 9, i));  // same draw, same token
        const int b = sample_token(logits.data(), 5, nucleus, 9, i);
        EXPECT_TRUE(b == 1 || b == 2);
        EXPECT_EQ(sample_token(logits.data(), 5, tiny_p, 9, i), 1);
        ++seen[static_cast<size_t>(sample_token(logits.data(), 5, SamplingOptions{}, 9, i))];
    }
    // Temperature 1, no cut: softmax probabilities .05 .39 .39 .14 .01 over 400 draws.
    EXPECT_GT(seen[1], 120);
    EXPECT_GT(seen[2], 120);
    EXPECT_GT(seen[3], 25);
    EXPECT_LT(seen[4], 20);
    // A high temperature flattens the distribution: the least likely token shows up.
    SamplingOptions hot;
    hot.temperature = 50;
    int rare = 0;
    for (uint64_t i = 0; i < 400; ++i) rare += sample_token(logits.data(), 5, hot, 4, i) == 4;
    EXPECT_GT(rare, 40);
}

}  // namespace
}  // namespace zt
