// Where a job's ranks sit and how they share the model state (hybrid sharding: FSDP's
// HYBRID_SHARD, DeepSpeed's hpZ/MiCS, torchtitan's dp_shard x dp_replicate mesh).
//
// The N ranks form N/G shard groups of G ranks (parallel.shard_group). Inside a group the
// model state is split G ways and ZeRO stages 1-3 behave as with G ranks in all; the groups
// are replicas of each other:
//
//   gradients    reduce-scattered inside the group (the shard communicator), then the owned
//                shard is all-reduced across the groups (the replica communicator), once per
//                optimizer step, so the slow links carry 2*(Psi/G)*(R-1)/R elements per rank
//                instead of ZeRO's per-unit traffic over all N ranks
//   parameters   all-gathered inside the group only (every group holds identical shards)
//   optimizer    each rank updates its shard; replicas compute the same update
//   checkpoint   only replica 0 writes; its G shard files are a complete checkpoint
//
// Default G: the ranks of one node (MPI_COMM_TYPE_SHARED), so the group traffic stays on the
// node's fast links. ZeRO stage 0 shards nothing: there the group is always all ranks.
// Groups of an explicit size are consecutive world ranks (rank / G); the default groups are
// the nodes themselves, whatever the rank placement.
#pragma once

#include <mpi.h>

#include <string>

namespace zt {

/// Where the ranks are and how they are grouped: pure numbers, the same on every rank
/// except the *_rank fields.
struct RankLayout {
    int world_size = 1;
    int world_rank = 0;
    int nodes = 1;
    int ranks_per_node = 1;  ///< 0 when the nodes hold different numbers of ranks
    int local_rank = 0;      ///< among the ranks of this node (picks the GPU)
    int local_size = 1;
    int shard_group = 1;     ///< G: ranks that shard the state together
    int replicas = 1;        ///< R = N / G
    int shard_rank = 0;      ///< this rank's place in its group (which shard it owns)
    int replica = 0;         ///< which group (0 writes the checkpoint)
    /// Every group lies within one node (its traffic never crosses a node boundary).
    bool groups_within_nodes = true;
    /// "4 = 2 nodes x 2 ranks/node; shard groups of 2 ranks (2 replicas)"
    std::string describe() const;
};

/// parallel.shard_group as written: kNode (the default), 0 = all ranks, or G > 0.
constexpr int kShardGroupNode = -1;

/// The group size for `setting` (kNode, 0 or G) with `world_size` ranks of which
/// `ranks_per_node` per node (0: uneven nodes). Stage 0 gives world_size. Throws InputError
/// naming parallel.shard_group when G does not divide the world. Uneven nodes with the
/// default give world_size; `*note` (when given) then says so.
int resolve_shard_group(int setting, int world_size, int ranks_per_node, int zero_stage, std::string* note = nullptr);

/// The layout and the two MPI communicators of a run (collective over `world`; all ranks
/// pass the same setting and stage). MPI_COMM_NULL: one rank, no MPI calls, null comms.
class ShardGroups {
  public:
    ShardGroups(MPI_Comm world, int setting, int zero_stage);
    ~ShardGroups();
    ShardGroups(const ShardGroups&) = delete;
    ShardGroups& operator=(const ShardGroups&) = delete;

    const RankLayout& layout() const { return m_layout; }
    /// The ranks of this rank's group (size G) and the ranks holding the same shard in the
    /// other groups (size R), ordered by world rank. MPI_COMM_NULL for a one-rank job.
    MPI_Comm shard_comm() const { return m_shard; }
    MPI_Comm replica_comm() const { return m_replica; }
    /// A line for the log when the default could not be the node (uneven nodes); else "".
    const std::string& note() const { return m_note; }

  private:
    RankLayout m_layout;
    MPI_Comm m_shard = MPI_COMM_NULL;
    MPI_Comm m_replica = MPI_COMM_NULL;
    std::string m_note;
};

}  // namespace zt
