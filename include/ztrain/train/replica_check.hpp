// Silent data corruption: a rank whose memory or arithmetic flips a bit crashes nothing; its
// state just drifts from what it should be. Every parallel.check_every steps, after the
// optimizer:
//  - replicas compare: the ranks that hold the same owned elements (a shard's replicas across
//    shard groups; every rank under DDP) compare a hash per unit of their fp32 master, AdamW
//    m and v; the ranks of the data-parallel group compare a hash per unit of the parameters
//    as the model reads them (acquired: gathered under ZeRO-3), which every one of them must
//    hold identically, so a gathered copy is checked against the owners' state;
//  - checksums at rest: every rank keeps its owned state's hashes and verifies them before
//    the next step reads the state, so a flip between steps is caught where a shard has no
//    replica (ZeRO-1/2/3 in one shard group).
// A mismatch is agreed by every rank (one all-reduce) and ends the job at that step, before
// any checkpoint is written from the suspect state, with exit status 3 and a message naming
// the ranks, hosts, units and step. Also the test hook ZT_DEBUG_FLIP=R:S, which flips one
// bit of rank R's master copy between steps S-1 and S. Not here: deciding what to do next
// (a resume from the last checkpoint continues as usual).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

class Communicator;
class ModelState;

class ReplicaCheck {
  public:
    /// `world`: the run's communicator (agreement, messages); `shard` and `replica` the
    /// model state's. Collective when check_every > 0 (the hosts and each group's world
    /// ranks are gathered once).
    ReplicaCheck(int check_every, ModelState& state, Communicator& world, Communicator& shard,
                 Communicator& replica);
    /// Before step `step` (1-based) reads the state: the ZT_DEBUG_FLIP hook, then the
    /// checksums at rest taken after the last check verified. Collective when a check is
    /// pending. Throws AgreedError (exit 3) on a mismatch.
    void before_step(long step);
    /// After step `done` (which took `step_s`): at a check step, the replicas' comparison
    /// and the checksums taken. Collective at check steps. Throws AgreedError (exit 3) on a
    /// mismatch.
    void after_step(long done, double step_s);
    /// The state was replaced (a loss-spike rollback): the checksums at rest no longer apply.
    void state_replaced() { m_at_rest.clear(); }
    /// "N state checks, X ms each: Y% of the step time at parallel.check_every = K"; "" when
    /// none ran.
    std::string cost() const;

  private:
    /// Per unit: hashes of the owned master, m and v (3 per unit).
    std::vector<uint64_t> owned_hashes();
    /// Per unit: the hash of the parameters as the model reads them (collective under ZeRO-3).
    std::vector<uint64_t> param_hashes();
    /// Where `mine` (per_unit hashes per unit, named by `kinds`) and the rest of `group`
    /// (world ranks `members`) disagree: "" when they agree. Collective over `group`.
    std::string compare(Communicator& group, const std::vector<int>& members, const std::vector<uint64_t>& mine,
                        const char* const* kinds, int per_unit);
    /// Every rank's `local` finding agreed; throws on all when any has one.
    void agree(const std::string& local, long step);
    void maybe_flip(long step);

    int m_every;
    ModelState& m_state;
    Communicator& m_world;
    Communicator& m_shard;
    Communicator& m_replica;
    std::vector<std::string> m_hosts;
    std::vector<int> m_shard_members;    ///< world rank of each shard-group rank
    std::vector<int> m_replica_members;  ///< world rank of each replica
    std::vector<uint64_t> m_at_rest;     ///< owned hashes taken at the last check; empty: none pending
    long m_at_rest_step = 0;
    int m_flip_rank = -1;                ///< ZT_DEBUG_FLIP
    long m_flip_step = -1;
    long m_checks = 0;
    double m_check_s = 0;  ///< time in checks and verifications
    double m_step_s = 0;   ///< time in the steps (after the first, which warms up)
    long m_steps = 0;
};

}  // namespace zt
