// ztrain: the training executable. MPI from the first line, even without mpirun.
//
// Exit status (the contract): 0 done, 2 bad input rejected before work starts, 3 replicas or
// state checksums disagree (parallel.check_every), 4 too many loss-spike rollbacks, 1 anything
// else. Bad input is detected identically on every rank (same deck, same files), so every
// rank finalizes and exits 2 together; any other failure may be local to one rank, so it is
// reported with the rank and the whole job is taken down with MPI_Abort: no rank is left
// waiting in a collective.
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "ztrain/ckpt/export.hpp"
#include "ztrain/config.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/mpi_start.hpp"
#include "ztrain/env/env.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/device_mesh.hpp"
#include "ztrain/train/calibration.hpp"
#include "ztrain/train/memory_plan.hpp"
#include "ztrain/train/plan_search.hpp"
#include "ztrain/train/time_plan.hpp"
#include "ztrain/train/trainer.hpp"

namespace {

int world_size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int run(int argc, char** argv) {
    // model.from_hf reads a Hugging Face config.json: ckpt/ knows that format, config/ does not.
    const zt::CliResult cli = zt::parse_command_line(argc, argv, zt::family_key_rules, zt::read_hf_config);
    const bool root = world_rank() == 0;
    switch (cli.action) {
        case zt::CliAction::kHelp:
            if (root) std::fputs(cli.help_text.c_str(), stdout);
            return zt::kExitOk;
        case zt::CliAction::kVersion:
            if (root) std::printf("ztrain %s\n", ZT_VERSION);
            return zt::kExitOk;
        case zt::CliAction::kEnv: {
            const std::string report = zt::environment_report();
            // Where the ranks are, and the groups a ZeRO run (stage 1-3) of this deck forms.
            const int stage = cli.config.parallel.zero_stage > 0 ? cli.config.parallel.zero_stage : 1;
            const zt::DeviceMesh groups(MPI_COMM_WORLD, cli.config.parallel.pipeline, cli.config.parallel.tensor,
                                        cli.config.parallel.shard_group.ranks, stage);
            if (root) {
                std::fputs(report.c_str(), stdout);
                std::printf("  ranks:   %s (ZeRO stages 1-3, parallel.shard_group = %s)\n",
                            groups.layout().describe().c_str(),
                            zt::setting_text(cli.config.parallel.shard_group).c_str());
                if (!groups.note().empty()) std::printf("  note:    %s\n", groups.note().c_str());
            }
            return zt::kExitOk;
        }
        case zt::CliAction::kPlan: {
            // With a cluster: its nodes x ranks_per_node. Alone with --plan-world-size=N: N
            // ranks on this node; under mpirun: the job's.
            int local = 1;
            MPI_Comm node = MPI_COMM_NULL;
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
            MPI_Comm_size(node, &local);
            MPI_Comm_free(&node);
            const zt::ClusterConfig& cluster = cli.config.cluster;
            int world = cli.plan_world_size > 0 ? cli.plan_world_size : world_size();
            int per_node = cli.plan_world_size > 0 ? cli.plan_world_size : local;
            if (cli.plan_cluster) {
                world = cluster.nodes * cluster.ranks_per_node;
                per_node = cluster.ranks_per_node;
            }
            // train.global_batch: grad_accum as a run at this world size derives it.
            const zt::Config deck = zt::with_global_batch(cli.config, world);
            if (cli.plan_search) {
                zt::PlanSearchOptions options;
                options.all = cli.plan_all;
                options.write_deck = cli.plan_write;
                options.cluster_memory = cli.plan_cluster;  // else this node's, as --plan's verdict
                const std::string table = zt::search_plans(deck, cluster, world, per_node, options);
                if (root) std::fputs(table.c_str(), stdout);
                return zt::kExitOk;
            }
            const zt::MemoryPlan plan = cli.plan_cluster
                                            ? zt::plan_memory_on_cluster(deck, cluster, world, per_node)
                                            : zt::plan_for_deck(deck, world, per_node);
            const auto on_cluster = [&](const zt::Config& changed) {
                return zt::plan_memory_on_cluster(changed, cluster, world, per_node);
            };
            const std::string verdict =
                cli.plan_cluster ? zt::plan_verdict(deck, plan, world, per_node, on_cluster)
                                 : zt::plan_verdict(deck, plan, world, per_node);
            const zt::TimePlan time = zt::plan_time(deck, cluster, world, per_node, plan);
            if (root) {
                std::fputs((zt::format_memory_plan(plan) + verdict + zt::format_time_plan(time)).c_str(), stdout);
            }
            return zt::kExitOk;
        }
        case zt::CliAction::kCalibrate: {
            const std::string written = zt::calibrate_cluster(cli.config, cli.cluster_out);
            if (root) std::fputs(written.c_str(), stdout);
            return zt::kExitOk;
        }
        case zt::CliAction::kTrain: {
            zt::TrainOptions options;
            options.force_unlock = cli.force_unlock;
            zt::train(cli.config, options);
            return zt::kExitOk;
        }
    }
    return zt::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
    // Threads: checkpoint.async's writer makes MPI calls (on a communicator of its own)
    // while the training thread makes its own; without MULTIPLE it falls back to
    // synchronous saves.
    int thread_level = MPI_THREAD_SINGLE;
    zt::prefer_mpi_yield_when_idle();
    zt::prefer_isolated_mpi_singleton();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level);
    int code = zt::kExitOk;
    try {
        code = run(argc, argv);
    } catch (const zt::InputError& e) {
        if (world_rank() == 0) std::fprintf(stderr, "ztrain: error: %s\n", e.what());
        code = zt::kExitBadInput;
    } catch (const zt::AgreedError& e) {
        if (world_rank() == 0) std::fprintf(stderr, "ztrain: error: %s\n", e.what());
        code = e.exit_status();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ztrain: rank %d: fatal: %s\n", world_rank(), e.what());
        std::fflush(stderr);
        if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, zt::kExitFailure);
        code = zt::kExitFailure;
    }
    std::fflush(stdout);
    MPI_Finalize();
    return code;
}
