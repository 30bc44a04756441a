// The host snapshot of an async save (CheckpointSnapshot, checkpoint.hpp): this rank's
// primary ranges of master, adam_m and adam_v, copied out of the live state at a step
// boundary so the write (shard_writer.cpp, from a SnapshotSource) may run beside training.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "checkpoint_internal.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

using namespace ckpt_impl;

namespace {
/// A snapshot block's floats rounded up to whole 4 KiB pages: every block starts
/// page-aligned, so its bytes can go to the disk by direct I/O.
size_t page_floats(size_t n) {
    constexpr size_t per_page = kDirectAlign / sizeof(float);
    return (n + per_page - 1) / per_page * per_page;
}
}  // namespace

size_t CheckpointSnapshot::planned_bytes(const ShardPlan& plan, int rank, const PipelineStage& stage) {
    size_t floats = 0;
    for (int u = 0; u < plan.num_units(); ++u) floats += 3 * page_floats(saved_range(plan, stage, u, rank).size());
    return floats * sizeof(float);
}

CheckpointSnapshot::CheckpointSnapshot(ModelState& state)
    : m_plan(std::make_unique<ShardPlan>(state.shard_plan())),
      m_rank(state.shard_rank()),
      m_writes(state.replica() == 0),
      m_split(state.layout().split),
      m_stage(state.layout().stage),
      m_state(state) {
    m_unit_offset.resize(static_cast<size_t>(m_plan->num_units()));
    for (int u = 0; u < m_plan->num_units(); ++u) {
        m_unit_offset[static_cast<size_t>(u)] = m_floats;
        if (m_writes) m_floats += 3 * page_floats(saved_range(*m_plan, m_stage, u, m_rank).size());
    }
    const size_t bytes = std::max<size_t>(m_floats, 1) * sizeof(float);
    // Page-aligned (the shard writer's direct I/O writes from it) and, for a GPU state,
    // page-locked (full-speed copies).
    static_assert(kHostPageAlign % kDirectAlign == 0, "the snapshot is written by direct I/O");
    m_host = static_cast<float*>(state.shards().alloc_host(bytes));
    std::memset(m_host, 0, bytes);  // touch every page now, not during a capture
    m_layout_json = layout_meta(state.layout());
}

CheckpointSnapshot::~CheckpointSnapshot() { m_state.shards().free_host(m_host); }

const float* CheckpointSnapshot::data(int unit, int which) const {
    const size_t n = page_floats(saved_range(*m_plan, m_stage, unit, m_rank).size());
    return m_host + m_unit_offset[static_cast<size_t>(unit)] + static_cast<size_t>(which) * n;
}

void CheckpointSnapshot::capture(ModelState& state, const CheckpointRecord& record) {
    StateShards shards = state.shards();
    for (int u = 0; m_writes && u < m_plan->num_units(); ++u) {
        const ElementRange r = saved_range(*m_plan, m_stage, u, m_rank);
        if (r.empty()) continue;
        for (int which = 0; which < 3; ++which) {
            shards.read(u, state_kind(which), r.begin, r.end, const_cast<float*>(data(u, which)), true);
        }
    }
    m_step = record.progress.step;
    m_meta_base = make_meta_base(m_layout_json, state, record);
}

}  // namespace zt
