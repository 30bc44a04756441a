// TrainSetup's mesh has no null communicator: a dimension that is absent (parallel.tensor = 1,
// parallel.pipeline = 1) is a communicator of one rank, and the data-parallel ranks always
// have their own. The model still sees no tensor group when parallel.tensor = 1, and the step
// records count no `tensor` bytes then.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "mpi_training.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/train/train_setup.hpp"

namespace zt {
namespace {

TrainSetup started(Config cfg) {
    TrainSetup setup = set_up_training(cfg, MPI_COMM_WORLD);
    start_compute(setup, cfg);
    return setup;
}

TEST(TrainSetupMesh, AbsentDimensionsAreOneRankCommunicators) {
    test::SharedDir dir("train_setup");
    test::write_shared_train_shard(dir);
    const int N = test::world_size();
    const TrainSetup setup = started(test::tiny_mpi_config(dir.file("train.bin"), dir.file("run")));
    ASSERT_NE(setup.tensor_comm, nullptr);
    ASSERT_NE(setup.data_comm, nullptr);
    ASSERT_NE(setup.pipeline_comm, nullptr);
    EXPECT_EQ(setup.tensor_comm->size(), 1);
    EXPECT_EQ(setup.pipeline_comm->size(), 1);
    EXPECT_EQ(setup.data().size(), N) << "every rank is a data-parallel rank without tensor or pipeline";
    EXPECT_EQ(setup.data().rank(), test::world_rank());
    EXPECT_EQ(setup.tensor_group_or_null(), nullptr) << "the model must see no tensor group at parallel.tensor = 1";
    EXPECT_EQ(setup.split_tensor_comm(), nullptr);
    EXPECT_EQ(setup.all_comms().size(), 6u);
    for (const Communicator* c : setup.all_comms()) EXPECT_NE(c, nullptr);
}

TEST(TrainSetupMesh, TensorAndPipelineDimensionsSplitTheWorld) {
    const int N = test::world_size();
    if (N % 4 != 0) GTEST_SKIP() << "needs P = 2 x T = 2";
    test::SharedDir dir("train_setup_pt");
    test::write_shared_train_shard(dir);
    Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file("run"));
    cfg.parallel.pipeline = 2;
    cfg.parallel.tensor = 2;
    const TrainSetup setup = started(cfg);
    EXPECT_EQ(setup.tensor_comm->size(), 2);
    EXPECT_EQ(setup.pipeline_comm->size(), 2);
    EXPECT_EQ(setup.data().size(), N / 4);
    EXPECT_NE(setup.tensor_group_or_null(), nullptr);
    EXPECT_EQ(setup.split_tensor_comm(), setup.tensor_comm.get());
}

}  // namespace
}  // namespace zt
