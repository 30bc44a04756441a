// The memory plan across ranks: the per-node figure multiplies by the ranks that really share
// the node (MPI_Comm_split_type, through the communicator's local_size), every rank's plan is
// the same, and a refusal is agreed: either every rank throws the same InputError or none.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/train/memory_plan.hpp"

namespace zt {
namespace {

int ranks_sharing_this_node() {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int n = 0;
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
    return n;
}

Config small_config(int stage) {
    Config c;
    set_config_value(c, "model.n_layer", "2");
    set_config_value(c, "model.n_embd", "64");
    set_config_value(c, "model.n_head", "4");
    set_config_value(c, "model.seq_len", "32");
    set_config_value(c, "model.vocab_size", "257");
    set_config_value(c, "parallel.zero_stage", std::to_string(stage));
    return c;
}

TEST(MemoryPlanAcrossRanks, PerNodeFigureUsesTheRanksOnTheNode) {
    std::unique_ptr<Communicator> comm = make_mpi_communicator(MPI_COMM_WORLD);
    const int local = ranks_sharing_this_node();
    ASSERT_EQ(comm->local_size(), local);
    for (int stage = 0; stage <= 3; ++stage) {
        const MemoryPlan plan = plan_memory(small_config(stage), comm->size(), comm->local_size(), 1024, 1 << 20, false);
        EXPECT_EQ(plan.ranks_per_node, local);
        EXPECT_DOUBLE_EQ(plan.per_node(), plan.per_rank() * local) << "stage " << stage;
        // Every rank plans the same bytes (the baseline given here is the same on all).
        double mine = plan.per_rank();
        double lo = mine, hi = mine;
        MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        EXPECT_EQ(lo, hi) << "stage " << stage << ": ranks planned different peaks";
    }
}

TEST(MemoryPlanAcrossRanks, ARefusalIsAgreedByEveryRank) {
    std::unique_ptr<Communicator> comm = make_mpi_communicator(MPI_COMM_WORLD);
    MemoryPlan plan = plan_memory(small_config(1), comm->size(), comm->local_size(), 1024, 1 << 20, false);
    // Only the last rank sees a node too small for the plan: every rank must refuse with
    // its message (a rank refusing alone would leave the others waiting in a collective).
    plan.available = comm->rank() == comm->size() - 1 ? plan.per_node() : 1e18;
    std::string message;
    try {
        check_memory_plan(plan, MemoryCheck::kStrict, *comm);
    } catch (const InputError& e) {
        message = e.what();
    }
    EXPECT_NE(message.find("predicted peak memory"), std::string::npos) << "rank " << comm->rank() << ": '" << message << "'";
    // warn: nobody throws; the rank whose node is short gets the text.
    const std::string warning = check_memory_plan(plan, MemoryCheck::kWarn, *comm);
    EXPECT_EQ(warning.empty(), comm->rank() != comm->size() - 1) << warning;
}

}  // namespace
}  // namespace zt
