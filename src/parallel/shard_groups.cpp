// Shard groups and the rank layout (see include/ztrain/parallel/shard_groups.hpp).
#include "ztrain/parallel/shard_groups.hpp"

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

std::string RankLayout::describe() const {
    std::string s = str(world_size, " = ");
    if (ranks_per_node > 0) {
        s += str(nodes, nodes == 1 ? " node" : " nodes", " x ", ranks_per_node, ranks_per_node == 1 ? " rank" : " ranks",
                 "/node");
    } else {
        s += str(nodes, " nodes with different numbers of ranks");
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

ShardGroups::ShardGroups(MPI_Comm world, int setting, int zero_stage) {
    RankLayout& L = m_layout;
    if (world == MPI_COMM_NULL) {
        resolve_shard_group(setting, 1, 1, zero_stage);  // the same checks as with MPI
        return;
    }
    ZT_MPI_CHECK(MPI_Comm_rank(world, &L.world_rank));
    ZT_MPI_CHECK(MPI_Comm_size(world, &L.world_size));
    const NodeComm node(world);
    L.local_rank = node.rank();
    L.local_size = node.size();
    L.nodes = all_reduce_int(L.local_rank == 0 ? 1 : 0, MPI_SUM, world);
    const int min_local = all_reduce_int(L.local_size, MPI_MIN, world);
    const int max_local = all_reduce_int(L.local_size, MPI_MAX, world);
    L.ranks_per_node = min_local == max_local ? min_local : 0;
    L.shard_group = resolve_shard_group(setting, L.world_size, L.ranks_per_node, zero_stage, &m_note);
    L.replicas = L.world_size / L.shard_group;

    // The default groups are the nodes (whatever the placement of ranks); explicit sizes take
    // consecutive world ranks. Colour = the group's lowest world rank, so group order follows
    // world rank order either way.
    int color = L.world_rank / L.shard_group * L.shard_group;
    if (setting == kShardGroupNode && zero_stage > 0 && L.shard_group == L.ranks_per_node) {
        color = all_reduce_int(L.world_rank, MPI_MIN, node.get());
    }
    ZT_MPI_CHECK(MPI_Comm_split(world, color, L.world_rank, &m_shard));
    ZT_MPI_CHECK(MPI_Comm_rank(m_shard, &L.shard_rank));
    int got = 0;
    ZT_MPI_CHECK(MPI_Comm_size(m_shard, &got));
    ZT_REQUIRE(got == L.shard_group, "shard group of ", got, " ranks, expected ", L.shard_group);
    ZT_MPI_CHECK(MPI_Comm_split(world, L.shard_rank, L.world_rank, &m_replica));
    ZT_MPI_CHECK(MPI_Comm_rank(m_replica, &L.replica));
    ZT_MPI_CHECK(MPI_Comm_size(m_replica, &got));
    ZT_REQUIRE(got == L.replicas, "replica group of ", got, " ranks, expected ", L.replicas);

    // A group lies within a node when all of its ranks share one (a shared-memory split of
    // the group is the whole group).
    const NodeComm group_node(m_shard);
    L.groups_within_nodes = all_reduce_int(group_node.size() == L.shard_group ? 1 : 0, MPI_MIN, world) == 1;
}

ShardGroups::~ShardGroups() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (m_shard != MPI_COMM_NULL) MPI_Comm_free(&m_shard);
    if (m_replica != MPI_COMM_NULL) MPI_Comm_free(&m_replica);
}

}  // namespace zt
