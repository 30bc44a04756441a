// Where a job's ranks sit and how they split the work: a device mesh of pipeline x replica x
// shard x tensor ranks (torchtitan's pp x dp_replicate x dp_shard x tp; Megatron's PP x DP x
// TP).
//
// pipeline (outermost, parallel.pipeline = P): the world is P stages of S = world / P
// consecutive ranks; stage p holds a run of the model's blocks (parallel/pipeline_stages.hpp)
// and everything below applies inside each stage, over its S ranks, as if they were the
// world. The P ranks at the same place of every stage form a pipeline (pipeline_comm(),
// ordered by stage): they pass activations forward and gradients back, point to point, and
// read the same micro-batches. Outermost, so the stages may sit on different nodes and only
// that point-to-point traffic crosses between them.
//
// tensor (innermost, parallel.tensor = T): T consecutive world ranks split every block's
// products (model/transformer.hpp, TensorGroup) and hold a 1/T slice of each split tensor
// (ModelLayout of their TensorSplit). Consecutive, so a tensor group stays inside a node.
// The N/T ranks holding the same tensor rank are the data-parallel ranks: they read
// different micro-batches and share the model state of their slice, as below, with N
// standing for N/T. With T = 1 every rank is a data-parallel rank.
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
// Groups of an explicit size are consecutive data-parallel ranks (data rank / G); the default
// groups are the nodes themselves, whatever the rank placement.
#pragma once

#include <mpi.h>

#include <string>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/model/transformer.hpp"

namespace zt {

/// Where the ranks are and how they are grouped: pure numbers, the same on every rank
/// except the *_rank fields.
struct RankLayout {
    int world_size = 1;
    int world_rank = 0;
    int pipeline = 1;        ///< P: stages (parallel.pipeline)
    int pipeline_rank = 0;   ///< this rank's stage
    int stage_size = 1;      ///< S = world / P: the ranks of one stage
    int stage_rank = 0;      ///< this rank's place in its stage (world rank % S)
    int nodes = 1;
    int ranks_per_node = 1;  ///< 0 when the nodes hold different numbers of ranks
    int local_rank = 0;      ///< among the ranks of this node (picks the GPU)
    int local_size = 1;
    int tensor = 1;          ///< T: ranks that split each layer (parallel.tensor)
    int tensor_rank = 0;     ///< this rank's place in its tensor group (which slice it holds)
    int data_size = 1;       ///< N / T data-parallel ranks (the same tensor rank)
    int data_rank = 0;       ///< which micro-batches this rank reads: stage rank / T
    bool tensor_within_nodes = true;  ///< every tensor group lies within one node
    int shard_group = 1;     ///< G: ranks that shard the state together
    int replicas = 1;        ///< R = (N / T) / G
    int shard_rank = 0;      ///< this rank's place in its group (which shard it owns)
    int replica = 0;         ///< which group (0 writes the checkpoint)
    /// Every group lies within one node (its traffic never crosses a node boundary).
    bool groups_within_nodes = true;
    /// "4 = 2 nodes x 2 ranks/node; shard groups of 2 ranks (2 replicas)"; with T > 1
    /// "8 = 2 nodes x 4 ranks/node; tensor 2 x shard 2 x replica 2"
    std::string describe() const;
};

/// parallel.shard_group as written: kNode (the default), 0 = all ranks, or G > 0.
constexpr int kShardGroupNode = -1;

/// The group size for `setting` (kNode, 0 or G) with `world_size` ranks of which
/// `ranks_per_node` per node (0: uneven nodes). Stage 0 gives world_size. Throws InputError
/// naming parallel.shard_group when G does not divide the world. Uneven nodes with the
/// default give world_size; `*note` (when given) then says so.
int resolve_shard_group(int setting, int world_size, int ranks_per_node, int zero_stage, std::string* note = nullptr);

/// The mesh and its MPI communicators (collective over `world`; all ranks pass the same
/// settings). MPI_COMM_NULL: one rank, no MPI calls, null comms. `pipeline` x `tensor`
/// (parallel.pipeline, parallel.tensor) must divide the world size: else InputError naming
/// the keys.
class DeviceMesh {
  public:
    DeviceMesh(MPI_Comm world, int pipeline, int tensor, int setting, int zero_stage);
    /// Without pipeline parallelism (P = 1).
    DeviceMesh(MPI_Comm world, int tensor, int setting, int zero_stage)
        : DeviceMesh(world, 1, tensor, setting, zero_stage) {}
    /// Without pipeline or tensor parallelism.
    DeviceMesh(MPI_Comm world, int setting, int zero_stage) : DeviceMesh(world, 1, 1, setting, zero_stage) {}
    ~DeviceMesh();
    DeviceMesh(const DeviceMesh&) = delete;
    DeviceMesh& operator=(const DeviceMesh&) = delete;

    const RankLayout& layout() const { return m_layout; }
    /// The ranks of this rank's group (size G) and the ranks holding the same shard in the
    /// other groups (size R), ordered by world rank. MPI_COMM_NULL for a one-rank job.
    MPI_Comm shard_comm() const { return m_shard; }
    MPI_Comm replica_comm() const { return m_replica; }
    /// The T ranks of this rank's tensor group, and the N/T data-parallel ranks of its
    /// tensor rank (shard x replica), ordered by world rank. MPI_COMM_NULL for one rank, and
    /// the tensor comm also when T = 1.
    MPI_Comm tensor_comm() const { return m_tensor; }
    MPI_Comm data_comm() const { return m_data; }
    /// The P ranks of this rank's pipeline, ordered by stage (MPI_COMM_NULL when P = 1), and
    /// the S ranks of its stage (the world when P = 1; MPI_COMM_NULL for one rank).
    MPI_Comm pipeline_comm() const { return m_pipeline; }
    MPI_Comm stage_comm() const { return m_stage; }
    /// A line for the log when the default could not be the node (uneven nodes); else "".
    const std::string& note() const { return m_note; }

  private:
    RankLayout m_layout;
    MPI_Comm m_shard = MPI_COMM_NULL;
    MPI_Comm m_replica = MPI_COMM_NULL;
    MPI_Comm m_tensor = MPI_COMM_NULL;
    MPI_Comm m_data = MPI_COMM_NULL;
    MPI_Comm m_pipeline = MPI_COMM_NULL;
    MPI_Comm m_stage = MPI_COMM_NULL;
    bool m_owns_stage = false;  ///< m_stage was split off the world (P > 1)
    std::string m_note;
};

/// The model's tensor group (model/transformer.hpp) over a communicator of its T ranks:
/// MPI on host memory on the CPU, NCCL (or host staging) on device memory on a GPU. Its
/// traffic is counted in the communicator's stats like any other collective.
class CommunicatorTensorGroup final : public TensorGroup {
  public:
    explicit CommunicatorTensorGroup(Communicator& comm) : m_comm(comm) {}
    TensorSplit split() const override { return {m_comm.size(), m_comm.rank()}; }
    void all_reduce(ActPtr buf, size_t n) override { m_comm.all_reduce(buf.data, n, ReduceOp::kSum, buf.dtype); }
    void all_reduce_floats(float* buf, size_t n, bool max) override {
        m_comm.all_reduce(buf, n, max ? ReduceOp::kMax : ReduceOp::kSum, DType::kF32);
    }
    void all_gather_host(const float* in, float* out, size_t n) override {
        m_comm.all_gather_bytes(in, out, n * sizeof(float));
    }
    void all_gather(ConstActPtr in, ActPtr out, size_t n) override { m_comm.all_gather(in.data, out.data, n, out.dtype); }
    void reduce_scatter(ConstActPtr in, ActPtr out, size_t n) override {
        m_comm.reduce_scatter(in.data, out.data, n, ReduceOp::kSum, out.dtype);
    }

  private:
    Communicator& m_comm;
};

}  // namespace zt
