// Tensor parallelism's pieces that need no second rank: the split layouts (every element of
// the unsplit model held by exactly one rank, or by all where whole, with the unsplit
// model's initial values), the vocabulary-parallel cross-entropy against the unsplit one,
// the embedding of another rank's tokens, and the checks of parallel.tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/model/transformer.hpp"

namespace zt {
namespace {

ModelConfig gpt2_small() { return test::model_config(2, 4, 24, 8, 61, 8); }

ModelConfig llama_small() {
    ModelConfig m = test::model_config(2, 4, 32, 8, 61, 8);
    m.arch = ModelArch("llama");
    m.n_kv_head = 2;
    m.ffn_dim = 40;
    m.tie_embeddings = false;
    return m;
}

/// Every rank's units, initialized.
std::vector<std::vector<float>> init_units(const ModelLayout& layout, uint64_t seed) {
    std::vector<std::vector<float>> units;
    for (int u = 0; u < layout.num_units(); ++u) {
        units.emplace_back(layout.unit_numel[static_cast<size_t>(u)]);
        init_unit(layout, u, seed, units.back().data());
    }
    return units;
}

void expect_splits_tile_the_model(const ModelConfig& mc, int T) {
    const ModelLayout whole = make_model_layout(mc);
    const std::vector<std::vector<float>> ref = init_units(whole, 11);
    std::vector<std::vector<int>> held(whole.params.size());  // per tensor element: ranks holding it
    for (size_t i = 0; i < whole.params.size(); ++i) held[i].assign(whole.params[i].numel, 0);
    for (int r = 0; r < T; ++r) {
        const ModelLayout part = make_model_layout(mc, TensorSplit{T, r});
        ASSERT_EQ(part.params.size(), whole.params.size());
        const std::vector<std::vector<float>> mine = init_units(part, 11);
        for (size_t i = 0; i < part.params.size(); ++i) {
            const ParamSpec& p = part.params[i];
            const ParamSpec& w = whole.params[i];
            ASSERT_EQ(p.name, w.name);
            ASSERT_EQ(p.slice.global_shape, w.shape) << p.name;
            EXPECT_EQ(p.numel * (p.slice.split() ? static_cast<size_t>(p.slice.parts) : 1), w.numel) << p.name;
            for (size_t e = 0; e < p.numel; ++e) {
                const size_t g = p.slice.global_offset(e, p.shape);
                ASSERT_LT(g, w.numel) << p.name;
                ++held[i][g];
                const float want = ref[static_cast<size_t>(w.unit)][w.offset + g];
                const float got = mine[static_cast<size_t>(p.unit)][p.offset + e];
                ASSERT_EQ(got, want) << p.name << " element " << g << " at T = " << T << ", rank " << r;
            }
        }
    }
    for (size_t i = 0; i < whole.params.size(); ++i) {
        const ParamSpec& w = whole.params[i];
        const TensorSlice s = make_model_layout(mc, TensorSplit{T, 0}).params[i].slice;
        for (size_t g = 0; g < w.numel; ++g) {
            ASSERT_EQ(held[i][g], s.split() ? s.copies : T) << w.name << " element " << g << " at T = " << T;
        }
    }
}

TEST(TensorSplit, SlicesTileTheUnsplitModelWithItsInitialValues) {
    for (int T : {2, 4}) {
        expect_splits_tile_the_model(gpt2_small(), T);
        expect_splits_tile_the_model(llama_small(), T);  // 2 KV heads: each held by 2 ranks at T = 4
        ModelConfig one_kv = llama_small();
        one_kv.n_kv_head = 1;  // held by every rank
        expect_splits_tile_the_model(one_kv, T);
    }
}

TEST(TensorSplit, SliceRunsMapEveryElementWhereGlobalOffsetSays) {
    ModelConfig one_kv = llama_small();
    one_kv.n_kv_head = 1;
    for (const ModelConfig& mc : {gpt2_small(), llama_small(), one_kv}) {
        const ModelLayout whole = make_model_layout(mc);
        for (int T : {1, 2, 4}) {
            for (int r = 0; r < T; ++r) {
                const ModelLayout part = make_model_layout(mc, TensorSplit{T, r});
                for (int u = 0; u < part.num_units(); ++u) {
                    std::vector<long> where(part.unit_numel[static_cast<size_t>(u)], -1);
                    for (const SliceRun& run : slice_runs(part, whole, u)) {
                        for (size_t i = 0; i < run.length; ++i) where[run.local + i] = static_cast<long>(run.whole + i);
                    }
                    for (size_t k = 0; k < part.params.size(); ++k) {
                        const ParamSpec& p = part.params[k];
                        if (p.unit != u) continue;
                        const size_t base = whole.params[k].offset;
                        for (size_t e = 0; e < p.numel; ++e) {
                            ASSERT_EQ(where[p.offset + e], static_cast<long>(base + p.slice.global_offset(e, p.shape)))
                                << p.name << " element " << e << " at T = " << T << ", rank " << r;
                        }
                    }
                }
            }
        }
    }
}

// The strided groups Muon's tensor assembly copies with: expanded, exactly the slice runs in
// their order; each column slice (a run per row) one group of a run per row.
TEST(TensorSplit, StridedRunsExpandToTheSliceRuns) {
    for (const ModelConfig& mc : {gpt2_small(), llama_small()}) {
        const ModelLayout whole = make_model_layout(mc);
        for (int T : {2, 4}) {
            const ModelLayout part = make_model_layout(mc, TensorSplit{T, T - 1});
            for (int u = 0; u < part.num_units(); ++u) {
                const std::vector<SliceRun> runs = slice_runs(part, whole, u);
                std::vector<SliceRun> expanded;
                for (const StridedRuns& g : strided_runs(runs)) {
                    ASSERT_GE(g.count, 1u);
                    ASSERT_GE(g.local_pitch, g.length);
                    ASSERT_GE(g.whole_pitch, g.length);
                    for (size_t i = 0; i < g.count; ++i) {
                        expanded.push_back({g.local + i * g.local_pitch, g.whole + i * g.whole_pitch, g.length});
                    }
                }
                ASSERT_EQ(expanded.size(), runs.size()) << "unit " << u << " at T = " << T;
                for (size_t i = 0; i < runs.size(); ++i) {
                    EXPECT_EQ(expanded[i].local, runs[i].local) << "run " << i << " of unit " << u << " at T = " << T;
                    EXPECT_EQ(expanded[i].whole, runs[i].whole) << "run " << i << " of unit " << u << " at T = " << T;
                    EXPECT_EQ(expanded[i].length, runs[i].length) << "run " << i << " of unit " << u << " at T = " << T;
                }
            }
            const bool llama = mc.arch == ModelArch("llama");
            const ParamSpec& proj = part.find(llama ? "model.layers.0.mlp.down_proj.weight" : "h.0.mlp.c_proj.weight");
            ASSERT_EQ(proj.slice.dim, 1);
            const std::vector<StridedRuns> groups =
                strided_runs(runs_within(slice_runs(part, whole, proj.unit), proj.offset, proj.offset + proj.numel, true));
            ASSERT_EQ(groups.size(), 1u) << proj.name << " at T = " << T;
            EXPECT_EQ(groups[0].count, proj.shape[0]) << proj.name;
            EXPECT_EQ(groups[0].whole_pitch, proj.shape[1] * static_cast<size_t>(T)) << proj.name;
        }
    }
}

TEST(TensorSplit, GptSplitsHeadsOfQkvAndColumnsOfProjections) {
    const ModelLayout part = make_model_layout(gpt2_small(), TensorSplit{2, 1});
    const ParamSpec& qkv = part.find("h.0.attn.c_attn.weight");
    EXPECT_EQ(qkv.shape, (std::vector<size_t>{36, 24}));
    // Rank 1's first q row is row 12 of the unsplit matrix; its first k row is row 24 + 12.
    EXPECT_EQ(qkv.slice.global_offset(0, qkv.shape), 12u * 24);
    EXPECT_EQ(qkv.slice.global_offset(12 * 24, qkv.shape), 36u * 24);
    const ParamSpec& proj = part.find("h.0.mlp.c_proj.weight");
    EXPECT_EQ(proj.shape, (std::vector<size_t>{24, 48}));
    EXPECT_EQ(proj.slice.global_offset(48, proj.shape), 96u + 48);  // row 1, column 48
    EXPECT_FALSE(part.find("h.0.mlp.c_proj.bias").slice.split());
    EXPECT_FALSE(part.find("wpe.weight").slice.split());
    EXPECT_EQ(part.find("wte.weight").shape, (std::vector<size_t>{32, 24}));
}

/// The vocabulary-parallel cross-entropy over T slices (the group's reductions done here)
/// equals the unsplit one: losses and dlogits, fp32 and bf16 logits, an ignored row, a
/// slice of padded rows only.
void expect_split_ce_matches(DType dt) {
    auto be = make_cpu_backend(1);
    be->set_activation_dtype(dt);
    const int N = 6, V = 37, Vp = 48, T = 4, Vs = Vp / T;  // the last slice: columns 36..47, one real
    std::vector<float> logits(static_cast<size_t>(N) * Vp);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(3 * random_normal(1, 2, i));
    std::vector<int32_t> targets = {0, 36, -1, 11, 12, 35};
    const float dloss = 0.25f;
    const auto stored = [&](const std::vector<float>& x) {
        std::vector<uint16_t> s(x.size());
        if (dt != DType::kF32) convert_from_f32(x.data(), s.data(), x.size(), dt);
        return s;
    };
    // The unsplit reference, on the same (rounded) logits.
    std::vector<float> ref = logits;
    std::vector<uint16_t> ref16 = stored(logits);
    if (dt != DType::kF32) convert_to_f32(ref16.data(), ref.data(), ref.size(), dt);
    std::vector<float> ref_losses(N);
    std::vector<float> ref_in = ref;
    be->softmax_cross_entropy(ref_losses.data(), ActPtr(ref_in.data()), targets.data(), N, V, Vp, dloss);

    std::vector<std::vector<float>> slice(T, std::vector<float>(static_cast<size_t>(N) * Vs));
    for (int r = 0; r < T; ++r) {
        for (int i = 0; i < N; ++i) {
            for (int c = 0; c < Vs; ++c) {
                slice[r][static_cast<size_t>(i * Vs + c)] = ref[static_cast<size_t>(i * Vp + r * Vs + c)];
            }
        }
    }
    std::vector<std::vector<uint16_t>> slice16(T);
    const auto ptr = [&](int r) {
        if (dt == DType::kF32) return ActPtr(slice[r].data());
        return ActPtr(slice16[r].data(), dt);
    };
    for (int r = 0; r < T; ++r) slice16[r] = stored(slice[r]);
    const auto live = [&](int r) { return std::max(0, std::min(Vs, V - r * Vs)); };
    std::vector<float> mx(N, -INFINITY), sums(2 * N, 0.f);
    for (int r = 0; r < T; ++r) {
        std::vector<float> m(N);
        be->cross_entropy_row_max(m.data(), ptr(r), N, live(r), Vs);
        for (int i = 0; i < N; ++i) mx[i] = std::max(mx[i], m[i]);
    }
    for (int r = 0; r < T; ++r) {
        std::vector<float> s(2 * N);
        be->cross_entropy_row_sums(s.data(), ptr(r), mx.data(), targets.data(), N, live(r), Vs, r * Vs);
        for (int i = 0; i < 2 * N; ++i) sums[i] += s[i];
    }
    for (int r = 0; r < T; ++r) {
        std::vector<float> losses(N);
        be->split_cross_entropy(losses.data(), ptr(r), mx.data(), sums.data(), targets.data(), N, live(r), Vs, r * Vs,
                                dloss);
        if (dt != DType::kF32) convert_to_f32(slice16[r].data(), slice[r].data(), slice[r].size(), dt);
        for (int i = 0; i < N; ++i) {
            EXPECT_NEAR(losses[i], ref_losses[i], 2e-6 * std::fabs(ref_losses[i]) + 1e-6)
                << "row " << i << " rank " << r;
            for (int c = 0; c < Vs; ++c) {
                const float want = ref_in[static_cast<size_t>(i * Vp + r * Vs + c)];
                const float got = slice[r][static_cast<size_t>(i * Vs + c)];
                const float tol = dt == DType::kF32 ? 1e-7f : std::fabs(want) * 0.0079f + 1e-9f;
                EXPECT_NEAR(got, want, tol) << dtype_name(dt) << " dlogit row " << i << " column " << r * Vs + c;
            }
        }
    }
}

TEST(TensorSplit, VocabParallelCrossEntropyEqualsTheUnsplitOne) {
    expect_split_ce_matches(DType::kF32);
    expect_split_ce_matches(DType::kBF16);
}

TEST(TensorSplit, EmbeddingOfAnotherRanksTokensIsPositionsOnly) {
    auto be = make_cpu_backend(1);
    const int C = 4, T = 3;
    std::vector<float> wte = {1, 2, 3, 4, 5, 6, 7, 8};  // two rows
    std::vector<float> wpe(static_cast<size_t>(T * C));
    for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = 0.5f * static_cast<float>(i);
    const std::vector<int32_t> tokens = {1, -1, 0};
    std::vector<float> out(static_cast<size_t>(T * C), 99.f);
    be->encoder_forward(ActPtr(out.data()), tokens.data(), wte.data(), wpe.data(), 1, T, C);
    for (int c = 0; c < C; ++c) {
        EXPECT_EQ(out[static_cast<size_t>(c)], wte[static_cast<size_t>(4 + c)] + wpe[static_cast<size_t>(c)]);
        EXPECT_EQ(out[static_cast<size_t>(C + c)], wpe[static_cast<size_t>(C + c)]) << "token -1: positions only";
        EXPECT_EQ(out[static_cast<size_t>(2 * C + c)],
                  wte[static_cast<size_t>(c)] + wpe[static_cast<size_t>(2 * C + c)]);
    }
    be->encoder_forward(ActPtr(out.data()), tokens.data(), wte.data(), nullptr, 1, T, C);
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[static_cast<size_t>(C + c)], 0.f) << "token -1 without positions";
    std::vector<float> dwte(8, 0.f), dwpe(static_cast<size_t>(T * C), 0.f);
    std::vector<float> dout(static_cast<size_t>(T * C), 1.f);
    be->encoder_backward(dwte.data(), dwpe.data(), ConstActPtr(dout.data()), tokens.data(), 1, T, C);
    for (int c = 0; c < C; ++c) {
        EXPECT_EQ(dwte[static_cast<size_t>(c)], 1.f);
        EXPECT_EQ(dwte[static_cast<size_t>(4 + c)], 1.f) << "token -1 adds nothing to wte";
        EXPECT_EQ(dwpe[static_cast<size_t>(C + c)], 1.f) << "but its position gets its gradient";
    }
}

/// validate()'s message for cfg, "" when it passes.
std::string validate_error(const Config& c) {
    try {
        validate(c);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

TEST(TensorSplit, ConfigChecksNameTheKey) {
    Config c;
    c.data.train = "shards/train_*.bin";
    c.parallel.tensor = 2;
    EXPECT_EQ(validate_error(c), "");
    c.parallel.tensor = 0;
    EXPECT_NE(validate_error(c).find("parallel.tensor"), std::string::npos) << validate_error(c);
    c.parallel.tensor = 3;  // 4 heads
    EXPECT_NE(validate_error(c).find("model.n_head"), std::string::npos) << validate_error(c);
    c.parallel.tensor = 2;
    c.model.vocab_pad_to = 1;
    c.model.vocab_size = 257;
    EXPECT_NE(validate_error(c).find("model.vocab_pad_to"), std::string::npos) << validate_error(c);
    c.model = llama_small();
    c.model.n_kv_head = 1;  // shared by both ranks
    EXPECT_EQ(validate_error(c), "");
    c.model.n_head = 12;
    c.model.n_embd = 48;
    c.model.n_kv_head = 6;  // neither a multiple nor a divisor of 4
    c.parallel.tensor = 4;
    EXPECT_NE(validate_error(c).find("model.n_kv_head"), std::string::npos) << validate_error(c);
    c.model = llama_small();
    c.model.ffn_dim = 41;
    c.parallel.tensor = 2;
    EXPECT_NE(validate_error(c).find("model.ffn_dim"), std::string::npos) << validate_error(c);
    c.model = llama_small();
    c.parallel.sequence = true;
    EXPECT_EQ(validate_error(c), "");
    c.model.seq_len = 9;
    EXPECT_NE(validate_error(c).find("model.seq_len"), std::string::npos) << validate_error(c);
    c.model.seq_len = 8;
    c.parallel.tensor = 1;
    EXPECT_NE(validate_error(c).find("parallel.sequence"), std::string::npos) << validate_error(c);
}

TEST(TensorSplit, ActivationsPerRankShrinkWithTheSplit) {
    // Split buffers (q|k|v, attention, MLP, logits) divide by T; the residual stream's do not.
    const ModelConfig m = gpt2_small();
    const ActivationCount one = Transformer::activations(m, 2, ActivationRecompute::kNone, 0, 1);
    const ActivationCount two = Transformer::activations(m, 2, ActivationRecompute::kNone, 0, 2);
    const double BT = 2.0 * m.seq_len;
    const double C = m.n_embd;
    const double whole = m.n_layer * 4 * BT * C + 4 * BT * C;  // ln1, residual2, ln2, output; driver
    const double split1 = one.act - whole;
    EXPECT_DOUBLE_EQ(two.act - whole, split1 / 2);
    EXPECT_DOUBLE_EQ(two.f32 - one.f32, 3 * BT) << "the cross-entropy's row maxima and sums";
}

/// A tensor group that only names its split: enough to build a model, which runs no
/// collective until its first forward.
class SplitOnlyGroup final : public TensorGroup {
  public:
    explicit SplitOnlyGroup(TensorSplit split) : m_split(split) {}
    TensorSplit split() const override { return m_split; }
    void all_reduce(ActPtr, size_t) override { fail(); }
    void all_reduce_floats(float*, size_t, bool) override { fail(); }
    void all_gather_host(const float*, float*, size_t) override { fail(); }
    void all_gather(ConstActPtr, ActPtr, size_t) override { fail(); }
    void reduce_scatter(ConstActPtr, ActPtr, size_t) override { fail(); }

  private:
    static void fail() { throw Error("SplitOnlyGroup: no collectives"); }
    TensorSplit m_split;
};

// Sequence parallelism keeps 1/T of the rows of what tensor parallelism leaves whole: per
// block the norms' outputs, residual2 and the output (and the norms' statistics); the
// embedding's output and d residual; the final norm's statistics. It adds the reduce-scattered
// gradient (BT C / T) and the norms' weight gradients (4 C floats); the final norm's output
// and d final norm stay whole (the LM head reads every row). The constructor allocates what
// the count says (it checks; a model is built here at every case).
TEST(TensorSplit, SequenceParallelismDividesTheWholeRowsByT) {
    auto backend = make_cpu_backend(1);
    for (const ModelConfig& m : {gpt2_small(), llama_small()}) {
        const bool llama = m.arch == ModelArch("llama");
        const char* name = llama ? "llama" : "gpt2";
        const int stats_per_block = llama ? 2 : 4;  // RMSNorm: rstd; LayerNorm: mean and rstd
        const int final_stats = llama ? 1 : 2;
        const double BT = 2.0 * m.seq_len;
        const double C = m.n_embd;
        for (const int T : {2, 4}) {
            for (const bool recompute : {false, true}) {
                const ActivationRecompute what = recompute ? ActivationRecompute::kBlocks : ActivationRecompute::kNone;
                const ActivationCount tp = Transformer::activations(m, 2, what, 0, T, false);
                const ActivationCount sp = Transformer::activations(m, 2, what, 0, T, true);
                const double rows_per_block = recompute ? 1 : m.n_layer;  // the blocks with all their slots
                const double whole_act = rows_per_block * 3 * BT * C + m.n_layer * BT * C + 2 * BT * C;
                EXPECT_DOUBLE_EQ(tp.act - sp.act, whole_act * (1 - 1.0 / T) - BT * C / T)
                    << name << " T = " << T << (recompute ? " recompute" : "");
                const double whole_f32 = rows_per_block * stats_per_block * BT + final_stats * BT;
                EXPECT_DOUBLE_EQ(tp.f32 - sp.f32, whole_f32 * (1 - 1.0 / T) - 4 * C)
                    << name << " T = " << T << (recompute ? " recompute" : "");
                for (const int rank : {0, T - 1}) {
                    SplitOnlyGroup group(TensorSplit{T, rank});
                    EXPECT_NO_THROW(Transformer(m, *backend, 2, TransformerOptions().with_recompute(recompute).with_tensor(&group, true)))
                        << name << " T = " << T;
                }
            }
        }
    }
}

}  // namespace
}  // namespace zt
