// Shard groups and the rank layout (see include/ztrain/parallel/device_mesh.hpp).
#include "ztrain/parallel/device_mesh.hpp"

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"

#include <algorithm>

namespace zt {

std::string RankLayout::describe() const {
    std::string s = str(world_size, " = ");
    if (ranks_per_node > 0) {
        s += str(nodes, nodes == 1 ? " node" : " nodes", " x ", ranks_per_node, ranks_per_node == 1 ? " rank" : " ranks",
                 "/node");
    } else {
        s += str(nodes, " nodes with different numbers of ranks");
    }
    if (pipeline > 1) s += str("; pipeline ", pipeline, " x ", stage_size, " ranks/stage");
    if (tensor > 1) {
        s += str("; tensor ", tensor, " x shard ", shard_group, " x replica ", replicas);
        if (!tensor_within_nodes) s += ", tensor groups span nodes";
        if (!groups_within_nodes) s += ", shard groups span nodes";
        return s;
    }
    s += str("; shard groups of ", shard_group, shard_group == 1 ? " rank" : " ranks", " (", replicas,
             replicas == 1 ? " replica" : " replicas", ")");
    if (!groups_within_nodes) s += ", groups span nodes";
    return s;
}

int resolve_shard_group(int setting, int world_size, int ranks_per_node, int zero_stage, std::string* note) {
    ZT_REQUIRE(world_size >= 1, "world size ", world_size);
    if (zero_stage == 0) {  // DDP shards nothing: one group of all ranks
        if (note != nullptr && setting > 0 && setting != world_size) {
            *note = str("parallel.shard_group = ", setting, " has no effect with parallel.zero_stage = 0 (DDP "
                        "replicates the whole state on every rank)");
        }
        return world_size;
    }
    if (setting == 0) return world_size;
    if (setting == kShardGroupNode) {
        if (ranks_per_node > 0 && world_size % ranks_per_node == 0) return ranks_per_node;
        if (note != nullptr) {
            *note = "parallel.shard_group = node: the nodes hold different numbers of ranks, so the state is "
                    "sharded over all ranks (set parallel.shard_group to a size that divides the world to group)";
        }
        return world_size;
    }
    if (setting < 0 || world_size % setting != 0) {
        throw InputError(str("parallel.shard_group = ", setting, ": expected node, 0 (all ranks) or a number of ranks "
                             "that divides the world size (", world_size, ")"));
    }
    return setting;
}

namespace {

int all_reduce_int(int v, MPI_Op op, MPI_Comm comm) {
    int out = 0;
    ZT_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT, op, comm));
    return out;
}

}  // namespace

DeviceMesh::DeviceMesh(MPI_Comm world, int pipeline, int tensor, int setting, int zero_stage) {
    RankLayout& L = m_layout;
    if (pipeline < 1) throw InputError(str("parallel.pipeline = ", pipeline, ": expected a number of stages >= 1"));
    if (tensor < 1) throw InputError(str("parallel.tensor = ", tensor, ": expected a number of ranks >= 1"));
    if (world == MPI_COMM_NULL) {
        if (pipeline != 1) {
            throw InputError(str("parallel.pipeline = ", pipeline, ": must divide the number of ranks (1)"));
        }
        if (tensor != 1) {
            throw InputError(str("parallel.tensor = ", tensor, ": must divide the number of ranks (1)"));
        }
        resolve_shard_group(setting, 1, 1, zero_stage);  // the same checks as with MPI
        return;
    }
    ZT_MPI_CHECK(MPI_Comm_rank(world, &L.world_rank));
    ZT_MPI_CHECK(MPI_Comm_size(world, &L.world_size));
    if (L.world_size % (pipeline * tensor) != 0) {
        throw InputError(pipeline > 1 ? str("parallel.pipeline = ", pipeline, " x parallel.tensor = ", tensor,
                                            ": must divide the number of ranks (", L.world_size, ")")
                                      : str("parallel.tensor = ", tensor, ": must divide the number of ranks (",
                                            L.world_size, ")"));
    }
    // Stages: P blocks of S consecutive world ranks; the rest of the mesh is built inside the
    // stage as if it were the world.
    L.pipeline = pipeline;
    L.stage_size = L.world_size / pipeline;
    L.pipeline_rank = L.world_rank / L.stage_size;
    L.stage_rank = L.world_rank % L.stage_size;
    MPI_Comm stage = world;
    if (pipeline > 1) {
        ZT_MPI_CHECK(MPI_Comm_split(world, L.pipeline_rank, L.world_rank, &m_stage));
        ZT_MPI_CHECK(MPI_Comm_split(world, L.stage_rank, L.world_rank, &m_pipeline));
        m_owns_stage = true;
        stage = m_stage;
    } else {
        m_stage = world;
    }
    const NodeComm node(world);
    L.local_rank = node.rank();
    L.local_size = node.size();
    L.nodes = all_reduce_int(L.local_rank == 0 ? 1 : 0, MPI_SUM, world);
    const int min_local = all_reduce_int(L.local_size, MPI_MIN, world);
    const int max_local = all_reduce_int(L.local_size, MPI_MAX, world);
    L.ranks_per_node = min_local == max_local ? min_local : 0;

    // Tensor groups: T consecutive ranks of the stage. The data-parallel ranks: one tensor rank.
    L.tensor = tensor;
    L.tensor_rank = L.stage_rank % tensor;
    L.data_size = L.stage_size / tensor;
    L.data_rank = L.stage_rank / tensor;
    if (tensor > 1) {
        ZT_MPI_CHECK(MPI_Comm_split(stage, L.data_rank, L.world_rank, &m_tensor));
        const NodeComm tensor_node(m_tensor);
        L.tensor_within_nodes = all_reduce_int(tensor_node.size() == tensor ? 1 : 0, MPI_MIN, world) == 1;
    }
    ZT_MPI_CHECK(MPI_Comm_split(stage, L.tensor_rank, L.world_rank, &m_data));

    // Shard groups among the data-parallel ranks; a node holds ranks_per_node / T of them (of
    // this stage's: a stage smaller than a node shares it with other stages).
    const int stage_per_node = std::min(L.ranks_per_node, L.stage_size);
    const int data_per_node = stage_per_node > 0 && stage_per_node % tensor == 0 ? stage_per_node / tensor : 0;
    L.shard_group = resolve_shard_group(setting, L.data_size, data_per_node, zero_stage, &m_note);
    L.replicas = L.data_size / L.shard_group;

    // The default groups are the nodes (whatever the placement of ranks); explicit sizes take
    // consecutive data ranks. Colour = the group's lowest world rank, so group order follows
    // world rank order either way.
    int color = L.data_rank / L.shard_group * L.shard_group * tensor;
    if (setting == kShardGroupNode && zero_stage > 0 && L.shard_group == data_per_node) {
        color = all_reduce_int(L.world_rank, MPI_MIN, node.get());
    }
    ZT_MPI_CHECK(MPI_Comm_split(m_data, color, L.world_rank, &m_shard));
    ZT_MPI_CHECK(MPI_Comm_rank(m_shard, &L.shard_rank));
    int got = 0;
    ZT_MPI_CHECK(MPI_Comm_size(m_shard, &got));
    ZT_REQUIRE(got == L.shard_group, "shard group of ", got, " ranks, expected ", L.shard_group);
    ZT_MPI_CHECK(MPI_Comm_split(m_data, L.shard_rank, L.world_rank, &m_replica));
    ZT_MPI_CHECK(MPI_Comm_rank(m_replica, &L.replica));
    ZT_MPI_CHECK(MPI_Comm_size(m_replica, &got));
    ZT_REQUIRE(got == L.replicas, "replica group of ", got, " ranks, expected ", L.replicas);

    // A group lies within a node when all of its ranks share one (a shared-memory split of
    // the group is the whole group).
    const NodeComm group_node(m_shard);
    L.groups_within_nodes = all_reduce_int(group_node.size() == L.shard_group ? 1 : 0, MPI_MIN, world) == 1;
}

DeviceMesh::~DeviceMesh() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm* c : {&m_shard, &m_replica, &m_tensor, &m_data, &m_pipeline}) {
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
    if (m_owns_stage) MPI_Comm_free(&m_stage);
}

}  // namespace zt
