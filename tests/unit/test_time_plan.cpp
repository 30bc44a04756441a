// Unit tests of the planner (issue 53): each time-model formula against hand-computed cases
// (group placement, links, alpha-beta collectives, product rates, overlap, the pipeline's
// clock), a step's phases on a tiny deck, and the mesh search. The cluster description's
// keys and files are test_config.cpp's. No MPI.
#include "ztrain/train/plan_search.hpp"
#include "ztrain/train/time_plan.hpp"

#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/model_layout.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using zt::ClusterConfig;
using zt::Config;
using zt::PlannedCollective;

ClusterConfig h100() {
    ClusterConfig c;
    c.nodes = 2;
    c.ranks_per_node = 8;
    c.device = "gpu";
    c.peak_tflops_fp32 = 67;
    c.peak_tflops_bf16 = 989;
    c.intra_gbps = 450;
    c.intra_latency_us = 3;
    c.inter_gbps = 400;
    c.inter_latency_us = 6;
    c.memory_gbps = 3350;
    return c;
}

/// A cpu node with round figures (the defaults are this machine's measured ones).
ClusterConfig cpu_node() {
    ClusterConfig c;
    c.peak_tflops_fp32 = 0.166;
    c.intra_gbps = 8;
    c.memory_gbps = 12;
    return c;
}

TEST(TimePlanFormula, GroupPlacementFollowsConsecutiveRanks) {
    // 4 consecutive ranks on 8-rank nodes: one node.
    zt::GroupPlacement g = zt::place_group(4, 1, 8);
    EXPECT_EQ(g.nodes, 1);
    EXPECT_EQ(g.ranks_on_node, 4);
    // 4 ranks 8 apart (data ranks under T = 8): one on each of 4 nodes.
    g = zt::place_group(4, 8, 8);
    EXPECT_EQ(g.nodes, 4);
    EXPECT_EQ(g.ranks_on_node, 1);
    // 16 consecutive ranks: two full nodes.
    g = zt::place_group(16, 1, 8);
    EXPECT_EQ(g.nodes, 2);
    EXPECT_EQ(g.ranks_on_node, 8);
    // Ranks 0 and 4 (a pipeline boundary of 4-rank stages) on 8-rank nodes: the same node.
    EXPECT_EQ(zt::place_group(2, 4, 8).nodes, 1);
}

TEST(TimePlanFormula, LinksShareTheNodesPorts) {
    const ClusterConfig c = h100();
    // Inside a node: the GPU's NVLink, whatever the others do.
    zt::Link l = zt::group_link(c, zt::place_group(8, 1, 8), 8);
    EXPECT_FALSE(l.inter_node);
    EXPECT_DOUBLE_EQ(l.bytes_per_s, 450e9);
    EXPECT_DOUBLE_EQ(l.latency_s, 3e-6);
    // A group of whole nodes owns its nodes' 400 GB/s.
    l = zt::group_link(c, zt::place_group(16, 1, 8), 8);
    EXPECT_TRUE(l.inter_node);
    EXPECT_DOUBLE_EQ(l.bytes_per_s, 400e9);
    EXPECT_DOUBLE_EQ(l.latency_s, 6e-6);
    // One rank per node, 8 such groups at once: an eighth each (one 400 Gb/s port = 50 GB/s).
    l = zt::group_link(c, zt::place_group(2, 8, 8), 8);
    EXPECT_DOUBLE_EQ(l.bytes_per_s, 50e9);
    // A cpu node's copies share its bandwidth: 8 GB/s over 2 active ranks.
    EXPECT_DOUBLE_EQ(zt::group_link(cpu_node(), zt::place_group(2, 1, 2), 2).bytes_per_s, 4e9);
}

TEST(TimePlanFormula, CollectivesFollowAlphaBeta) {
    zt::Link l;
    l.latency_s = 1e-6;
    l.bytes_per_s = 1e9;
    // Ring all-reduce of 1 MB over 4: 2*3*1us + 2*3/4*1ms = 1.506 ms; tree: 4us + 2 ms.
    zt::CollectiveTime t = zt::collective_time(PlannedCollective::kAllReduce, 1e6, 4, l);
    EXPECT_EQ(t.algorithm, "ring");
    EXPECT_NEAR(t.seconds, 1.506e-3, 1e-12);
    // 8 bytes over 64: ring 126 us of latency, tree 2*6 us: the tree wins.
    t = zt::collective_time(PlannedCollective::kAllReduce, 8, 64, l);
    EXPECT_EQ(t.algorithm, "tree");
    EXPECT_NEAR(t.seconds, 12e-6 + 16e-9, 1e-15);
    // Reduce-scatter and all-gather: half the ring all-reduce: 3 us + 0.75 ms.
    EXPECT_NEAR(zt::collective_time(PlannedCollective::kReduceScatter, 1e6, 4, l).seconds, 0.753e-3, 1e-12);
    EXPECT_NEAR(zt::collective_time(PlannedCollective::kAllGather, 1e6, 4, l).seconds, 0.753e-3, 1e-12);
    EXPECT_NEAR(zt::collective_time(PlannedCollective::kSendRecv, 1e6, 2, l).seconds, 1.001e-3, 1e-12);
    // One rank: nothing to do.
    EXPECT_EQ(zt::collective_time(PlannedCollective::kAllReduce, 1e6, 1, l).seconds, 0);
}

TEST(TimePlanFormula, ProductRateBySize) {
    ClusterConfig c;
    c.product_efficiency = 0.5;
    c.product_half_gflop = 1;
    // 1 GFLOP at half of 0.5 of 1 TFLOP/s: 2.5e11 FLOP/s, 4 ms.
    EXPECT_NEAR(zt::product_seconds(1e9, 1e12, c), 4e-3, 1e-15);
    // 99 GFLOP: 0.5 * 99/100 of the peak.
    EXPECT_NEAR(zt::product_seconds(99e9, 1e12, c), 99e9 / (0.5 * 0.99 * 1e12), 1e-12);
    // A cpu node's peak is shared by its ranks; a GPU's is its own; bf16 has its own peak.
    EXPECT_DOUBLE_EQ(zt::rank_peak_flops(cpu_node(), zt::DType::kF32, 2), 0.083e12);
    EXPECT_DOUBLE_EQ(zt::rank_peak_flops(h100(), zt::DType::kBF16, 8), 989e12);
    EXPECT_DOUBLE_EQ(zt::rank_memory_bytes_per_s(cpu_node(), 2), 6e9);
}

TEST(TimePlanFormula, OverlapHidesWhatComputeCovers) {
    EXPECT_DOUBLE_EQ(zt::exposed_seconds(10, 4, 1, true), 6);   // 4 of 10 under compute
    EXPECT_DOUBLE_EQ(zt::exposed_seconds(10, 20, 1, true), 1);  // all but the tail
    EXPECT_DOUBLE_EQ(zt::exposed_seconds(10, 20, 1, false), 10);
    EXPECT_DOUBLE_EQ(zt::exposed_seconds(0.5, 20, 1, true), 0.5);  // never more than the total
}

TEST(TimePlanFormula, PipelineBubblePerSchedule) {
    // 1F1B, P = 4, m = 8, F = 1, B = 2: (m + P - 1)(F + B) = 33.
    EXPECT_DOUBLE_EQ(zt::pipeline_makespan(zt::PipelineScheduleKind::k1F1B, 4, 8, 1, 1, 1, 1), 33);
    // Interleaved, 2 chunks of half the cost: bubble (P - 1)(F + B) / v = 4.5 on 24.
    EXPECT_DOUBLE_EQ(zt::pipeline_makespan(zt::PipelineScheduleKind::kInterleaved, 4, 8, 2, 0.5, 0.5, 0.5), 28.5);
    // Zero-bubble: the weight passes fill the bubble, so less than 1F1B's 33.
    EXPECT_LT(zt::pipeline_makespan(zt::PipelineScheduleKind::kZeroBubble, 4, 8, 1, 1, 1, 1), 33);
    // One stage: no bubble.
    EXPECT_DOUBLE_EQ(zt::pipeline_makespan(zt::PipelineScheduleKind::k1F1B, 1, 8, 1, 1, 1, 1), 24);
}

Config tiny_deck() {
    Config c;
    c.data.train = "shards/train_*.bin";
    c.model.n_layer = 2;
    c.model.n_head = 4;
    c.model.n_embd = 64;
    c.model.seq_len = 32;
    c.train.micro_batch = 4;
    c.train.grad_accum = 2;
    return c;
}

double phase_exposed(const zt::TimePlan& p, const std::string& name) {
    for (const zt::TimePhase& ph : p.phases) {
        if (ph.name == name) return ph.exposed_ms;
    }
    return -1;
}

const zt::TimePhase& phase(const zt::TimePlan& p, const std::string& name) {
    for (const zt::TimePhase& ph : p.phases) {
        if (ph.name == name) return ph;
    }
    static const zt::TimePhase none{};
    ADD_FAILURE() << "no phase " << name;
    return none;
}

TEST(TimePlan, OneRankIsComputeAndOptimizer) {
    const Config c = tiny_deck();
    const ClusterConfig cluster;
    const zt::MemoryPlan memory = zt::plan_memory(c, 1, 1, 0, 0, false);
    const zt::TimePlan t = zt::plan_time(c, cluster, 1, 1, memory);
    EXPECT_GT(phase_exposed(t, "products"), 0);
    EXPECT_GT(phase_exposed(t, "optimizer"), 0);
    EXPECT_EQ(phase_exposed(t, "grad all-reduce"), -1);
    double sum = 0;
    for (const zt::TimePhase& p : t.phases) sum += p.exposed_ms;
    EXPECT_DOUBLE_EQ(t.step_ms, sum);
    // The products: a GPT-2 block has 4 (q|k|v, attention output, MLP up, MLP down), each
    // over the micro-batch's 128 rows: (3 + 1 + 4 + 4) C^2 multiply-adds per block.
    EXPECT_NE(t.phases.front().what.find("4 per block"), std::string::npos) << t.phases.front().what;
    const double C = 64, rows = 128;
    const double block_s = zt::product_seconds(2 * rows * 3 * C * C, zt::rank_peak_flops(cluster, zt::DType::kF32, 1), cluster) +
              zt::product_seconds(2 * rows * C * C, zt::rank_peak_flops(cluster, zt::DType::kF32, 1), cluster) +
              2 * zt::product_seconds(2 * rows * 4 * C * C, zt::rank_peak_flops(cluster, zt::DType::kF32, 1), cluster);
    const double head_s = zt::product_seconds(2 * rows * 320 * C, zt::rank_peak_flops(cluster, zt::DType::kF32, 1),
                                              cluster);  // 257 tokens padded to 320 rows
    // 2 micro-batches, forward + 2x backward.
    EXPECT_NEAR(phase_exposed(t, "products"), 1e3 * 2 * 3 * (2 * block_s + head_s), 1e-9);
    const std::string text = zt::format_time_plan(t);
    char last[64];
    std::snprintf(last, sizeof last, "predicted step: %.1f ms\n", t.step_ms);
    EXPECT_EQ(text.substr(text.rfind("predicted step: ")), last);
}

TEST(TimePlan, OversubscribedCpuNodeLendsAWaitingStagesCores) {
    Config c = tiny_deck();
    c.model.n_layer = 4;
    c.parallel.pipeline = 4;
    c.train.grad_accum = 4;
    c.train.threads = 1;
    const zt::MemoryPlan memory = zt::plan_memory(c, 4, 4, 0, 0, false);
    const auto plan_on = [&](int cores, const Config& deck) {
        ClusterConfig k = cpu_node();
        k.ranks_per_node = 4;
        k.cores_per_node = cores;
        return zt::plan_time(deck, k, 4, 4, memory);
    };
    // A core for every thread (0: unknown, or 4): every stage at the rates the phases assume.
    const zt::TimePlan own = plan_on(0, c);
    EXPECT_DOUBLE_EQ(plan_on(4, c).step_ms, own.step_ms);
    // Four one-thread ranks on two cores: half a core each while all compute, which the compute
    // phases keep; a stage in its bubble lends its half, so the others' passes run faster then.
    const zt::TimePlan two = plan_on(2, c);
    EXPECT_DOUBLE_EQ(phase_exposed(two, "products"), phase_exposed(own, "products"));
    EXPECT_LT(phase_exposed(two, "pipeline bubble"), phase_exposed(own, "pipeline bubble"));
    EXPECT_LT(two.step_ms, own.step_ms);
    EXPECT_NE(phase(two, "pipeline bubble").what.find("2 cores for 4 threads"), std::string::npos)
        << phase(two, "pipeline bubble").what;
    EXPECT_NE(phase(two, "pipeline bubble").what.find("(up to 2x faster)"), std::string::npos);
    EXPECT_EQ(phase(own, "pipeline bubble").what.find("cores"), std::string::npos) << phase(own, "pipeline bubble").what;
    // Two threads a rank want eight cores: a quarter each, up to 4x faster in the bubble.
    Config threads2 = c;
    threads2.train.threads = 2;
    EXPECT_NE(phase(plan_on(2, threads2), "pipeline bubble").what.find("2 cores for 8 threads: a waiting stage's cores go "
                                                                        "to the others (up to 4x faster)"),
              std::string::npos);
}

TEST(TimePlan, SixteenBitGradientsPayTheirAccumulationAtStagesZeroAndOne) {
    Config c = tiny_deck();  // 2 micro-steps
    c.precision.dtype = zt::DType::kBF16;
    const ClusterConfig cluster = cpu_node();
    const zt::MemoryPlan memory = zt::plan_memory(c, 1, 1, 0, 0, false);
    const zt::TimePlan t = zt::plan_time(c, cluster, 1, 1, memory);
    double P = 0;  // every parameter trains
    for (const size_t n : zt::make_model_layout(c.model).unit_numel) P += static_cast<double>(n);
    // First micro-step: read 4 B, write 2; the second: read 4 + 2, write 2. At 12 GB/s.
    EXPECT_NEAR(phase_exposed(t, "grad accumulation"), 1e3 * P * (6 + 8) / 12e9, 1e-9);
    c.precision.grad_dtype = zt::DType::kF32;  // backward writes the fp32 gradients itself
    const zt::TimePlan fp32_grads = zt::plan_time(c, cluster, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false));
    EXPECT_EQ(phase_exposed(fp32_grads, "grad accumulation"), -1);
    EXPECT_LT(fp32_grads.step_ms, t.step_ms);
    c.precision.grad_dtype.reset();
    c.parallel.zero_stage = 2;  // each micro-step's reduced shard is added in either way
    EXPECT_EQ(phase_exposed(zt::plan_time(c, cluster, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "grad accumulation"),
              -1);
}

TEST(TimePlan, MuonOrthogonalizesItsShareOfTheMatrices) {
    Config c = tiny_deck();  // GPT-2, 64 wide: per block (192, 64), (64, 64), (256, 64), (64, 256)
    c.train.optimizer = zt::OptimizerKind::kMuon;
    const ClusterConfig cluster;
    const zt::TimePlan t = zt::plan_time(c, cluster, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false));
    const double k = 64;
    const double flops = 5 * ((4 * k * k * 192 + 2 * k * k * k) + (4 * k * k * 64 + 2 * k * k * k) +
                              2 * (4 * k * k * 256 + 2 * k * k * k));
    const double one = zt::product_seconds(flops, zt::rank_peak_flops(cluster, zt::DType::kF32, 1), cluster);
    EXPECT_NEAR(phase_exposed(t, "muon"), 1e3 * c.model.n_layer * one, 1e-9);
    EXPECT_EQ(phase_exposed(t, "muon all-gather"), -1);  // one rank holds every matrix
    c.parallel.zero_stage = 1;  // two ranks: each about half the blocks, after gathering the updates
    const zt::TimePlan z1 = zt::plan_time(c, cluster, 2, 2, zt::plan_memory(c, 2, 2, 0, 0, false));
    const double shared = zt::product_seconds(flops, zt::rank_peak_flops(cluster, zt::DType::kF32, 2), cluster);
    EXPECT_NEAR(phase_exposed(z1, "muon"), 1e3 * c.model.n_layer / 2.0 * shared, 1e-9);
    EXPECT_GT(phase_exposed(z1, "muon all-gather"), 0);
    EXPECT_EQ(phase_exposed(z1, "muon tensor all-gather"), -1);
    // Tensor parallelism: both ranks orthogonalize every whole matrix, from gathered slices;
    // bf16 operands at the bf16 rate.
    Config t2 = c;
    t2.parallel.zero_stage = 0;
    t2.parallel.tensor = 2;
    t2.train.muon_ns_dtype = zt::DType::kBF16;
    const zt::TimePlan tp = zt::plan_time(t2, cluster, 2, 2, zt::plan_memory(t2, 2, 2, 0, 0, false));
    const double bf16 = zt::product_seconds(flops, zt::rank_peak_flops(cluster, zt::DType::kBF16, 2), cluster);
    EXPECT_NEAR(phase_exposed(tp, "muon"), 1e3 * c.model.n_layer * bf16, 1e-9);
    EXPECT_GT(phase_exposed(tp, "muon tensor all-gather"), 0);
    EXPECT_EQ(phase_exposed(tp, "muon all-gather"), -1);
}

TEST(TimePlan, DataParallelAddsTheGradientCollective) {
    const Config c = tiny_deck();
    const ClusterConfig cluster;
    const zt::MemoryPlan memory = zt::plan_memory(c, 2, 2, 0, 0, false);
    const zt::TimePlan ddp = zt::plan_time(c, cluster, 2, 2, memory);
    EXPECT_GT(phase_exposed(ddp, "grad all-reduce"), 0);
    Config z3 = c;
    z3.parallel.zero_stage = 3;
    const zt::TimePlan t3 = zt::plan_time(z3, cluster, 2, 2, zt::plan_memory(z3, 2, 2, 0, 0, false));
    EXPECT_GT(phase_exposed(t3, "param all-gather"), 0);
    EXPECT_GT(phase_exposed(t3, "grad reduce-scatter"), 0);
    // Shard groups of one rank: no scatter or gather, the replicas' all-reduce only.
    Config hybrid = z3;
    hybrid.parallel.shard_group.ranks = 1;
    const zt::TimePlan th = zt::plan_time(hybrid, cluster, 2, 2, zt::plan_memory(hybrid, 2, 2, 0, 0, false));
    EXPECT_EQ(phase_exposed(th, "grad reduce-scatter"), -1);
    EXPECT_EQ(phase_exposed(th, "param all-gather"), -1);
    EXPECT_GT(phase_exposed(th, "replica all-reduce"), 0);
}

// The attention scores' traffic: ztrain's CUDA kernel writes and reads the full (T x T)
// fp32 scores (forward 16 B a pair, +6 B where bf16 copies them into the saved
// probabilities; backward 28 B, 26 with 16-bit ones); the CPU kernel the causal half
// (forward 2, backward 4 elements of the working dtype); a fused kernel none, its
// backward's attention products 2.5x the forward's instead of 2x.
TEST(TimePlan, AttentionScoresTrafficPerKernel) {
    Config c = tiny_deck();  // 2 layers, 4 heads, T = 32, micro-batch 4, 2 micro-batches
    const double pairs = 2 * 4 * 4 * 32.0 * 32.0;  // layers x micro-batch x heads x T x T
    ClusterConfig gpu = h100();
    const auto scores_ms = [&](const Config& deck, const ClusterConfig& cluster) {
        return phase_exposed(zt::plan_time(deck, cluster, 1, 1, zt::plan_memory(deck, 1, 1, 0, 0, false)),
                             "attention scores");
    };
    EXPECT_NEAR(scores_ms(c, gpu), 1e3 * 2 * pairs * (16 + 28) / 3350e9, 1e-12);
    Config bf16 = c;
    bf16.precision.dtype = zt::DType::kBF16;
    EXPECT_NEAR(scores_ms(bf16, gpu), 1e3 * 2 * pairs * (22 + 26) / 3350e9, 1e-12);
    const ClusterConfig cpu = cpu_node();
    EXPECT_NEAR(scores_ms(c, cpu), 1e3 * 2 * pairs / 2 * (2 + 4) * 4 / 12e9, 1e-12);
    ClusterConfig fused = gpu;
    fused.attention_kernel = "fused";
    EXPECT_EQ(scores_ms(c, fused), -1);  // no phase
    const double materialized = phase_exposed(zt::plan_time(c, gpu, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "attention");
    const double flash = phase_exposed(zt::plan_time(c, fused, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "attention");
    EXPECT_NEAR(flash / materialized, 3.5 / 3, 1e-12);
    // A fused kernel at its own fraction of the peak (cluster.attention_efficiency); the
    // materialized products keep the products' rate whatever it says.
    const auto attention_ms = [&](const ClusterConfig& cluster) {
        return phase_exposed(zt::plan_time(c, cluster, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "attention");
    };
    ClusterConfig slower = fused;
    slower.attention_efficiency = 0.4;
    EXPECT_NEAR(attention_ms(slower) / flash, fused.product_efficiency / 0.4, 1e-12);
    ClusterConfig keyed = gpu;
    keyed.attention_efficiency = 0.4;
    EXPECT_DOUBLE_EQ(attention_ms(keyed), materialized);
}

// Eager PyTorch's element-wise ops, counted pass by pass (each op reads its operands and
// writes its result), against hand-counted blocks.
TEST(TimePlanFormula, EagerBlockBytesCountEachOpsPasses) {
    zt::ModelConfig llama;
    llama.arch = zt::ModelArch("llama");
    llama.n_embd = 4096;
    llama.n_head = 32;
    llama.n_kv_head = 8;
    llama.ffn_dim = 14336;
    // bf16: RMSNorm 2+4 (to fp32) 4+4 (square) 4 (mean) 4+4 (normalise) 4+2 (back) 2+2 (weight)
    // = 36 bytes an element, twice; two residual adds of 3 x 2.
    zt::EagerBlockBytes e = zt::eager_block_bytes(llama, 1, 2);
    EXPECT_DOUBLE_EQ(e.per_norm_row, 2 * 36 * 4096.0 + 2 * 6 * 4096.0);
    // Heads merged (2 x 2), rotary over q and k (6 + 8 + 6), repeat_kv's copies of k and v
    // (2 x 2 x (1024 + 4096)), SiLU (4) and the gate's product (6) over the MLP's width.
    const double q = 4096, kv = 1024, F = 14336;
    EXPECT_DOUBLE_EQ(e.per_row, 4 * q + 20 * (q + kv) + 4 * (kv + q) + 10 * F);
    EXPECT_DOUBLE_EQ(e.per_norm_row + e.per_row, 626688);  // 0.63 MB a token a block
    // fp32: no casts; the norm 28 bytes an element, rotary 8.
    e = zt::eager_block_bytes(llama, 1, 4);
    EXPECT_DOUBLE_EQ(e.per_norm_row, 2 * 28 * 4096.0 + 2 * 12 * 4096.0);
    EXPECT_DOUBLE_EQ(e.per_row, 8 * q + 8 * (q + kv) + 8 * (kv + q) + 20 * F);
    // Tensor parallelism splits the per-row part; Qwen3's q and k norms add a norm each.
    zt::ModelConfig qwen3 = llama;
    qwen3.qk_norm = true;
    const zt::EagerBlockBytes t2 = zt::eager_block_bytes(qwen3, 2, 2);
    EXPECT_DOUBLE_EQ(t2.per_row, (4 * q + 20 * (q + kv) + 4 * (kv + q) + 10 * F) / 2 + 36 * (q + kv) / 2);
    // GPT-2: layer_norm one kernel (2 x 2 bytes), transformers' tanh GELU eight ops (36 bytes
    // an element at 2 bytes), over 4C.
    zt::ModelConfig gpt2;
    gpt2.n_embd = 768;
    gpt2.n_head = 12;
    e = zt::eager_block_bytes(gpt2, 1, 2);
    EXPECT_DOUBLE_EQ(e.per_norm_row, 2 * 4 * 768.0 + 2 * 6 * 768.0);
    EXPECT_DOUBLE_EQ(e.per_row, 4 * 768.0 + 36 * 4 * 768.0);
}

// cluster.elementwise = eager times those bytes (and the loss over fp32 logits) at the memory
// bandwidth; cluster.activation_checkpointing = selective_op recomputes every second product
// of a block in its forward order (Llama: k, o and up) and the blocks' element-wise ops.
TEST(TimePlan, EagerElementwiseAndSelectiveOpRecompute) {
    Config c = tiny_deck();
    c.model.arch = zt::ModelArch("llama");
    c.model.n_kv_head = 2;
    c.model.ffn_dim = 96;
    c.precision.dtype = zt::DType::kBF16;
    c.train.grad_accum = 1;
    ClusterConfig gpu = h100();
    gpu.nodes = 1;
    gpu.elementwise = "eager";
    gpu.activation_checkpointing = "selective_op";
    const zt::TimePlan t = zt::plan_time(c, gpu, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false));
    const double rows = 4 * 32, C = 64, kv = 32, F = 96, L = 2, bw = 3350e9;
    const double V = static_cast<double>(c.model.padded_vocab());
    const zt::EagerBlockBytes e = zt::eager_block_bytes(c.model, 1, 2);
    const double blocks_s = L * rows * (e.per_norm_row + e.per_row) / bw;
    const double loss_s = rows * V * (2 + 4 + 8) / bw;
    EXPECT_NEAR(phase_exposed(t, "element-wise"), 1e3 * 3 * (blocks_s + loss_s), 1e-9);
    const double peak = zt::rank_peak_flops(gpu, zt::DType::kBF16, 1);
    auto product = [&](double n) { return zt::product_seconds(2 * rows * n, peak, gpu); };
    const double every_second = L * (product(kv * C) + product(C * C) + product(F * C));
    EXPECT_NEAR(phase_exposed(t, "recompute"), 1e3 * (every_second + blocks_s), 1e-9);
    // Fused kernels move fewer bytes; train.recompute's full recompute costs more.
    ClusterConfig fused = gpu;
    fused.elementwise = "fused";
    EXPECT_LT(phase_exposed(zt::plan_time(c, fused, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "element-wise"),
              phase_exposed(t, "element-wise") / 2);
    ClusterConfig deck = gpu;
    deck.activation_checkpointing = "deck";
    c.train.recompute = zt::ActivationRecompute::kBlocks;
    EXPECT_GT(phase_exposed(zt::plan_time(c, deck, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "recompute"),
              phase_exposed(t, "recompute"));
}

// train.recompute = attention runs each block's attention forward again: a third of the
// attention phase (forward and 2x backward) and the forward's share of the scores' traffic,
// added to the step as they are. A fused kernel keeps no probabilities: nothing to rebuild.
TEST(TimePlan, AttentionRecomputeIsOneAttentionForwardMore) {
    Config c = tiny_deck();
    c.train.grad_accum = 1;
    const ClusterConfig node = cpu_node();
    const zt::TimePlan none = zt::plan_time(c, node, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false));
    c.train.recompute = zt::ActivationRecompute::kAttention;
    const zt::TimePlan attention = zt::plan_time(c, node, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false));
    const double again = phase_exposed(attention, "recompute");
    const double forward_products = phase_exposed(none, "attention") / 3;
    const double scores = phase_exposed(none, "attention scores");
    ASSERT_GT(scores, 0);
    EXPECT_GT(again, forward_products + 0.1 * scores);
    EXPECT_LT(again, forward_products + 0.9 * scores);
    EXPECT_NEAR(attention.step_ms - none.step_ms, again, 1e-9 * none.step_ms);
    c.train.recompute = zt::ActivationRecompute::kBlocks;
    EXPECT_GT(phase_exposed(zt::plan_time(c, node, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "recompute"),
              3 * again);
    ClusterConfig fused = node;
    fused.attention_kernel = "fused";
    c.train.recompute = zt::ActivationRecompute::kAttention;
    EXPECT_LE(phase_exposed(zt::plan_time(c, fused, 1, 1, zt::plan_memory(c, 1, 1, 0, 0, false)), "recompute"), 0)
        << "a fused kernel has no probabilities to rebuild";
}

// Inside a cpu node the collectives' copies use the compute's cores: nothing of them is
// hidden, comm thread or not. A GPU's run on their own engines beside the compute.
TEST(TimePlan, CpuNodeCollectivesAreExposedGpuOnesOverlap) {
    Config z2 = tiny_deck();
    z2.parallel.zero_stage = 2;
    z2.parallel.comm_thread = true;
    const zt::MemoryPlan memory = zt::plan_memory(z2, 2, 2, 0, 0, false);
    const zt::TimePlan cpu = zt::plan_time(z2, ClusterConfig{}, 2, 2, memory);
    EXPECT_DOUBLE_EQ(phase(cpu, "grad reduce-scatter").exposed_ms, phase(cpu, "grad reduce-scatter").total_ms);
    EXPECT_DOUBLE_EQ(phase(cpu, "param all-gather").exposed_ms, phase(cpu, "param all-gather").total_ms);
    const zt::TimePlan gpu = zt::plan_time(z2, h100(), 2, 2, memory);
    EXPECT_LT(phase(gpu, "grad reduce-scatter").exposed_ms, phase(gpu, "grad reduce-scatter").total_ms);
}

// LoRA: the frozen base's products run forward and once backward (no weight gradient), the
// adapters' forward and twice; AdamW and the gradient reduction cover the adapters only, and
// the FLOPs count 4 per base parameter and 6 per adapter parameter.
TEST(TimePlan, LoraCountsTheFrozenBaseOnceBackward) {
    Config full = tiny_deck();
    full.parallel.zero_stage = 1;
    Config lora = full;
    lora.model.lora.rank = 4;
    lora.model.lora.targets = "c_attn";
    const ClusterConfig cluster;
    const zt::TimePlan tf = zt::plan_time(full, cluster, 2, 2, zt::plan_memory(full, 2, 2, 0, 0, false));
    const zt::TimePlan tl = zt::plan_time(lora, cluster, 2, 2, zt::plan_memory(lora, 2, 2, 0, 0, false));
    const double peak = zt::rank_peak_flops(cluster, zt::DType::kF32, 2);
    const double C = 64, rows = 128, r = 4;
    auto product = [&](double weights) { return zt::product_seconds(2 * rows * weights, peak, cluster); };
    const double base = product(3 * C * C) + product(C * C) + 2 * product(4 * C * C);
    const double adapters = product(r * C) + product(3 * C * r);
    const double head = product(320 * C);
    // 2 micro-batches, 2 blocks: the base forward + 1x backward, the adapters forward + 2x.
    EXPECT_NEAR(phase_exposed(tl, "products"), 1e3 * 2 * (2 * (2 * base + 3 * adapters) + 2 * head), 1e-9);
    EXPECT_NEAR(phase_exposed(tf, "products"), 1e3 * 2 * 3 * (2 * base + head), 1e-9);
    EXPECT_NE(phase(tl, "products").what.find("4 per block (+ 2 adapter)"), std::string::npos)
        << phase(tl, "products").what;
    const double adapter_numel = 2 * (r * C + 3 * C * r);
    EXPECT_NE(phase(tl, "optimizer").what.find(zt::str("AdamW over ", adapter_numel / 2 / 1e6, " M")), std::string::npos)
        << phase(tl, "optimizer").what;
    EXPECT_LT(phase_exposed(tl, "grad reduce-scatter"), phase_exposed(tf, "grad reduce-scatter") / 10);
    // After a ZeRO-1 step only the blocks' adapters are gathered (each block's tail summed
    // over the 2 ranks), not the frozen units, nor the blocks' base.
    const zt::Link link = zt::group_link(cluster, zt::place_group(2, 1, 2), 2);
    const double tail_s = zt::collective_time(PlannedCollective::kAllReduce, 4 * adapter_numel / 2, 2, link).seconds;
    EXPECT_NEAR(phase(tl, "param all-gather").total_ms, 1e3 * 2 * tail_s, 1e-9);
    EXPECT_GT(phase(tf, "param all-gather").total_ms, 20 * phase(tl, "param all-gather").total_ms);
    const zt::Family& gpt2 = zt::model_family(full.model);
    EXPECT_DOUBLE_EQ(gpt2.flops_per_token(lora.model) - gpt2.flops_per_token(full.model),
                     -2 * gpt2.parameter_count(full.model) + 6 * adapter_numel);
}

TEST(PlanSearch, RanksFittingMeshesOfTheGlobalBatch) {
    const Config c = tiny_deck();
    zt::PlanSearchOptions options;
    options.cluster_memory = true;
    const zt::PlanSearch s = zt::search_meshes(c, ClusterConfig{}, 2, 2, options);
    EXPECT_EQ(s.global_batch, 8 * 2);  // micro_batch 4 x grad_accum 2 x 2 data ranks
    ASSERT_FALSE(s.fitting.empty());
    for (size_t i = 1; i < s.fitting.size(); ++i) {
        EXPECT_LE(s.fitting[i - 1].time.step_ms, s.fitting[i].time.step_ms);
    }
    // Every candidate keeps the global batch.
    for (const zt::PlanCandidate& p : s.fitting) {
        const int data = 2 / (p.cfg.parallel.tensor * p.cfg.parallel.pipeline);
        EXPECT_EQ(p.cfg.train.micro_batch * p.cfg.train.grad_accum * data, 16) << p.mesh;
    }
    // The deck's own rules refuse some (pipeline 2 with grad_accum 1, ...).
    EXPECT_GT(s.refused, 0);
    // Each recompute mode is a candidate; under a fused kernel, which keeps no
    // probabilities, attention is not (it would be recompute = false again).
    const auto count_attention = [](const zt::PlanSearch& p) {
        return std::count_if(p.fitting.begin(), p.fitting.end(), [](const zt::PlanCandidate& x) {
            return x.cfg.train.recompute == zt::ActivationRecompute::kAttention;
        });
    };
    EXPECT_GT(count_attention(s), 0);
    ClusterConfig fused;
    fused.attention_kernel = "fused";
    EXPECT_EQ(count_attention(zt::search_meshes(c, fused, 2, 2, options)), 0);
}

}  // namespace
