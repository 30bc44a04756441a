// The mesh search (see plan_search.hpp).
#include "ztrain/train/plan_search.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/parallel/device_mesh.hpp"

namespace zt {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
/// Rows the search prints without --all.
constexpr size_t kShownCandidates = 10;

std::vector<int> divisors(long long n) {
    std::vector<int> out;
    for (long long d = 1; d <= n && d <= (1 << 20); ++d) {
        if (n % d == 0) out.push_back(static_cast<int>(d));
    }
    return out;
}

/// The pipeline variants of P stages: each schedule, interleaved with 2 and 4 chunks.
std::vector<std::pair<PipelineSchedule, int>> pipeline_variants(int pipeline) {
    if (pipeline <= 1) return {{PipelineSchedule::k1F1B, 0}};
    return {{PipelineSchedule::k1F1B, 0},
            {PipelineSchedule::kZeroBubble, 0},
            {PipelineSchedule::kInterleaved, 2},
            {PipelineSchedule::kInterleaved, 4}};
}

std::string mesh_text(const Config& c, int data, int shard_group) {
    const ParallelConfig& p = c.parallel;
    std::string s = str("data ", data, ", tensor ", p.tensor, p.sequence ? "+sp" : "", ", pipeline ", p.pipeline);
    if (p.pipeline > 1) {
        s += str(" ", setting_text(p.schedule), p.schedule == PipelineSchedule::kInterleaved ? str("x", p.chunks()) : "");
    }
    s += p.zero_stage == 0 ? ", DDP" : str(", ZeRO-", p.zero_stage);
    if (p.zero_stage > 0 && shard_group < data) s += str(" groups of ", shard_group);
    s += str(", micro ", c.train.micro_batch, " x ", c.train.grad_accum);
    if (c.train.recompute == ActivationRecompute::kAttention) s += ", recompute attention";
    if (c.train.recompute == ActivationRecompute::kBlocks) s += ", recompute";
    return s;
}

/// One candidate judged: refused by the checks, too big, or planned.
struct Judged {
    bool refused = false;
    bool too_big = false;
    PlanCandidate candidate;
    int shard_group = 0;
};

Judged judge(const Config& cand, const ClusterConfig& cluster, int world, int per_node,
             const PlanSearchOptions& options) {
    Judged j;
    try {
        validate(with_global_batch(cand, world));  // train.global_batch: the pipeline's rules at this accumulation
        const MemoryPlan memory = options.cluster_memory ? plan_memory_on_cluster(cand, cluster, world, per_node)
                                                         : plan_for_deck(cand, world, per_node);
        if (!plan_fits(memory)) {
            j.too_big = true;
            return j;
        }
        j.shard_group = memory.shard_group;
        j.candidate.cfg = cand;
        j.candidate.time = plan_time(cand, cluster, world, per_node, memory);
        j.candidate.peak_gib = memory.per_rank() / kGiB;
        const int data = world / (cand.parallel.tensor * cand.parallel.pipeline);
        j.candidate.mesh = mesh_text(cand, data, memory.shard_group);
    } catch (const InputError&) {
        j.refused = true;
    }
    return j;
}

/// Every setting of the mesh keys for `data` data ranks of `tensor` x `pipeline`, with the
/// global batch's `per_rank` sequences per data rank cut into micro-batches.
/// `fused_attention`: the cluster's kernel keeps no probabilities, so recompute = attention is
/// recompute = false there and is not enumerated.
std::vector<Config> mesh_settings(const Config& base, bool fused_attention, int tensor, int pipeline, int data,
                                  long long per_rank) {
    std::vector<Config> out;
    for (int micro : divisors(per_rank)) {
        for (const auto& [schedule, chunks] : pipeline_variants(pipeline)) {
            for (int sequence = 0; sequence <= (tensor > 1 ? 1 : 0); ++sequence) {
                for (int stage = 0; stage <= (data > 1 ? 3 : 0); ++stage) {
                    for (int group : stage > 0 ? std::vector<int>{0, kShardGroupNode} : std::vector<int>{-1}) {
                        for (const ActivationRecompute recompute :
                             {ActivationRecompute::kNone, ActivationRecompute::kAttention, ActivationRecompute::kBlocks}) {
                            if (recompute == ActivationRecompute::kAttention && fused_attention) continue;
                            Config c = base;
                            c.parallel.tensor = tensor;
                            c.parallel.pipeline = pipeline;
                            c.parallel.sequence = sequence == 1;
                            c.parallel.schedule = schedule;
                            c.parallel.virtual_stages = chunks;
                            c.parallel.pipeline_layers.clear();
                            c.parallel.zero_stage = stage;
                            c.parallel.shard_group.ranks = group;
                            c.train.micro_batch = micro;
                            c.train.grad_accum = static_cast<int>(per_rank / micro);
                            c.train.recompute = recompute;
                            out.push_back(c);
                        }
                    }
                }
            }
        }
    }
    return out;
}

}  // namespace

PlanSearch search_meshes(const Config& cfg, const ClusterConfig& cluster, int world, int per_node,
                         const PlanSearchOptions& options) {
    PlanSearch search;
    const int deck_data = std::max(1, world / std::max(1, cfg.parallel.tensor * cfg.parallel.pipeline));
    search.global_batch = static_cast<long long>(cfg.train.micro_batch) * cfg.train.grad_accum * deck_data;
    std::set<std::string> seen;  // a shard group "node" that resolves to all ranks is the same mesh
    for (int tensor : divisors(world)) {
        for (int pipeline : divisors(world / tensor)) {
            const int data = world / (tensor * pipeline);
            if (search.global_batch % data != 0) continue;
            for (const Config& cand : mesh_settings(cfg, cluster.attention_kernel == "fused", tensor, pipeline, data,
                                                           search.global_batch / data)) {
                Judged j = judge(cand, cluster, world, per_node, options);
                search.refused += j.refused ? 1 : 0;
                search.too_big += j.too_big ? 1 : 0;
                if (j.refused || j.too_big || !seen.insert(j.candidate.mesh).second) continue;
                search.fitting.push_back(std::move(j.candidate));
            }
        }
    }
    std::stable_sort(search.fitting.begin(), search.fitting.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
        return a.time.step_ms < b.time.step_ms;
    });
    return search;
}

std::string search_plans(const Config& cfg, const ClusterConfig& cluster, int world, int per_node,
                         const PlanSearchOptions& options) {
    const PlanSearch search = search_meshes(cfg, cluster, world, per_node, options);
    std::ostringstream os;
    os << "mesh search: " << world << " rank(s), " << per_node << " per node (" << cluster.device << "), global batch "
       << search.global_batch << " sequences of " << cfg.model.seq_len << ": " << search.fitting.size()
       << " candidate(s) fit, " << search.too_big << " do not fit in memory, " << search.refused
       << " refused by the deck's checks\n";
    char line[512];
    std::snprintf(line, sizeof line, "%4s %17s %13s %7s %9s  %-20s %s\n", "rank", "predicted_step_ms",
                  "tokens_per_s", "mfu", "peak_gib", "bottleneck", "mesh");
    os << line;
    const size_t shown = options.all ? search.fitting.size() : std::min(kShownCandidates, search.fitting.size());
    for (size_t i = 0; i < shown; ++i) {
        const PlanCandidate& c = search.fitting[i];
        std::snprintf(line, sizeof line, "%4zu %17.1f %13.0f %7.4f %9.3f  %-20s %s\n", i + 1, c.time.step_ms,
                      c.time.tokens_per_s, c.time.mfu, c.peak_gib, c.time.bottleneck.c_str(), c.mesh.c_str());
        os << line;
    }
    if (!options.write_deck.empty()) {
        ZT_INPUT_CHECK(!search.fitting.empty(), "--write ", options.write_deck,
                       ": no candidate fits, so there is no deck to write");
        std::ofstream out(options.write_deck, std::ios::binary);
        ZT_INPUT_CHECK(out, "--write: cannot write '", options.write_deck, "'");
        out << to_ini(search.fitting.front().cfg);
        ZT_INPUT_CHECK(out.good(), "--write: cannot write '", options.write_deck, "'");
        os << "wrote the fastest (" << search.fitting.front().mesh << ") to " << options.write_deck << "\n";
    }
    return os.str();
}

}  // namespace zt
