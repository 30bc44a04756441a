// The ZeRO memory formulas (parallel/zero_memory.hpp) against what a ModelState allocates:
// at N = 1 (the default model) every kind is exact once P counts the padded unit buffers, for every stage and
// working dtype; the formula text and the model-state total follow the ZeRO paper.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"
#include "ztrain/parallel/shard_layout.hpp"
#include "ztrain/parallel/zero_memory.hpp"
#include "ztrain/train/memory_plan.hpp"

namespace zt {
namespace {

/// The default model as a Llama: 4 query heads over 2 key/value heads, untied head.
ModelConfig llama_model() {
    ModelConfig m;
    m.arch = ModelArch("llama");
    m.n_kv_head = 2;
    m.ffn_dim = 344;
    m.tie_embeddings = false;
    return m;
}

TEST(ZeroMemory, FormulasMatchModelStateBytesOnOneRank) {
  for (const ModelConfig& mc : {ModelConfig{}, llama_model()}) {
    const ModelLayout layout = make_model_layout(mc);  // the default model: 4 layers, 128 wide
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    for (const DType work : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (int stage = 0; stage <= 3; ++stage) {
            ModelState state(layout, *backend, self_communicator(),
                             StateOptions::zero(stage).with_seed(1).in(work, work));
            size_t padded = 0;  // P as the buffers hold it: units padded for sharding
            for (const UnitShard& s : state.shard_plan().shards()) padded += s.padded_numel;
            const StateBytes sb = state.bytes();
            const ZeroMemoryFormulas f = zero_memory_formulas(stage, 1, padded, work);
            const std::string what = std::string(dtype_name(work)) + " stage " + std::to_string(stage);
            EXPECT_EQ(static_cast<double>(sb.params), f.params.bytes) << what;
            EXPECT_EQ(static_cast<double>(sb.grads), f.grads.bytes) << what;
            EXPECT_EQ(static_cast<double>(sb.master), f.master.bytes) << what;
            EXPECT_EQ(static_cast<double>(sb.optimizer), f.optimizer.bytes) << what;
            EXPECT_EQ(static_cast<double>(sb.model_state()), f.model_state.bytes) << what;
        }
    }
  }
}

TEST(MemoryPlan, ModelStatePlanIsWhatTheStateAllocates) {
    // plan_bytes sizes nothing it does not share with the allocation: every kind, every
    // stage and dtype, with a wire dtype that differs from the working one too.
  for (const ModelConfig& mc : {ModelConfig{}, llama_model()}) {
    const ModelLayout layout = make_model_layout(mc);
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    for (const DType work : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (const DType reduce : {work, DType::kF32}) {
            for (int stage = 0; stage <= 3; ++stage) {
                ModelState state(layout, *backend, self_communicator(),
                                 StateOptions::zero(stage).with_buckets(4096).with_seed(1).in(work, reduce));
                const StateBytes got = state.bytes();
                const StateBytes plan = ModelState::plan_bytes(layout, 1, StateOptions::zero(stage).in(work, reduce));
                const std::string what = std::string(dtype_name(work)) + "/" + dtype_name(reduce) + " stage " +
                                         std::to_string(stage);
                EXPECT_EQ(plan.params, got.params) << what;
                EXPECT_EQ(plan.grads, got.grads) << what;
                EXPECT_EQ(plan.master, got.master) << what;
                EXPECT_EQ(plan.optimizer, got.optimizer) << what;
                EXPECT_EQ(plan.scratch, got.scratch) << what;
            }
        }
    }
  }
}

TEST(MemoryPlan, ActivationPlanIsWhatTheModelAllocates) {
    std::unique_ptr<Backend> backend = make_cpu_backend(2);
  for (const ModelConfig& cfg : {ModelConfig{}, llama_model()}) {
    for (const ActivationRecompute recompute :
         {ActivationRecompute::kNone, ActivationRecompute::kAttention, ActivationRecompute::kBlocks}) {
        for (const int batch : {1, 3}) {
            const ActivationCount plan = Transformer::activations(
                cfg, batch, recompute, backend->attention_scratch_floats(batch, cfg.seq_len, cfg.n_head));
            double fp32_bytes = 0;
            for (const DType t : {DType::kF32, DType::kBF16}) {
                Transformer model(cfg, *backend, batch, TransformerOptions().with_recompute(recompute).with_activation(t));
                const double got = static_cast<double>(model.activation_bytes());
                EXPECT_EQ(plan.bytes(t), got)
                    << dtype_name(t) << ", batch " << batch << ", recompute " << setting_text(recompute);
                if (t == DType::kF32) fp32_bytes = got;
                // 16-bit storage halves everything but the fp32 items (statistics, losses,
                // the attention scratch, the rotary table).
                if (t != DType::kF32) {
                    EXPECT_EQ(got, fp32_bytes - 2.0 * (plan.act + plan.probs))
                        << "bf16 activations " << got << " bytes vs fp32 " << fp32_bytes << ", batch " << batch;
                }
            }
        }
    }
  }
}

// The plan's closed-form parameter count (behind the FLOPs per step and the ZeRO formulas)
// is the manifest's, for both families; SmolLM2-135M's deck gives Hugging Face's count.
TEST(MemoryPlan, ClosedFormParameterCountIsTheManifests) {
    ModelConfig tied = llama_model();
    tied.tie_embeddings = true;
    tied.vocab_size = 1000;  // padded rows count: the plan sizes what is allocated
    for (const ModelConfig& mc : {ModelConfig{}, llama_model(), tied}) {
        Config cfg;
        cfg.model = mc;
        const MemoryPlan plan = plan_memory(cfg, 1, 1, 0, 0, false);
        double params = 0;
        for (const ParamSpec& p : make_model_layout(mc).params) params += static_cast<double>(p.numel);
        const double per_token = plan.flops_per_step / plan.tokens_per_step;
        EXPECT_DOUBLE_EQ(per_token, 6 * params + 12.0 * mc.n_layer * mc.seq_len * mc.n_embd) << setting_text(mc.arch);
    }
    const Config smol = parse_deck_text(test::read_file(ZT_SOURCE_DIR "/inputs/smollm2_135m.ini"), "smollm2_135m.ini");
    double params = 0;
    for (const ParamSpec& p : make_model_layout(smol.model).params) params += static_cast<double>(p.numel);
    EXPECT_EQ(params, 134515008.0);
}

// 16-bit activations without 16-bit products (fp16 always on the CPU; bf16 without bf16
// instructions): the products' operands widened to fp32 are one scratch at the largest
// product's need. The default model (4 x 128, seq 128, micro_batch 4): the MLP's projection
// back (512 -> 128) over 512 rows needs 512 x (2 x 512 + 128) floats, more than c_fc's
// 512 x (2 x 128 + 512) or the head's.
TEST(MemoryPlan, SixteenBitProductsWithoutThemCountTheirWidenedOperands) {
    EXPECT_EQ(cpu_widened_operand_floats(512, 512, 128), 512u * 1152u);
    // Above 4M floats a block of rows, a multiple of 16: the GPT-2 head over 4096 rows.
    EXPECT_EQ(cpu_widened_operand_floats(4096, 768, 50304), 80u * 51840u);
    const auto operands = [](DType act) {
        Config cfg;
        cfg.precision.dtype = act;
        for (const MemoryItem& i : plan_memory(cfg, 1, 1, 0, 0, false).items) {
            if (i.name == "operands") return i.bytes;
        }
        return -1.0;
    };
    EXPECT_EQ(operands(DType::kF16), 512.0 * 1152 * sizeof(float));
    EXPECT_EQ(operands(DType::kF32), -1.0);
    EXPECT_EQ(operands(DType::kBF16), cpu_bf16_products().native ? -1.0 : 512.0 * 1152 * sizeof(float));
}

// parallel.bucket_mb = 0: an eighth of the gradients' wire bytes, between 1 and 25 MiB; a
// size given is taken as it is.
TEST(MemoryPlan, DdpBucketIsAnEighthOfTheGradientsWithin1To25MiB) {
    const double MiB = 1048576.0;
    EXPECT_EQ(ddp_bucket_bytes(1e6), 1 * MiB);
    EXPECT_EQ(ddp_bucket_bytes(80 * MiB), 10 * MiB);
    EXPECT_EQ(ddp_bucket_bytes(4e9), 25 * MiB);
    Config cfg;
    cfg.model.n_layer = 2;
    cfg.precision.dtype = DType::kBF16;  // the wire dtype follows it
    const MemoryPlan automatic = plan_memory(cfg, 2, 2, 0, 0, false);
    double params = 0;
    for (const ParamSpec& p : make_model_layout(cfg.model).params) params += static_cast<double>(p.numel);
    EXPECT_EQ(automatic.bucket_bytes, ddp_bucket_bytes(params * 2));
    cfg.parallel.bucket_mb = 0.5;
    EXPECT_EQ(plan_memory(cfg, 2, 2, 0, 0, false).bucket_bytes, 0.5 * MiB);
}

// DDP on the host: Open MPI's non-blocking all-reduce copies each bucket, and the reducer keeps
// at most overlap_depth + 1 buckets in flight, oldest completed first, so the plan's "mpi
// buffers" is the largest sum of that many consecutive buckets (the arena when it is smaller).
TEST(MemoryPlan, DdpMpiBuffersAreTheBucketsInFlight) {
    Config cfg;
    cfg.model.n_layer = 4;
    cfg.parallel.bucket_mb = 0.25;
    const auto mpi_buffers = [](const MemoryPlan& plan) {
        for (const MemoryItem& i : plan.items) {
            if (i.name == "mpi buffers") return i.bytes;
        }
        return -1.0;
    };
    const MemoryPlan plan = plan_memory(cfg, 2, 2, 0, 0, false);
    const ModelLayout layout = make_model_layout(cfg.model);
    const ShardPlan shards(layout.unit_numel, 2, ShardingPolicy::zero_stage(0), trainable_begins(layout));
    std::vector<size_t> extents;
    for (int u = 0; u < shards.num_units(); ++u) extents.push_back(shards.grad_extent(u));
    const std::vector<GradBucket> buckets = make_grad_buckets(extents, 0.25 * 1048576 / 4, true);
    const size_t K = static_cast<size_t>(plan.overlap_depth + 1);
    ASSERT_GT(buckets.size(), K + 1) << "the deck must have more buckets than fly at once";
    double arena = 0, most = 0;
    for (size_t i = 0; i < buckets.size(); ++i) {
        arena += 4.0 * buckets[i].numel;
        double sum = 0;
        for (size_t j = i; j < buckets.size() && j < i + K; ++j) sum += 4.0 * buckets[j].numel;
        most = std::max(most, sum);
    }
    EXPECT_DOUBLE_EQ(mpi_buffers(plan), most);
    EXPECT_LT(most, arena);
    cfg.parallel.bucket_mb = 1024;  // one bucket: the arena
    EXPECT_DOUBLE_EQ(mpi_buffers(plan_memory(cfg, 2, 2, 0, 0, false)), arena);
}

TEST(MemoryPlan, CheckpointSnapshotPlanIsWhatTheSnapshotAllocates) {
    // checkpoint.async's host snapshot: the plan item is what CheckpointSnapshot allocates
    // (12 bytes per primary element: master, m, v) at every stage, and absent when saves
    // are synchronous. At N ranks the item is the largest rank's share. A LoRA run saves
    // its adapters only (the frozen base is not in its checkpoints).
    Config cfg;
    cfg.model = test::model_config(2, 2, 32, 16, 50);
    cfg.train.max_steps = 100;
    cfg.checkpoint.every = 10;  // periodic saves before the end: the async ones
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    const auto item = [](const MemoryPlan& plan) {
        for (const MemoryItem& i : plan.items) {
            if (i.name == "ckpt snapshot") return i.bytes;
        }
        return -1.0;
    };
    double full_model = 0;
    for (const int rank : {0, 4}) {
        cfg.model.lora.rank = rank;
        cfg.model.lora.targets = "c_attn";
        const ModelLayout layout = make_model_layout(cfg.model);
        for (int stage = 0; stage <= 3; ++stage) {
            const std::string what = str("stage ", stage, rank ? ", LoRA" : "");
            cfg.parallel.zero_stage = stage;
            ModelState state(layout, *backend, self_communicator(),
                             StateOptions::zero(stage).with_buckets(4096).with_seed(1));
            const CheckpointSnapshot snapshot(state);
            cfg.checkpoint.async = true;
            EXPECT_EQ(item(plan_memory(cfg, 1, 1, 0, 0, false)), static_cast<double>(snapshot.bytes())) << what;
            if (rank == 0 && stage == 0) full_model = static_cast<double>(snapshot.bytes());
            if (rank > 0) {
                EXPECT_LT(3 * static_cast<double>(snapshot.bytes()), full_model) << what;
            }
            const ShardPlan four(layout.unit_numel, 4, ShardingPolicy::zero_stage(stage), trainable_begins(layout));
            double largest = 0;
            for (int r = 0; r < 4; ++r) largest = std::max(largest, static_cast<double>(CheckpointSnapshot::planned_bytes(four, r)));
            EXPECT_EQ(item(plan_memory(cfg, 4, 4, 0, 0, false)), largest) << what << ", 4 ranks";
            if (stage == 0) {
                EXPECT_EQ(largest, static_cast<double>(snapshot.bytes())) << "DDP: rank 0 saves everything";
            } else {
                EXPECT_LE(largest, static_cast<double>(snapshot.bytes())) << what << ": a ZeRO rank saves a part";
            }
            // Only the last save (synchronous whatever checkpoint.async says): no snapshot.
            for (const int every : {0, 100, 150}) {
                cfg.checkpoint.every = every;
                EXPECT_EQ(item(plan_memory(cfg, 1, 1, 0, 0, false)), -1.0) << "checkpoint.every = " << every;
            }
            cfg.checkpoint.every = 10;
            cfg.checkpoint.async = false;
            EXPECT_EQ(item(plan_memory(cfg, 1, 1, 0, 0, false)), -1.0) << "no snapshot for synchronous saves";
        }
    }
}

// Pipeline parallelism: each stage is planned over its own units (its chunks' blocks; unit 0
// on the first and the last) and its models in flight, and the plan keeps the stage that
// needs the most. Its state items (the scratch too: at ZeRO-2/3 the stage's whole gradients,
// reduced once per step) are what a ModelState over the stage's layout allocates,
// its snapshot what CheckpointSnapshot allocates (the last stage saves no unit 0), and a
// node holding both stages' ranks counts each rank's own stage.
TEST(MemoryPlan, PipelineStagesArePlannedEachAndTheLargestKept) {
    Config cfg;
    // 8 blocks: a stage has more units than reductions in flight, so keeping every unit's
    // gradient through the step (ZeRO-2/3) shows in the scratch.
    cfg.model = test::model_config(8, 2, 32, 16, 50);
    cfg.train.max_steps = 100;
    cfg.train.grad_accum = 4;
    cfg.checkpoint.every = 10;
    cfg.checkpoint.async = true;
    cfg.parallel.pipeline = 2;
    const auto item = [](const MemoryPlan& plan, const std::string& name) {
        for (const MemoryItem& i : plan.items) {
            if (i.name == name) return i.bytes;
        }
        return -1.0;
    };
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    const ModelLayout whole = make_model_layout(cfg.model);
    for (const PipelineSchedule schedule :
         {PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved, PipelineSchedule::kZeroBubble}) {
        cfg.parallel.schedule = schedule;
        const PipelineStages split = pipeline_blocks(cfg);
        const PipelineShape shape{2, 4, cfg.parallel.chunks()};
        for (int zero = 0; zero <= 3; ++zero) {
            cfg.parallel.zero_stage = zero;
            const std::string what = str(setting_text(schedule), " ZeRO-", zero);
            const MemoryPlan plan = plan_memory(cfg, 2, 2, 0, 0, false);
            ASSERT_EQ(plan.stage_per_rank.size(), 2u) << what;
            EXPECT_EQ(plan.pipeline, 2) << what;
            EXPECT_EQ(plan.per_rank(), std::max(plan.stage_per_rank[0], plan.stage_per_rank[1])) << what;
            EXPECT_EQ(plan.per_rank(), plan.stage_per_rank[static_cast<size_t>(plan.pipeline_stage)]) << what;
            EXPECT_DOUBLE_EQ(plan.per_node(), plan.stage_per_rank[0] + plan.stage_per_rank[1]) << what;
            const int s = plan.pipeline_stage;
            const ModelLayout layout = PipelineRunner::stage_state_layout(whole, shape, s, split.first_layer);
            // As PipelineTraining makes it: ZeRO-2/3 keep the stage's whole gradients through
            // the step and reduce-scatter them once.
            ModelState state(layout, *backend, StateComms{self_communicator(), self_communicator()},
                             StateOptions::zero(zero)
                                 .with_buckets(4096)
                                 .with_seed(1)
                                 .with_overlap_depth(plan.overlap_depth)
                                 .reduced_once_per_step());
            const StateBytes got = state.bytes();
            EXPECT_EQ(item(plan, "scratch"), static_cast<double>(got.scratch)) << what << " stage " << s;
            EXPECT_EQ(item(plan, "params"), static_cast<double>(got.params)) << what << " stage " << s;
            EXPECT_EQ(item(plan, "grads"), static_cast<double>(got.grads)) << what << " stage " << s;
            EXPECT_EQ(item(plan, "optimizer"), static_cast<double>(got.optimizer)) << what << " stage " << s;
            EXPECT_EQ(item(plan, "ckpt snapshot"), static_cast<double>(CheckpointSnapshot(state).bytes()))
                << what << " stage " << s;
            const double act = PipelineRunner::stage_activations(pipeline_schedule_kind(schedule), shape, s,
                                                                 split.first_layer, cfg.model, cfg.train.micro_batch,
                                                                 ActivationRecompute::kNone, 0)
                                   .bytes(DType::kF32);
            EXPECT_EQ(item(plan, "activations"), act) << what << " stage " << s;
        }
    }
    // The last stage's snapshot leaves out unit 0, which the first stage saves.
    const ModelLayout last = PipelineRunner::stage_state_layout(whole, PipelineShape{2, 4, 1}, 1, {0, 4, 8});
    const ShardPlan one(last.unit_numel, 1, ShardingPolicy::zero_stage(1));
    EXPECT_LT(CheckpointSnapshot::planned_bytes(one, 0, last.stage), CheckpointSnapshot::planned_bytes(one, 0));
}

// A plan for a flash-style attention kernel (cluster.attention_kernel = fused: a described
// system, not ztrain's kernels) keeps no (T x T) probabilities, only each query row's
// log-sum-exp (fp32): blocks kept x B x heads x T (T - 1) elements fewer. With recompute one
// block's; a pipeline stage's micro-batches in flight each.
TEST(MemoryPlan, AFusedAttentionKernelKeepsNoProbabilities) {
    Config cfg;
    cfg.model = test::model_config(4, 2, 32, 16, 50);
    cfg.train.micro_batch = 3;
    const auto activations = [](const MemoryPlan& plan) {
        for (const MemoryItem& i : plan.items) {
            if (i.name == "activations") return i.bytes;
        }
        return -1.0;
    };
    const double B = 3, NH = cfg.model.n_head, T = cfg.model.seq_len;
    const double per_block = B * NH * T * T * sizeof(float) - B * NH * T * sizeof(float);
    for (const bool recompute : {false, true}) {
        for (const int pipeline : {1, 2}) {
            cfg.train.recompute = recompute ? ActivationRecompute::kBlocks : ActivationRecompute::kNone;
            cfg.parallel.pipeline = pipeline;
            cfg.train.grad_accum = pipeline == 2 ? 4 : 1;
            cfg.cluster.attention_kernel = "materialized";
            const MemoryPlan kept = plan_memory(cfg, pipeline, pipeline, 0, 0, false);
            cfg.cluster.attention_kernel = "fused";
            const MemoryPlan fused = plan_memory(cfg, pipeline, pipeline, 0, 0, false);
            // 1F1B on 2 stages: the largest stage (the first) keeps 2 micro-batches' models of 2 blocks.
            const double blocks = pipeline == 1 ? (recompute ? 1 : 4) : (recompute ? 2 : 4);
            EXPECT_DOUBLE_EQ(activations(kept) - activations(fused), blocks * per_block)
                << (recompute ? "recompute, " : "") << "pipeline " << pipeline;
            // With no probabilities kept there are none to rebuild: each block keeps its
            // log-sum-exp under recompute = attention as without recompute.
            if (!recompute) {
                cfg.train.recompute = ActivationRecompute::kAttention;
                EXPECT_DOUBLE_EQ(activations(plan_memory(cfg, pipeline, pipeline, 0, 0, false)), activations(fused))
                    << "recompute = attention, pipeline " << pipeline;
            }
        }
    }
}

TEST(ZeroMemory, TheZeroPapersFormulas) {
    // Mixed precision: DDP 16P; ZeRO-1 4P + 12P/N; ZeRO-2 2P + 14P/N; ZeRO-3 16P/N.
    const size_t P = 1000;
    const double N = 4;
    const char* kTotals[4] = {"16P", "4P + 12P/N", "2P + 14P/N", "16P/N"};
    const double kBytes[4] = {16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 16 * P / N};
    for (int stage = 0; stage <= 3; ++stage) {
        const ZeroMemoryFormulas f = zero_memory_formulas(stage, 4, P, DType::kBF16);
        EXPECT_EQ(f.model_state.formula, kTotals[stage]) << "stage " << stage;
        EXPECT_DOUBLE_EQ(f.model_state.bytes, kBytes[stage]) << "stage " << stage;
        EXPECT_DOUBLE_EQ(f.params.bytes + f.grads.bytes + f.master.bytes + f.optimizer.bytes, kBytes[stage]);
    }
    // fp32 keeps no separate master copy.
    const ZeroMemoryFormulas f32 = zero_memory_formulas(1, 4, P, DType::kF32);
    EXPECT_EQ(f32.master.formula, "0");
    EXPECT_EQ(f32.model_state.formula, "8P + 8P/N");
    EXPECT_DOUBLE_EQ(f32.model_state.bytes, 8 * P + 8 * P / N);
    EXPECT_EQ(f32.params.formula, "4P");
    EXPECT_EQ(f32.optimizer.formula, "8P/N");
}

TEST(ZeroMemory, FormulasWithFp32GradientsBesideBf16) {
    // precision.grad_dtype = fp32: 2 more bytes per stored gradient, sharded from stage 2.
    const size_t P = 1000;
    const double N = 4;
    const char* kTotals[4] = {"18P", "6P + 12P/N", "2P + 16P/N", "18P/N"};
    const double kBytes[4] = {18 * P, 6 * P + 12 * P / N, 2 * P + 16 * P / N, 18 * P / N};
    const char* kGrads[4] = {"4P", "4P", "4P/N", "4P/N"};
    for (int stage = 0; stage <= 3; ++stage) {
        const ZeroMemoryFormulas f = zero_memory_formulas(stage, 4, P, DType::kBF16, DType::kF32);
        EXPECT_EQ(f.model_state.formula, kTotals[stage]) << "stage " << stage;
        EXPECT_EQ(f.grads.formula, kGrads[stage]) << "stage " << stage;
        EXPECT_DOUBLE_EQ(f.model_state.bytes, kBytes[stage]) << "stage " << stage;
        EXPECT_DOUBLE_EQ(f.params.bytes + f.grads.bytes + f.master.bytes + f.optimizer.bytes, kBytes[stage]);
    }
}

}  // namespace
}  // namespace zt
