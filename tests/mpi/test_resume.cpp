// Resume and resharding across ranks.
// - Bit-exact resume: 20 steps uninterrupted vs 10 steps + resume for 10, same world size,
//   fp32, each ZeRO stage: every step record of metrics.jsonl (timing fields aside) and the
//   final parameters are identical. LoRA too (its frozen base has no master or moments:
//   the checkpoint reads them from the working copy and as zeros), in fp32 and bf16.
// - A stop signal raised on rank 1 only stops every rank after the same step, with one
//   complete checkpoint, and the resume continues the curve bit for bit.
// - Resharding: a checkpoint written at N ranks / stage s continues at M ranks / stage t
//   (N=2 s3 -> M=1 s0, N=2 -> M=4, N=4 -> M=3, plus stage changes); the loss after resume
//   matches the uninterrupted run at the original N to 1e-6 relative (Muon's packed state
//   too, and in the bit-exact cases). Cases that need more
//   ranks than the job has are skipped (the np=4 job runs them all).
// - The fp16 loss scale on resume: continued from an fp16 dynamic checkpoint only.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <csignal>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/parallel/shard_layout.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

/// The step records without the fields that differ run to run.
std::vector<nlohmann::json> untimed_step_records(const std::string& path) {
    std::vector<nlohmann::json> out = test::step_records(path);
    for (nlohmann::json& j : out) test::erase_timing_fields(j);
    return out;
}

/// A communicator of the first `n` ranks of the world (MPI_COMM_NULL on the others).
class SubComm {
  public:
    explicit SubComm(int n) {
        const int me = test::world_rank();
        MPI_Comm_split(MPI_COMM_WORLD, me < n ? 0 : MPI_UNDEFINED, me, &m_comm);
    }
    ~SubComm() {
        if (m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
    }
    MPI_Comm get() const { return m_comm; }

  private:
    MPI_Comm m_comm = MPI_COMM_NULL;
};

/// Options that stop the run after step `at` the way a preemption does: a SIGUSR1, seen at
/// the step boundary, makes every rank write a checkpoint and return.
TrainOptions stop_after(long at, MPI_Comm comm = MPI_COMM_WORLD) {
    TrainOptions o;
    o.comm = comm;
    o.after_step = [at](long step, ModelState&, bool) {
        if (step == at) std::raise(SIGUSR1);
    };
    return o;
}

Config resume_config(const test::SharedDir& dir, const std::string& run, int stage) {
    Config c = test::tiny_mpi_config(dir.file("train.bin"), dir.file(run));
    c.parallel.zero_stage = stage;
    c.train.max_steps = 20;
    c.train.grad_accum = 1;
    return c;
}

struct ResumeCase {
    int stage;
    bool llama = false;
    bool lora = false;
    DType dtype = DType::kF32;
    double lora_dropout = 0.0;  ///< masks drawn again, not saved: a function of the samples
    std::optional<DType> base_dtype = std::nullopt;  ///< lora.base_dtype
    bool muon = false;  ///< train.optimizer = muon: its matrices' packed state (momentum alone)
};

ResumeCase muon_case(int stage, bool llama) {
    ResumeCase c{stage, llama};
    c.muon = true;
    return c;
}

class BitExactResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(BitExactResume, TenPlusTenEqualsTwenty) {
    const int stage = GetParam().stage;
    auto config_for = [&](const test::SharedDir& d, const std::string& run, int s) {
        Config c = resume_config(d, run, s);
        if (GetParam().llama) c = test::as_llama(c);
        if (GetParam().lora) {
            c.model.lora.rank = 4;
            c.model.lora.targets = GetParam().llama ? "q_proj,v_proj,down_proj" : "c_attn,c_proj";
            c.model.lora.dropout = GetParam().lora_dropout;
            c.model.lora.base_dtype = GetParam().base_dtype;
        }
        c.precision.dtype = GetParam().dtype;
        if (GetParam().muon) c.train.optimizer = OptimizerKind::kMuon;
        return c;
    };
    test::SharedDir dir("resume");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    TrainOptions opt;
    opt.collect_params = true;
    const TrainSummary whole = train(config_for(dir, "whole", stage), opt);
    const TrainSummary first = train(config_for(dir, "split", stage), stop_after(10));
    EXPECT_TRUE(first.stopped_by_signal);
    EXPECT_EQ(first.losses.size(), 10u);
    Config second = config_for(dir, "split", stage);  // same run dir: resume=auto finds latest
    const TrainSummary rest = train(second, opt);
    EXPECT_EQ(rest.losses.size(), 10u) << "the resumed run should train steps 11..20 only";
    EXPECT_EQ(std::memcmp(whole.final_params.data(), rest.final_params.data(),
                          whole.final_params.size() * sizeof(float)), 0)
        << "final parameters differ after resume (stage " << stage << ")";
    if (test::world_rank() == 0) {
        const auto a = untimed_step_records(dir.file("whole/metrics.jsonl"));
        const auto b = untimed_step_records(dir.file("split/metrics.jsonl"));
        ASSERT_EQ(a.size(), 20u);
        ASSERT_EQ(b.size(), 20u);
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(a[i], b[i]) << "stage " << stage << " metrics line " << i + 1 << " differs:\n"
                                  << a[i].dump() << "\n" << b[i].dump();
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllStages, BitExactResume,
                         ::testing::Values(ResumeCase{0}, ResumeCase{1}, ResumeCase{2}, ResumeCase{3},
                                           ResumeCase{0, true}, ResumeCase{3, true}, ResumeCase{1, false, true},
                                           ResumeCase{3, true, true}, ResumeCase{2, true, true, DType::kBF16},
                                           ResumeCase{1, true, true, DType::kF32, 0.2},
                                           ResumeCase{3, true, true, DType::kF32, 0.0, DType::kBF16},
                                           muon_case(0, false), muon_case(1, false), muon_case(3, true)),
                         [](const auto& info) {
                             return "stage" + std::to_string(info.param.stage) + (info.param.llama ? "_llama" : "") +
                                    (info.param.lora ? "_lora" : "") + (info.param.lora_dropout > 0 ? "_dropout" : "") +
                                    (info.param.dtype != DType::kF32 ? std::string("_") + dtype_name(info.param.dtype) : "") +
                                    (info.param.base_dtype ? std::string("_base_") + dtype_name(*info.param.base_dtype) : "") +
                                    (info.param.muon ? "_muon" : "");
                         });

/// The shard `dir`/train.bin, and a base model for LoRA: two steps of a tiny GPT-2,
/// consolidated into `dir`/base.h5 (its path returned). Every rank calls it.
std::string write_base_file(const test::SharedDir& dir) {
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    Config pre = resume_config(dir, "pre", 0);
    pre.train.max_steps = 2;
    train(pre, TrainOptions{});
    const std::string base = dir.file("base.h5");
    if (test::world_rank() == 0) consolidate(dir.file("pre/checkpoints"), base, DType::kF32, false);
    MPI_Barrier(MPI_COMM_WORLD);
    return base;
}

// A LoRA run initialised from a weights file (ZeRO-3): its checkpoints hold the adapters and
// their state, not the frozen base, and record the file the base comes from; the resume reads
// the base's shards from it and continues bit for bit.
TEST(LoraBaseFromAFile, CheckpointsHoldTheAdaptersOnlyAndTheResumeIsBitExact) {
    test::SharedDir dir("lora_base");
    const std::string base = write_base_file(dir);
    const auto config_for = [&](const std::string& run) {
        Config c = resume_config(dir, run, 3);
        c.model.lora.rank = 4;
        c.model.lora.targets = "c_attn,c_proj";
        c.model.init_from = base;
        return c;
    };
    TrainOptions opt;
    opt.collect_params = true;
    const TrainSummary whole = train(config_for("whole"), opt);
    train(config_for("split"), stop_after(10));
    const TrainSummary rest = train(config_for("split"), opt);
    ASSERT_EQ(rest.losses.size(), 10u);
    EXPECT_EQ(std::memcmp(whole.final_params.data(), rest.final_params.data(),
                          whole.final_params.size() * sizeof(float)), 0)
        << "final parameters differ after resuming a LoRA run whose base is read from " << base;
    if (test::world_rank() != 0) return;
    EXPECT_EQ(untimed_step_records(dir.file("whole/metrics.jsonl")), untimed_step_records(dir.file("split/metrics.jsonl")));
    // The shards' ranges cover each unit's trained tail (its adapters) exactly once.
    const nlohmann::json meta = read_checkpoint_meta(dir.file("split/checkpoints/" + checkpoint_dir_name(10)));
    EXPECT_EQ(meta.at("lora_base").at("path").get<std::string>(), std::filesystem::absolute(base).string());
    const ModelLayout layout = make_model_layout(config_for("split").model);
    const std::vector<size_t> trained_begin = trainable_begins(layout);
    size_t trained = 0;
    size_t total = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
        trained += layout.unit_numel[u] - trained_begin[u];
        total += layout.unit_numel[u];
    }
    size_t saved = 0;
    for (const auto& shard : meta.at("shards")) {
        for (const auto& r : shard.at("units")) {
            const int u = r.at("unit").get<int>();
            EXPECT_GE(r.at("begin").get<size_t>(), trained_begin[u]) << "unit " << u << " saves frozen elements";
            saved += r.at("end").get<size_t>() - r.at("begin").get<size_t>();
        }
    }
    EXPECT_EQ(saved, trained) << "of " << total << " elements";
    EXPECT_LT(trained * 5, total);
    EXPECT_FALSE(read_checkpoint_meta(dir.file("pre/checkpoints/" + checkpoint_dir_name(2))).contains("lora_base"));
}

// A base read from a file at ZeRO-1 and 2: each rank imports its own shard of the base, which
// the state gathers once. The optimizer steps gather none of the wholly frozen units (the
// embedding and head), and beside a bf16 base under fp32 activations no unit (only the
// adapters' fp32 copies change). Every step matches one rank.
TEST(LoraBaseFromAFile, TheBaseIsGatheredOnceAndMatchesOneRank) {
    const int N = test::world_size();
    test::SharedDir dir("lora_bf16_base");
    const std::string base = write_base_file(dir);
    for (int k = 0; k < 4; ++k) {
        const int stage = 1 + k % 2;
        const DType base_dtype = k < 2 ? DType::kF32 : DType::kBF16;
        const auto config_for = [&](const std::string& run) {
            Config c = resume_config(dir, run, stage);
            c.model.lora.rank = 4;
            c.model.lora.targets = "c_attn,c_proj";
            c.model.lora.base_dtype = base_dtype;
            c.model.init_from = base;
            c.train.max_steps = 4;
            return c;
        };
        Config one = config_for("one" + std::to_string(k) + "_" + std::to_string(test::world_rank()));
        one.train.grad_accum *= N;
        TrainOptions self;
        self.comm = MPI_COMM_SELF;
        self.collect_params = true;
        const TrainSummary ref = train(one, self);
        TrainOptions world;
        world.collect_params = true;
        const TrainSummary got = train(config_for("world" + std::to_string(k)), world);
        const std::string what = std::string(dtype_name(base_dtype)) + " base from a file, ZeRO-" + std::to_string(stage);
        test::expect_matches_reference(got, ref, what);
        // After a step only the adapters move: their fp32 gradients (each unit's tail rounded
        // up to kShardAlign) and their owners' new fp32 values, each all-reduced (a ring's
        // 2 (N - 1) / N of its bytes); nothing is gathered, no frozen unit reduced.
        const ModelLayout layout = make_model_layout(config_for("world").model);
        const std::vector<size_t> begin = trainable_begins(layout);
        const auto ring = [&](uint64_t n) { return 2 * (n * 4 * static_cast<uint64_t>(N - 1) / static_cast<uint64_t>(N)); };
        uint64_t moved = 0;
        for (int u = 0; u < layout.num_units(); ++u) {
            const uint64_t t = layout.unit_numel[u] - begin[u];
            if (t > 0) moved += ring(t) + ring((t + kShardAlign - 1) / kShardAlign * kShardAlign);
        }
        for (const nlohmann::json& r : test::step_records(dir.file("world" + std::to_string(k) + "/metrics.jsonl"))) {
            if (r.at("step").get<int>() < 2) continue;
            const nlohmann::json& cb = r.at("comm_bytes");
            EXPECT_EQ(cb.value("all_gather", uint64_t{0}), 0u) << what << ", step " << r.at("step");
            EXPECT_EQ(cb.value("all_reduce", uint64_t{0}), moved) << what << ", step " << r.at("step");
        }
    }
}

// checkpoint.async: the save after step 5 is written in the background (held back 300 ms by
// the test hook, so steps 6.. surely run while it is in flight) and training goes on to
// step 10. Resuming from that checkpoint reproduces steps 6-10 bit for bit: the snapshot is
// the state after step 5, not what the next steps made of it.
class AsyncCheckpointResume : public ::testing::TestWithParam<int> {};

TEST_P(AsyncCheckpointResume, SnapshotAfterStepFiveResumesStepsSixToTenBitForBit) {
    const int stage = GetParam();
    test::SharedDir dir("async");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    TrainOptions opt;
    opt.collect_params = true;
    Config whole_cfg = resume_config(dir, "whole", stage);
    whole_cfg.train.max_steps = 10;
    whole_cfg.checkpoint.every = 5;
    whole_cfg.checkpoint.async = true;
    ::setenv("ZT_TEST_CHECKPOINT_DELAY_MS", "300", 1);
    const TrainSummary whole = train(whole_cfg, opt);
    ::unsetenv("ZT_TEST_CHECKPOINT_DELAY_MS");
    Config rest_cfg = resume_config(dir, "rest", stage);
    rest_cfg.train.max_steps = 10;
    rest_cfg.checkpoint.resume.mode = ResumeSetting::Mode::kPath;
    rest_cfg.checkpoint.resume.path = dir.file("whole/checkpoints/" + checkpoint_dir_name(5));
    const TrainSummary rest = train(rest_cfg, opt);
    ASSERT_EQ(rest.losses.size(), 5u) << "the resumed run should train steps 6..10 only";
    EXPECT_EQ(std::memcmp(whole.final_params.data(), rest.final_params.data(),
                          whole.final_params.size() * sizeof(float)), 0)
        << "final parameters differ after resuming from the async checkpoint (stage " << stage << ")";
    if (test::world_rank() == 0) {
        const auto a = untimed_step_records(dir.file("whole/metrics.jsonl"));
        const auto b = untimed_step_records(dir.file("rest/metrics.jsonl"));
        ASSERT_EQ(a.size(), 10u);
        ASSERT_EQ(b.size(), 5u);
        for (size_t i = 0; i < b.size(); ++i) {
            EXPECT_EQ(a[i + 5], b[i]) << "stage " << stage << " step " << i + 6 << " differs:\n"
                                      << a[i + 5].dump() << "\n" << b[i].dump();
        }
        // The save after step 5 really ran beside training: published only after the
        // 300 ms hold, while the loop was blocked for the snapshot alone.
        std::ifstream in(dir.file("whole/metrics.jsonl"));
        std::string line;
        int saves = 0;
        while (std::getline(in, line)) {
            const nlohmann::json r = nlohmann::json::parse(line);
            if (r.value("event", "") != "checkpoint") continue;
            ++saves;
            if (r["step"].get<long>() == 10) {
                // The last save has no steps to overlap: written synchronously, no snapshot.
                EXPECT_FALSE(r["async"].get<bool>()) << r;
                continue;
            }
            EXPECT_TRUE(r["async"].get<bool>()) << r;
            EXPECT_GE(r["write_ms"].get<double>(), 300.0) << r;
            EXPECT_LT(r["blocked_ms"].get<double>(), r["write_ms"].get<double>()) << r;
        }
        EXPECT_EQ(saves, 2) << "one record per save (steps 5 and 10)";
    }
}

INSTANTIATE_TEST_SUITE_P(AllStages, AsyncCheckpointResume, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// Preemption seen by one rank only (a signal delivered to rank 1's process, e.g. Ctrl-C or
// a node-local SIGTERM): the ranks agree on it at the step boundary, so every rank stops
// after the same step with one complete checkpoint, exits normally, and the resumed run
// reproduces the uninterrupted one.
TEST(SignalOnOneRank, EveryRankStopsAtTheSameStepAndResumeContinuesTheCurve) {
    test::SharedDir dir("signal1");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    const int stage = 2;
    const TrainSummary whole = train(resume_config(dir, "whole", stage));
    TrainOptions only_rank1;
    only_rank1.after_step = [](long step, ModelState&, bool) {
        if (step == 7 && test::world_rank() == 1) std::raise(SIGINT);
    };
    const TrainSummary first = train(resume_config(dir, "split", stage), only_rank1);
    EXPECT_TRUE(first.stopped_by_signal) << "rank " << test::world_rank();
    EXPECT_EQ(first.losses.size(), 7u) << "rank " << test::world_rank() << " did not stop after step 7";
    int steps[2] = {static_cast<int>(first.losses.size()), -static_cast<int>(first.losses.size())};
    MPI_Allreduce(MPI_IN_PLACE, steps, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(steps[0], -steps[1]) << "ranks stopped after different steps";
    if (test::world_rank() == 0) {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(dir.file("split/checkpoints"))) {
            names.push_back(e.path().filename().string());
        }
        std::sort(names.begin(), names.end());
        EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000007"}));
        EXPECT_EQ(test::read_file(dir.file("split/checkpoints/latest")), "step_00000007\n");
        const nlohmann::json meta = read_checkpoint_meta(dir.file("split/checkpoints/step_00000007"));
        EXPECT_EQ(meta["step"], 7);
        EXPECT_EQ(meta["shards"].size(), static_cast<size_t>(test::world_size()));
    }
    const TrainSummary rest = train(resume_config(dir, "split", stage));
    ASSERT_EQ(rest.losses.size(), 13u) << "the resumed run should train steps 8..20 only";
    for (size_t i = 0; i < rest.losses.size(); ++i) {
        EXPECT_EQ(rest.losses[i], whole.losses[7 + i]) << "step " << 8 + i;
    }
    if (test::world_rank() == 0) {
        const auto a = untimed_step_records(dir.file("whole/metrics.jsonl"));
        const auto b = untimed_step_records(dir.file("split/metrics.jsonl"));
        ASSERT_EQ(a.size(), 20u);
        ASSERT_EQ(b.size(), 20u);
        for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "metrics line " << i + 1;
    }
}

struct Reshard {
    int from_n, from_stage, to_n, to_stage;
    bool muon = false;  ///< each rank's packed Muon state read and written at another sharding
};

void PrintTo(const Reshard& r, std::ostream* os) {
    *os << "N=" << r.from_n << " stage " << r.from_stage << " -> N=" << r.to_n << " stage " << r.to_stage
        << (r.muon ? " muon" : "");
}

class Resharding : public ::testing::TestWithParam<Reshard> {};

TEST_P(Resharding, ContinuesTheCurveAtAnotherWorldSizeAndStage) {
    const Reshard r = GetParam();
    if (std::max(r.from_n, r.to_n) > test::world_size()) {
        GTEST_SKIP() << "needs " << std::max(r.from_n, r.to_n) << " ranks";
    }
    test::SharedDir dir("reshard");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    // Keep the global batch fixed across world sizes: micro_batch * accum * N = 12.
    auto config = [&](const std::string& run, int n, int stage, int steps) {
        Config c = resume_config(dir, run, stage);
        c.train.micro_batch = 1;
        c.train.grad_accum = 12 / n;
        c.train.max_steps = steps;
        if (r.muon) c.train.optimizer = OptimizerKind::kMuon;
        return c;
    };
    TrainSummary whole;
    {
        SubComm from(r.from_n);
        TrainOptions o;
        o.comm = from.get();
        if (from.get() != MPI_COMM_NULL) {
            whole = train(config("whole", r.from_n, r.from_stage, 20), o);
            train(config("split", r.from_n, r.from_stage, 20), stop_after(10, from.get()));
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    {
        SubComm to(r.to_n);
        TrainOptions o;
        o.comm = to.get();
        if (to.get() != MPI_COMM_NULL) {
            const TrainSummary rest = train(config("split", r.to_n, r.to_stage, 20), o);
            ASSERT_EQ(rest.losses.size(), 10u);
            // Every rank of `to` that also ran `from` holds the uninterrupted losses.
            if (test::world_rank() < r.from_n) {
                for (size_t i = 0; i < rest.losses.size(); ++i) {
                    EXPECT_NEAR(rest.losses[i], whole.losses[10 + i], 1e-6 * std::fabs(whole.losses[10 + i]))
                        << "step " << 11 + i;
                }
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Cases, Resharding,
                         ::testing::Values(Reshard{2, 3, 1, 0}, Reshard{2, 0, 4, 3}, Reshard{4, 2, 3, 1},
                                           Reshard{1, 0, 2, 2}, Reshard{2, 1, 2, 3}, Reshard{2, 1, 1, 0, true},
                                           Reshard{1, 0, 2, 3, true}),
                         [](const auto& info) {
                             const Reshard& r = info.param;
                             return "n" + std::to_string(r.from_n) + "s" + std::to_string(r.from_stage) + "_to_n" +
                                    std::to_string(r.to_n) + "s" + std::to_string(r.to_stage) + (r.muon ? "_muon" : "");
                         });

// The fp16 loss scaler continues from a checkpoint only when that checkpoint was written in
// fp16 with the same scaling mode: a bf16/fp32 checkpoint saved scale 1 (restored, dynamic
// fp16 would start at its floor), and a static scale is the deck's, never the checkpoint's.
TEST(ResumeLossScale, ComesFromTheCheckpointOnlyForTheSameFp16Mode) {
    const bool root = test::world_rank() == 0;
    test::SharedDir dir("resume_scale");
    if (root) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    auto config = [&](const std::string& run, const std::string& dtype, const std::string& loss_scale, int steps) {
        Config c = resume_config(dir, run, 1);
        c.train.max_steps = steps;
        set_config_value(c, "precision.dtype", dtype);
        set_config_value(c, "precision.loss_scale", loss_scale);
        return c;
    };
    // fp32 -> dynamic fp16: init_scale, and a note that says why.
    train(config("from_fp32", "fp32", "dynamic", 3));
    if (root) ::testing::internal::CaptureStdout();
    const TrainSummary from_fp32 = train(config("from_fp32", "fp16", "dynamic", 5));
    const std::string out = root ? ::testing::internal::GetCapturedStdout() : "";
    ASSERT_EQ(from_fp32.loss_scales.size(), 2u);
    EXPECT_EQ(from_fp32.loss_scales[0], 65536.0) << "fp16 after an fp32 checkpoint must start at init_scale";
    if (root) {
        EXPECT_NE(out.find("ztrain: the checkpoint was written in fp32: the fp16 loss scale starts at 65536 "
                           "(precision.init_scale)\n"),
                  std::string::npos)
            << out;
    }
    // bf16 -> static fp16: the deck's scale.
    train(config("from_bf16", "bf16", "dynamic", 3));
    const TrainSummary from_bf16 = train(config("from_bf16", "fp16", "512", 5));
    ASSERT_EQ(from_bf16.loss_scales.size(), 2u) << "steps 4 and 5 after the resume";
    for (double scale : from_bf16.loss_scales) EXPECT_EQ(scale, 512.0) << "static scale after a bf16 checkpoint";
    // static 1024 -> static 256: the deck's scale, not the checkpoint's.
    train(config("static", "fp16", "1024", 3));
    const TrainSummary restatic = train(config("static", "fp16", "256", 5));
    ASSERT_EQ(restatic.loss_scales.size(), 2u) << "steps 4 and 5 after the resume";
    for (double scale : restatic.loss_scales) EXPECT_EQ(scale, 256.0) << "the deck's static scale must win";
    // dynamic -> dynamic: the checkpoint's scale continues (4096, not the deck's init_scale).
    Config first = config("dynamic", "fp16", "dynamic", 3);
    first.precision.init_scale = 4096;
    first.precision.min_scale = 1;
    train(first);
    const TrainSummary redynamic = train(config("dynamic", "fp16", "dynamic", 5));
    ASSERT_EQ(redynamic.loss_scales.size(), 2u);
    EXPECT_EQ(redynamic.loss_scales[0], 4096.0) << "dynamic fp16 must continue from an fp16 dynamic checkpoint";
}

}  // namespace
}  // namespace zt
