// Hybrid sharding (parallel.shard_group): the state is split inside groups of G ranks and
// the N/G groups replicate each other.
// - Equivalence: N ranks in groups of G, at each ZeRO stage, match one rank with N-way
//   gradient accumulation (the tolerance of test_zero_equivalence.cpp), and every replica
//   ends with bit-identical owned state (master, m, v).
// - Accounting: per step, inside the group the ZeRO volumes with N = G; across the groups one
//   all-reduce of the owned shard: 2 * Psi_shard * (R-1)/R * dtype bytes, R = N/G groups
//   (Psi_shard = padded elements per shard, summed per unit as the communicator counts).
// - Memory per rank: the ZeRO formulas with N = G.
// - Checkpoints: only replica 0 writes, one file per shard of its group; a checkpoint saved in
//   groups of G loads at 1, 2 and N ranks in any grouping (and the reverse), each rank's
//   state equal to what the files hold; a run in groups resumes bit for bit.
// Cases whose G does not divide the job's N are skipped (np 4 runs them all).
#include <gtest/gtest.h>
#include <mpi.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/device_mesh.hpp"
#include "ztrain/parallel/shard_layout.hpp"
#include "ztrain/parallel/zero_memory.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

struct HybridCase {
    int stage;
    int group;                        // 0: the whole world
    DType dtype = DType::kF32;        // bf16 runs reduce in fp32 (the pooled replica path)
};

std::string case_name(const HybridCase& c) {
    return "stage" + std::to_string(c.stage) + "_groups_of_" + (c.group == 0 ? "all" : std::to_string(c.group)) +
           (c.dtype == DType::kF32 ? "" : std::string("_") + dtype_name(c.dtype));
}

/// Every rank's hash of its owned master/m/v with its shard rank; ranks of one shard rank
/// must agree (replicas are copies).
void expect_replicas_identical(ModelState& state, const std::string& what) {
    const std::vector<float> owned = ModelStateTestAccess::owned_optimizer_state(state);
    const uint64_t mine[2] = {static_cast<uint64_t>(state.shard_rank()),
                              hash64(owned.data(), owned.size() * sizeof(float))};
    std::vector<uint64_t> all(2 * static_cast<size_t>(test::world_size()));
    MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < test::world_size(); ++r) {
        const size_t i = 2 * static_cast<size_t>(r);
        if (all[i] == mine[0]) {
            EXPECT_EQ(all[i + 1], mine[1]) << what << ": rank " << test::world_rank() << " and rank " << r
                                           << " hold shard " << mine[0] << " but their owned state differs";
        }
    }
}

class HybridShard : public ::testing::TestWithParam<HybridCase> {};

TEST_P(HybridShard, MatchesOneRankAndMovesTheTheoreticalBytes) {
    const HybridCase c = GetParam();
    const int N = test::world_size();
    const int G = c.group == 0 ? N : c.group;
    if (G > N || N % G != 0) GTEST_SKIP() << "groups of " << G << " need a multiple of " << G << " ranks; N = " << N;
    const int R = N / G;
    const int me = test::world_rank();
    const std::string what = case_name(c) + " N=" + std::to_string(N);
    test::SharedDir dir("hybrid");
    test::write_shared_train_shard(dir);

    Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file("world"));
    cfg.parallel.zero_stage = c.stage;
    cfg.parallel.shard_group.ranks = G;
    cfg.precision.dtype = c.dtype;
    if (c.dtype != DType::kF32) cfg.precision.reduce_dtype = DType::kF32;
    TrainOptions world;
    world.collect_params = true;
    world.after_step = [&](long step, ModelState& state, bool) {
        if (step == cfg.train.max_steps) expect_replicas_identical(state, what);
    };
    const TrainSummary got = train(cfg, world);
    if (c.dtype == DType::kF32) {
        // One rank (each rank computes it alone) with N x accumulation.
        Config ref_cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file("ref" + std::to_string(me)));
        ref_cfg.train.grad_accum *= N;
        TrainOptions self;
        self.comm = MPI_COMM_SELF;
        self.collect_params = true;
        test::expect_matches_reference(got, train(ref_cfg, self), what);
    }
    if (me != 0) return;

    // Bytes per step: the group's ZeRO volumes (N = G), and across the groups one
    // all-reduce of every unit's shard. Gradients travel in fp32 in every case here;
    // parameters are gathered in the working dtype.
    const ModelLayout layout = make_model_layout(cfg.model);
    const ShardPlan plan(layout.unit_numel, G, ShardingPolicy::zero_stage(c.stage));
    uint64_t P = 0, inter = 0;
    for (const UnitShard& s : plan.shards()) {
        P += s.padded_numel;
        inter += 2 * (static_cast<uint64_t>(s.shard_numel) * 4 * static_cast<uint64_t>(R - 1) / static_cast<uint64_t>(R));
    }
    const uint64_t ring = P * 4 * static_cast<uint64_t>(G - 1) / static_cast<uint64_t>(G);
    const uint64_t ring_ag = P * dtype_size(c.dtype) * static_cast<uint64_t>(G - 1) / static_cast<uint64_t>(G);
    // Unit 0 (embedding and tied head) stays gathered through a step: once per step at stage 3.
    const uint64_t ring0_ag =
        plan.shard(0).padded_numel * dtype_size(c.dtype) * static_cast<uint64_t>(G - 1) / static_cast<uint64_t>(G);
    // Unit 0's gradient is kept across micro-steps at stages 2-3: reduce-scattered once per step.
    const uint64_t ring0 = plan.shard(0).padded_numel * 4 * static_cast<uint64_t>(G - 1) / static_cast<uint64_t>(G);
    const uint64_t A = static_cast<uint64_t>(cfg.train.grad_accum);
    uint64_t want_rs = 0, want_ag = 0;
    switch (c.stage) {
        case 1: want_rs = ring; want_ag = ring_ag; break;
        case 2: want_rs = A * (ring - ring0) + ring0; want_ag = ring_ag; break;
        case 3: want_rs = A * (ring - ring0) + ring0; want_ag = A * 2 * (ring_ag - ring0_ag) + ring0_ag; break;
    }
    int steps_seen = 0;
    for (const auto& r : test::step_records(dir.file("world/metrics.jsonl"))) {
        ++steps_seen;
        const auto& cb = r.at("comm_bytes");
        auto get = [](const nlohmann::json& o, const char* k) { return o.contains(k) ? o[k].get<uint64_t>() : 0; };
        const std::string at = what + " step " + r["step"].dump();
        EXPECT_EQ(get(cb.at("intra"), "reduce_scatter"), want_rs) << at;
        EXPECT_EQ(get(cb.at("intra"), "all_gather"), want_ag) << at;
        EXPECT_EQ(get(cb.at("intra"), "all_reduce"), 0u) << at;
        EXPECT_EQ(get(cb.at("inter"), "all_reduce"), inter) << at << ": 2 Psi_shard (R-1)/R x 4 bytes";
        EXPECT_EQ(get(cb.at("inter"), "reduce_scatter") + get(cb.at("inter"), "all_gather"), 0u) << at;
        // The totals per kind include both.
        EXPECT_EQ(get(cb, "all_reduce"), inter) << at;
        EXPECT_EQ(get(cb, "reduce_scatter"), want_rs) << at;
    }
    EXPECT_EQ(steps_seen, cfg.train.max_steps);

    // Memory per rank (rank 0's record): the ZeRO formulas with N = G.
    for (const auto& r : test::read_jsonl(dir.file("world/metrics.jsonl"))) {
        if (r.value("event", "") != "memory") continue;
        EXPECT_EQ(r.at("shard_group").get<int>(), G) << what;
        EXPECT_EQ(r.at("replicas").get<int>(), R) << what;
        double params = 0;
        for (const ParamSpec& p : layout.params) params += static_cast<double>(p.numel);
        const ZeroMemoryFormulas f = zero_memory_formulas(c.stage, G, static_cast<size_t>(params), c.dtype);
        const double got_bytes = r.at("model_state").get<double>();
        EXPECT_NEAR(got_bytes, f.model_state.bytes, 0.05 * f.model_state.bytes)
            << what << ": model state " << got_bytes << " bytes vs " << f.model_state.formula << " = "
            << f.model_state.bytes << " with N = " << G;
    }
}

INSTANTIATE_TEST_SUITE_P(Groups, HybridShard,
                         ::testing::Values(HybridCase{1, 2}, HybridCase{2, 2}, HybridCase{3, 2}, HybridCase{1, 1},
                                           HybridCase{2, 1}, HybridCase{3, 1}, HybridCase{2, 0},
                                           HybridCase{3, 0}, HybridCase{2, 2, DType::kBF16}),
                         [](const auto& info) { return case_name(info.param); });

// ---------------------------------------------------------------------------------------
// Checkpoints across group shapes
// ---------------------------------------------------------------------------------------

/// The model state of `comm`'s ranks in groups of `group` (0: all), as ztrain builds it.
struct GroupedState {
    GroupedState(MPI_Comm comm, const ModelLayout& layout, int group, int stage)
        : groups(comm, group, stage),
          shard(make_mpi_communicator(groups.shard_comm())),
          replica(make_mpi_communicator(groups.layout().replicas > 1 ? groups.replica_comm() : MPI_COMM_NULL)),
          run(make_mpi_communicator(comm)),
          backend(make_cpu_backend(1)),
          state(layout, *backend, StateComms{*shard, *replica},
                StateOptions::zero(stage).with_buckets(1 << 20).with_seed(7)) {}
    DeviceMesh groups;
    std::unique_ptr<Communicator> shard, replica, run;
    std::unique_ptr<Backend> backend;
    ModelState state;
};

/// Loads `step_dir` into `comm`'s ranks in groups of `group` and checks every rank's owned
/// master, m and v and the gathered parameters against what the files hold.
void expect_loads_exactly(MPI_Comm comm, const ModelLayout& layout, const std::string& step_dir, int group, int stage,
                          const std::string& what) {
    GroupedState g(comm, layout, group, stage);
    load_checkpoint(step_dir, g.state, *g.run);
    CheckpointReader reader(step_dir);
    const char* names[3] = {"master", "adam_m", "adam_v"};
    float* bases[3] = {nullptr, nullptr, nullptr};
    for (int u = 0; u < layout.num_units(); ++u) {
        const size_t numel = layout.unit_numel[static_cast<size_t>(u)];
        std::vector<float> want(numel), got(numel);
        reader.read(u, 0, numel, "master", want.data());
        g.state.gather_unit_params(u, got.data());  // collective over the group
        EXPECT_EQ(std::memcmp(want.data(), got.data(), numel * sizeof(float)), 0) << what << ": unit " << u << " params";
        bases[0] = g.state.shards().master_base(u);
        bases[1] = g.state.shards().adam_m_base(u);
        bases[2] = g.state.shards().adam_v_base(u);
        const size_t b = g.state.shards().owned_begin(u), e = std::min(g.state.shards().owned_end(u), numel);
        if (e <= b) continue;
        for (int which = 0; which < 3; ++which) {
            std::vector<float> file(e - b), mine(e - b);
            reader.read(u, b, e, names[which], file.data());
            g.state.shards().copy_to_host(mine.data(), bases[which] + b, e - b);
            EXPECT_EQ(std::memcmp(file.data(), mine.data(), (e - b) * sizeof(float)), 0)
                << what << ": unit " << u << " " << names[which] << " [" << b << ", " << e << ") on rank "
                << test::world_rank();
        }
    }
}

/// The first n ranks of the world (MPI_COMM_NULL on the others).
MPI_Comm first_ranks(int n) {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, test::world_rank() < n ? 0 : MPI_UNDEFINED, test::world_rank(), &c);
    return c;
}

TEST(HybridShardCheckpoint, SavedInGroupsLoadsAtEveryShapeAndTheReverse) {
    const int N = test::world_size();
    if (N < 2 || N % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
    const int stage = 2;
    test::SharedDir dir("hybrid_ckpt");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    // Saved in groups of N/2 (two replicas) and flat (one group of N): each loads everywhere.
    for (const int save_group : {N / 2, N}) {
        const std::string run = "save_g" + std::to_string(save_group);
        Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file(run));
        cfg.parallel.zero_stage = stage;
        cfg.parallel.shard_group.ranks = save_group;
        cfg.train.max_steps = 3;  // AdamW moments are non-zero by then
        train(cfg);
        const std::string step_dir = dir.file(run + "/checkpoints/step_00000003");
        if (test::world_rank() == 0) {
            // One replica written: a file per shard of one group.
            int files = 0;
            for (const auto& e : std::filesystem::directory_iterator(step_dir)) {
                files += e.path().filename().string().rfind("shard_", 0) == 0 ? 1 : 0;
            }
            EXPECT_EQ(files, save_group) << run << ": shard files in " << step_dir;
            const nlohmann::json meta = read_checkpoint_meta(step_dir);
            EXPECT_EQ(meta.at("shards").size(), static_cast<size_t>(save_group)) << run;
            EXPECT_EQ(meta.at("shard_group").get<int>(), save_group) << run;
            EXPECT_EQ(meta.at("world_size").get<int>(), N) << run;
        }
        const ModelLayout layout = make_model_layout(cfg.model);
        struct Shape {
            int ranks, group;
        };
        for (const Shape s : {Shape{1, 1}, Shape{2, 2}, Shape{2, 1}, Shape{N, N}, Shape{N, N / 2}, Shape{N, 1}}) {
            const std::string what = run + " loaded at " + std::to_string(s.ranks) + " ranks in groups of " +
                                     std::to_string(s.group);
            MPI_Comm sub = first_ranks(s.ranks);
            if (sub != MPI_COMM_NULL) {
                expect_loads_exactly(sub, layout, step_dir, s.group, stage, what);
                MPI_Comm_free(&sub);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
}

TEST(HybridShardCheckpoint, ResumesBitForBitInGroups) {
    const int N = test::world_size();
    if (N < 2 || N % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
    test::SharedDir dir("hybrid_resume");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    auto config = [&](const std::string& run) {
        Config c = test::tiny_mpi_config(dir.file("train.bin"), dir.file(run));
        c.parallel.zero_stage = 3;
        c.parallel.shard_group.ranks = N / 2;
        c.train.max_steps = 8;
        return c;
    };
    TrainOptions whole_opt;
    whole_opt.collect_params = true;
    const TrainSummary whole = train(config("whole"), whole_opt);
    TrainOptions stop;  // a preemption after step 4: every rank checkpoints and returns
    stop.after_step = [](long step, ModelState&, bool) {
        if (step == 4) std::raise(SIGUSR1);
    };
    EXPECT_TRUE(train(config("split"), stop).stopped_by_signal);
    const TrainSummary rest = train(config("split"), whole_opt);
    ASSERT_EQ(rest.losses.size(), 4u) << "the resumed run should train steps 5..8 only";
    ASSERT_EQ(whole.final_params.size(), rest.final_params.size());
    EXPECT_EQ(std::memcmp(whole.final_params.data(), rest.final_params.data(),
                          whole.final_params.size() * sizeof(float)),
              0)
        << "final parameters differ after resume in groups of " << N / 2;
    if (test::world_rank() == 0) {
        auto a = test::step_records(dir.file("whole/metrics.jsonl"));
        auto b = test::step_records(dir.file("split/metrics.jsonl"));
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
            test::erase_timing_fields(a[i]);
            test::erase_timing_fields(b[i]);
            EXPECT_EQ(a[i], b[i]) << "metrics line " << i + 1 << " differs:\n" << a[i].dump() << "\n" << b[i].dump();
        }
    }
}

}  // namespace
}  // namespace zt
