// The time plan (see time_plan.hpp): the formulas, then a step of a deck on a mesh.
#include "ztrain/train/time_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/pipeline_schedule.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"

namespace zt {

GroupPlacement place_group(int ranks, int stride, int ranks_per_node) {
    GroupPlacement g;
    g.ranks = std::max(1, ranks);
    const int per_node = std::max(1, ranks_per_node);
    int nodes = 0;
    int last_node = -1;
    for (int k = 0; k < g.ranks; ++k) {
        const int node = static_cast<int>(static_cast<long long>(k) * std::max(1, stride) / per_node);
        if (node != last_node) ++nodes;  // ranks ascend, so a new node is never one seen before
        last_node = node;
    }
    g.nodes = nodes;
    g.ranks_on_node = std::max(1, g.ranks / nodes);
    return g;
}

Link group_link(const ClusterConfig& c, const GroupPlacement& g, int active_ranks_on_node) {
    const int active = std::max(1, active_ranks_on_node);
    // A GPU's NVLink is its own; a cpu node's memory copies share the node's bandwidth.
    const double intra = c.intra_gbps * 1e9 / (c.is_cpu() ? active : 1);
    Link link;
    if (g.nodes <= 1) {
        link.latency_s = c.intra_latency_us * 1e-6;
        link.bytes_per_s = intra;
        return link;
    }
    link.inter_node = true;
    link.latency_s = c.inter_latency_us * 1e-6;
    // The node's ports are shared by the groups crossing it: active / ranks_on_node of them.
    link.bytes_per_s = std::min(intra, c.inter_gbps * 1e9 * g.ranks_on_node / active);
    return link;
}

CollectiveTime collective_time(PlannedCollective kind, double bytes, int ranks, const Link& link) {
    CollectiveTime t;
    if (kind != PlannedCollective::kSendRecv && ranks <= 1) {
        t.algorithm = "none";
        return t;
    }
    const double n = ranks;
    const double a = link.latency_s;
    const double b = link.bytes_per_s;
    switch (kind) {
        case PlannedCollective::kAllReduce: {
            const double ring = 2 * (n - 1) * a + 2 * (n - 1) / n * bytes / b;
            const double tree = 2 * std::ceil(std::log2(n)) * a + 2 * bytes / b;
            t.algorithm = tree < ring ? "tree" : "ring";
            t.seconds = std::min(ring, tree);
            return t;
        }
        case PlannedCollective::kReduceScatter:
        case PlannedCollective::kAllGather:
            t.algorithm = "ring";
            t.seconds = (n - 1) * a + (n - 1) / n * bytes / b;
            return t;
        case PlannedCollective::kSendRecv:
            t.algorithm = "p2p";
            t.seconds = a + bytes / b;
            return t;
    }
    return t;
}

double product_seconds(double flops, double peak_flops, const ClusterConfig& c) {
    if (flops <= 0) return 0;
    const double rate = peak_flops * c.product_efficiency * flops / (flops + c.product_half_gflop * 1e9);
    return flops / rate;
}

double rank_peak_flops(const ClusterConfig& c, DType work, int ranks_on_node) {
    const double tflops = work == DType::kF32 ? c.peak_tflops_fp32 : c.peak_tflops_bf16;
    return tflops * 1e12 / (c.is_cpu() ? std::max(1, ranks_on_node) : 1);
}

double rank_memory_bytes_per_s(const ClusterConfig& c, int ranks_on_node) {
    return c.memory_gbps * 1e9 / (c.is_cpu() ? std::max(1, ranks_on_node) : 1);
}

double exposed_seconds(double total_s, double window_s, double tail_s, bool overlap) {
    if (!overlap) return total_s;
    return std::min(total_s, std::max(tail_s, total_s - window_s));
}

double pipeline_makespan(PipelineScheduleKind kind, int stages, int micro_batches, int chunks, double forward_s,
                         double backward_input_s, double weight_s, double capacity) {
    const PipelineShape shape{stages, micro_batches, chunks};
    PassCosts costs;
    costs.forward = forward_s;
    costs.backward_input = backward_input_s;
    costs.weight = weight_s;
    const auto schedule = make_pipeline_schedule(kind, shape);
    if (capacity > 0) return run_pipeline_schedule_shared(schedule, shape, kind, costs, capacity).makespan;
    return run_pipeline_schedule(schedule, shape, kind, costs).makespan;
}

namespace {

/// The mesh as the time model needs it: group sizes and where their ranks sit.
struct Mesh {
    int world = 1;
    int ranks_per_node = 1;
    int active_on_node = 1;  ///< ranks on a node: min(world, ranks_per_node)
    int tensor = 1;
    int pipeline = 1;
    int chunks = 1;
    int data = 1;            ///< data-parallel ranks of a stage
    int shard = 1;           ///< the ZeRO shard group
    int replicas = 1;        ///< data / shard
    bool sequence = false;
    bool overlap = true;     ///< collectives run beside compute (GPU streams, the comm thread)
};

/// One micro-batch through one rank's whole share of the model (all its stages' chunks: the
/// caller divides by the pipeline), in seconds.
struct MicroBatchCost {
    double block_products = 0;   ///< forward, every block
    double head_products = 0;    ///< forward, the LM head
    double attention = 0;        ///< forward, every block
    double elementwise = 0;      ///< forward: norms, activations, residuals, loss
    double scores = 0;           ///< forward: the attention scores' and probabilities' traffic
    double scores_backward = 0;  ///< and its backward's
    /// backward's attention products over the forward's: 2, or 2.5 where a fused kernel
    /// recomputes the scores (five products, not four)
    double attention_backward_factor = 2;
    double tensor_comm = 0;      ///< one pass's tensor-group collectives
    double pipeline_send = 0;    ///< one activation (or its gradient) to the next stage
    /// forward, the products of frozen weights (LoRA's base): their backward has no weight
    /// gradient, so once, not twice, the forward's products
    double frozen_products = 0;
    /// forward, every second product of each block in its forward order (what torchtitan's
    /// selective op checkpointing recomputes)
    double selective_products = 0;
    double loss_elementwise = 0;  ///< the loss's part of `elementwise`
    std::string product_what;
    std::string tensor_what;
    std::string elementwise_what;
    /// The forward of a micro-batch, and its backward (twice the products, recompute's forward).
    double forward() const { return block_products + head_products + attention + elementwise + scores + tensor_comm; }
    double recompute(Recompute r) const {
        if (r == Recompute::kFull) return block_products + attention + elementwise + scores + tensor_comm;
        // The attention forward again, for its probabilities; a fused kernel keeps none (its
        // backward recomputes the scores already: attention_backward_factor).
        if (r == Recompute::kAttention) return attention_backward_factor > 2 ? 0 : attention + scores;
        // Selective op: the saved products' and attention's outputs are not recomputed.
        if (r == Recompute::kSelectiveOp) return selective_products + elementwise - loss_elementwise;
        return 0;
    }
    double backward(Recompute r) const {
        return 2 * (block_products + head_products + elementwise) + attention_backward_factor * attention +
               scores_backward - frozen_products + tensor_comm + recompute(r);
    }
};

/// What a backward recomputes: train.recompute's attention or every block, or, for a
/// described system (cluster.activation_checkpointing = selective_op), torchtitan's op-level
/// policy.
Recompute recompute_of(const Config& cfg, const ClusterConfig& c) {
    if (c.activation_checkpointing == "selective_op") return Recompute::kSelectiveOp;
    switch (cfg.train.recompute) {
        case ActivationRecompute::kNone: return Recompute::kNone;
        case ActivationRecompute::kAttention: return Recompute::kAttention;
        case ActivationRecompute::kBlocks: return Recompute::kFull;
    }
    return Recompute::kNone;
}

/// The products of one block (from the layout of the rank's tensor split: every matrix of a
/// block is one product over the micro-batch's rows) and the LM head's.
void add_products(const Config& cfg, const Mesh& mesh, double peak, const ClusterConfig& c, MicroBatchCost& out) {
    const ModelConfig& m = cfg.model;
    const double rows = static_cast<double>(cfg.train.micro_batch) * m.seq_len;
    const ModelLayout layout = make_model_layout(m, TensorSplit{mesh.tensor, 0});
    double block = 0;
    double block_flops = 0;
    double frozen = 0;
    double every_second = 0;
    int frozen_count = 0;
    int products = 0;
    int base_products = 0;  // the base's, in the block's forward order (the layout's)
    for (const ParamSpec& p : layout.params) {
        if (p.unit != 1 || p.shape.size() != 2) continue;
        const double flops = 2 * rows * static_cast<double>(p.numel);
        const double seconds = product_seconds(flops, peak, c);
        block += seconds;
        if (!p.trainable) {
            frozen += seconds;
            ++frozen_count;
        }
        const bool adapter = m.lora.on() && p.trainable;
        if (!adapter && base_products++ % 2 == 1) every_second += seconds;
        block_flops += flops;
        ++products;
    }
    out.block_products = block * m.n_layer;
    out.selective_products = every_second * m.n_layer;
    const double head_flops = 2 * rows * (static_cast<double>(m.padded_vocab()) / mesh.tensor) * m.n_embd;
    out.head_products = product_seconds(head_flops, peak, c);
    const bool lora = m.lora.on();
    out.frozen_products = frozen * m.n_layer + (lora ? out.head_products : 0);
    const double rate = (block_flops * m.n_layer + head_flops) / (out.block_products + out.head_products);
    const int adapters = lora ? products - static_cast<int>(frozen_count) : 0;
    out.product_what = str(products - adapters, " per block", lora ? str(" (+ ", adapters, " adapter)") : std::string(),
                           " + LM head, forward and ", lora ? "1x backward (frozen base), 2x (adapters)" : "2x backward", ", at ",
                           static_cast<int>(std::lround(100 * rate / peak)), "% of peak");
}

/// The attention scores' traffic per (query, key) pair a kernel computes, in bytes: forward
/// and backward. ztrain's CUDA kernel (attention.cu) computes the full (T x T) scores in
/// fp32: the product writes them, the softmax reads and writes them, a 16-bit run copies
/// them into the saved probabilities, P.V reads them; backward: dP written, the softmax's
/// backward reads P and dP and writes dS, dV's product reads P, dQ's and dK's read dS. The
/// CPU kernel walks the causal half in blocks: its softmax reads and writes them once in
/// forward, twice that in backward. A fused kernel keeps them on chip: none.
struct ScoreTraffic {
    double pairs_fraction = 0.5;  ///< of the T x T pairs (causal blocks: about half)
    double forward_bytes = 0;
    double backward_bytes = 0;
};

ScoreTraffic score_traffic(const ClusterConfig& c, DType act) {
    ScoreTraffic t;
    if (c.attention_kernel == "fused") return t;
    const double a = dtype_size(act);
    if (c.is_cpu()) {
        t.forward_bytes = 2 * a;
        t.backward_bytes = 4 * a;
        return t;
    }
    t.pairs_fraction = 1.0;
    t.forward_bytes = 4 + 2 * 4 + 4 + (a < 4 ? 4 + a : 0);
    t.backward_bytes = 4 + (a + 4 + 4) + 4 + 2 * 4;
    return t;
}

}  // namespace

EagerBlockBytes eager_block_bytes(const ModelConfig& m, int tensor, double a) {
    // Each op reads its operands and writes its result: a product of two tensors 3 passes, a
    // unary op 2. The norm rows carry the residual stream (split under sequence parallelism).
    const BlockOps ops = model_family(m).block_ops();
    const double C = m.n_embd;
    const double q = static_cast<double>(m.n_head) * m.head_size() / tensor;
    const double kv = static_cast<double>(m.kv_heads()) * m.head_size() / tensor;
    const double F = (m.ffn_dim > 0 ? m.ffn_dim : 4 * C) / tensor;
    EagerBlockBytes e;
    e.per_norm_row = 2 * 3 * a * C;  // the two residual adds
    e.per_row = 2 * a * q;           // the heads merged back (transpose, then a contiguous copy)
    // RMSNorm: to fp32, square, mean, normalise, back, times the weight (the casts only in
    // 16-bit runs); layer_norm is one kernel. Rotary as torchtitan's complex product in fp32
    // (transformers' rotate_half moves as many bytes in bf16).
    const double casts = a < 4 ? 2 * (a + 4) : 0;
    const double rms = 4 * (2 + 1 + 2) + 2 * a + casts;
    e.per_norm_row += 2 * (ops.norm == BlockOps::Norm::kLayerNorm ? 2 * a : rms) * C;
    if (ops.rotary) e.per_row += (q + kv) * (2 * 4 + casts);
    if (m.qk_norm) e.per_row += (q + kv) * rms;
    if (m.kv_heads() < m.n_head) e.per_row += 2 * a * (kv + q);  // repeat_kv copies k and v per head
    // transformers' GELU (gelu_new) is eight kernels: x^3, a scale, an add, a scale, tanh, +1,
    // x / 2, the product; SwiGLU is SiLU, then the gate's product.
    e.per_row += (ops.mlp == BlockOps::Mlp::kGeluTanh ? 2 + 2 + 3 + 2 + 2 + 2 + 2 + 3 : 2 + 3) * a * F;
    return e;
}

namespace {

/// The fraction of the peak a fused attention kernel reaches: the cluster's stated rate, or
/// the products'.
double fused_attention_efficiency(const ClusterConfig& c) {
    return c.attention_efficiency > 0 ? c.attention_efficiency : c.product_efficiency;
}

/// Attention's two (T x T) products per head (causal: half the positions on average), the
/// scores' traffic, and the element-wise passes, by the bytes they read and write.
void add_attention_and_elementwise(const Config& cfg, const Mesh& mesh, double peak, double bandwidth,
                                   const ClusterConfig& c, MicroBatchCost& out) {
    const ModelConfig& m = cfg.model;
    const double b = cfg.train.micro_batch;
    const double s = m.seq_len;
    const double heads = std::max(1, m.n_head / mesh.tensor);
    // One kernel runs every head of the micro-batch (the CPU's threads split the heads), so
    // its size class is the block's whole attention.
    const double block_attention = 2 * b * heads * 2 * s * (s + 1) / 2 * m.head_size();
    const bool fused = c.attention_kernel == "fused";
    ClusterConfig kernel = c;  // a fused kernel at its own rate
    if (fused) kernel.product_efficiency = fused_attention_efficiency(c);
    out.attention = m.n_layer * product_seconds(block_attention, peak, kernel);
    if (fused) out.attention_backward_factor = 2.5;
    const ScoreTraffic scores = score_traffic(c, cfg.precision.dtype);
    const double pairs = m.n_layer * b * heads * s * s * scores.pairs_fraction;
    out.scores = pairs * scores.forward_bytes / bandwidth;
    out.scores_backward = pairs * scores.backward_bytes / bandwidth;
    const double rows = b * s;
    const double norm_rows = mesh.sequence ? rows / mesh.tensor : rows;
    const double act = dtype_size(cfg.precision.dtype);
    const double V = static_cast<double>(m.padded_vocab()) / mesh.tensor;
    if (c.elementwise == "eager") {
        const EagerBlockBytes e = eager_block_bytes(m, mesh.tensor, act);
        out.loss_elementwise = rows * V * (act + 4 + 2 * 4) / bandwidth;  // logits to fp32, log-softmax
        out.elementwise = m.n_layer * (norm_rows * e.per_norm_row + rows * e.per_row) / bandwidth + out.loss_elementwise;
        out.elementwise_what = "one kernel per op as eager PyTorch runs the block (cluster.elementwise = eager)";
        return;
    }
    const double C = m.n_embd;
    const bool swiglu = m.ffn_dim > 0;
    const double ffn = (swiglu ? m.ffn_dim : 4 * C) / mesh.tensor;
    // Per block: two norms (read, write), two residual adds (read 2, write 1), the MLP's
    // activation (GELU: read, write; SwiGLU: read 2, write 1).
    const double elements = norm_rows * C * (2 * 2 + 2 * 3) + rows * ffn * (swiglu ? 3 : 2);
    out.loss_elementwise = rows * V * 3 * 4 / bandwidth;  // softmax + its gradient, fp32
    out.elementwise = m.n_layer * elements * act / bandwidth + out.loss_elementwise;
    out.elementwise_what = "norms, activations, residuals, loss: bytes at the memory bandwidth";
}

/// The tensor group's collectives of one pass (Megatron's f and g): two per block (attention
/// and MLP outputs), one for the embedding; all-reduces, or under sequence parallelism an
/// all-gather and a reduce-scatter each. They block the products that need them.
void add_tensor_comm(const Config& cfg, const Mesh& mesh, const ClusterConfig& c, MicroBatchCost& out) {
    if (mesh.tensor <= 1) return;
    const ModelConfig& m = cfg.model;
    const double bytes = static_cast<double>(cfg.train.micro_batch) * m.seq_len * m.n_embd *
                         dtype_size(cfg.precision.dtype);
    const Link link = group_link(c, place_group(mesh.tensor, 1, mesh.ranks_per_node), mesh.active_on_node);
    const int count = 2 * m.n_layer + 1;
    if (mesh.sequence) {
        const CollectiveTime ag = collective_time(PlannedCollective::kAllGather, bytes, mesh.tensor, link);
        const CollectiveTime rs = collective_time(PlannedCollective::kReduceScatter, bytes, mesh.tensor, link);
        out.tensor_comm = count * (ag.seconds + rs.seconds);
        out.tensor_what = str(count, " all-gathers + reduce-scatters (", ag.algorithm, ", ",
                              link.inter_node ? "inter" : "intra", "-node) per pass");
    } else {
        const CollectiveTime ar = collective_time(PlannedCollective::kAllReduce, bytes, mesh.tensor, link);
        out.tensor_comm = count * ar.seconds;
        out.tensor_what = str(count, " all-reduces (", ar.algorithm, ", ", link.inter_node ? "inter" : "intra",
                              "-node) per pass");
    }
}

MicroBatchCost micro_batch_cost(const Config& cfg, const Mesh& mesh, const ClusterConfig& c) {
    MicroBatchCost out;
    const double peak = rank_peak_flops(c, cfg.precision.dtype, mesh.active_on_node);
    const double bandwidth = rank_memory_bytes_per_s(c, mesh.active_on_node);
    add_products(cfg, mesh, peak, c, out);
    add_attention_and_elementwise(cfg, mesh, peak, bandwidth, c, out);
    add_tensor_comm(cfg, mesh, c, out);
    if (mesh.pipeline > 1) {
        const ModelConfig& m = cfg.model;
        const double rows = static_cast<double>(cfg.train.micro_batch) * m.seq_len / (mesh.sequence ? mesh.tensor : 1);
        const int stage_size = mesh.world / mesh.pipeline;
        const Link link = group_link(c, place_group(2, stage_size, mesh.ranks_per_node), mesh.active_on_node);
        out.pipeline_send =
            collective_time(PlannedCollective::kSendRecv, rows * m.n_embd * dtype_size(cfg.precision.dtype), 2, link)
                .seconds;
    }
    return out;
}

Mesh mesh_of(const Config& cfg, const ClusterConfig& c, int world, int ranks_per_node, const MemoryPlan& memory) {
    Mesh mesh;
    mesh.world = world;
    mesh.ranks_per_node = std::max(1, ranks_per_node);
    mesh.active_on_node = std::min(world, mesh.ranks_per_node);
    mesh.tensor = std::max(1, cfg.parallel.tensor);
    mesh.pipeline = std::max(1, cfg.parallel.pipeline);
    mesh.chunks = cfg.parallel.chunks();
    mesh.data = std::max(1, world / (mesh.tensor * mesh.pipeline));
    mesh.shard = cfg.parallel.zero_stage > 0 ? std::max(1, memory.shard_group) : mesh.data;
    mesh.replicas = std::max(1, mesh.data / mesh.shard);
    mesh.sequence = cfg.parallel.sequence && mesh.tensor > 1;
    mesh.overlap = !c.is_cpu() || cfg.parallel.comm_thread;
    return mesh;
}

void add_phase(TimePlan& plan, const std::string& name, double total_s, double exposed_s, const std::string& what) {
    plan.phases.push_back({name, total_s * 1e3, exposed_s * 1e3, what});
}

/// The data-parallel collectives of a step (gradients, parameters, the replicas'), each
/// with what the schedule overlaps of it. `unit_bytes`: each unit's elements on this rank.
struct DataParallelInput {
    std::vector<double> unit_numel;  ///< per unit, this rank's (its tensor split and stage)
    /// per unit, the part of unit_numel that trains (all of it but under LoRA, where a
    /// partly frozen unit's trained tail is all-reduced instead of reduce-scattered)
    std::vector<double> trained_numel;
    double forward_s = 0;            ///< one micro-batch's forward on this rank
    double backward_s = 0;           ///< and its backward
    int micro_batches = 1;
};

/// Whether compute hides a data-parallel collective over `link`: with a second stream
/// (mesh.overlap), except inside a cpu node, where its copies and sums run on the cores the
/// compute uses (the comm thread interleaves them but adds no core). A network moves its own
/// bytes.
bool hides_collectives(const Mesh& mesh, const ClusterConfig& c, const Link& link) {
    return mesh.overlap && (!c.is_cpu() || link.inter_node);
}

void add_data_parallel(const Config& cfg, const ClusterConfig& c, const Mesh& mesh, const MemoryPlan& memory,
                       const DataParallelInput& in, TimePlan& plan) {
    const int stage = cfg.parallel.zero_stage;
    const double work = dtype_size(stored_dtype(cfg));  // the gathered parameters
    const double trained = dtype_size(trained_dtype(cfg));  // a partly frozen unit's tail
    const double reduce = dtype_size(cfg.precision.reduce());
    double total_numel = 0;
    for (double n : in.trained_numel) total_numel += n;
    const GroupPlacement shard_place = place_group(mesh.shard, mesh.tensor, mesh.ranks_per_node);
    const Link shard_link = group_link(c, shard_place, mesh.active_on_node);
    const char* where = shard_link.inter_node ? "inter" : "intra";
    const bool overlap = hides_collectives(mesh, c, shard_link);
    if (stage == 0 && mesh.data > 1) {
        // DDP: the summed gradients all-reduced in buckets during the last micro-batch's backward.
        const double bytes = total_numel * reduce;
        const double bucket = std::min(bytes, std::max(1.0, memory.bucket_bytes));
        const int buckets = static_cast<int>(std::ceil(bytes / bucket));
        const CollectiveTime one = collective_time(PlannedCollective::kAllReduce, bucket, mesh.data, shard_link);
        const double total = buckets * one.seconds;
        add_phase(plan, "grad all-reduce", total, exposed_seconds(total, in.backward_s, one.seconds, overlap),
                  str(buckets, " bucket(s) of ", bucket / 1048576, " MiB over ", mesh.data, " ranks (", one.algorithm,
                      ", ", where, "-node)"));
    }
    if (stage == 0 || mesh.data <= 1) return;
    // ZeRO: each unit reduce-scattered over the shard group (stage 1: once per step; 2, 3:
    // every micro-batch, or once under a pipeline), the owned shard all-reduced over the
    // replicas (hybrid), and the parameters all-gathered (1, 2: after the step; 3: each unit
    // before its forward and its backward, overlap_depth ahead).
    double rs = 0;
    double ag = 0;
    double rs_tail = 0;
    double ag_tail = 0;
    double sums = 0;  // stage 3: the trained tails' copies summed after the step (LoRA)
    double sums_tail = 0;
    for (size_t u = 0; u < in.unit_numel.size(); ++u) {
        const double n = in.unit_numel[u];
        const double t = in.trained_numel[u];
        if (t == n) {
            rs += collective_time(PlannedCollective::kReduceScatter, n * reduce, mesh.shard, shard_link).seconds;
        } else if (t > 0) {
            rs += collective_time(PlannedCollective::kAllReduce, t * reduce, mesh.shard, shard_link).seconds;
        }
        // A partly frozen unit's trained tail (LoRA) is summed after the step. Stage 3 also
        // gathers every unit whole; stages 1-2 only what the step changed (that tail).
        const double sum = t > 0 && t < n
                               ? collective_time(PlannedCollective::kAllReduce, t * trained, mesh.shard, shard_link).seconds
                               : 0.0;
        const double g = stage == 3 || t == n
                             ? collective_time(PlannedCollective::kAllGather, n * work, mesh.shard, shard_link).seconds
                             : sum;
        ag += g;
        ag_tail = std::max(ag_tail, g);
        if (stage == 3) {
            sums += sum;
            sums_tail = std::max(sums_tail, sum);
        }
    }
    if (!in.unit_numel.empty()) {
        rs_tail = collective_time(PlannedCollective::kReduceScatter, in.trained_numel.front() * reduce, mesh.shard,
                                  shard_link).seconds;
    }
    const int reductions = (stage >= 2 && mesh.pipeline == 1) ? in.micro_batches : 1;
    // Shard groups of one rank: nothing to scatter or gather, only the replicas' all-reduce.
    if (mesh.shard > 1) {
        add_phase(plan, "grad reduce-scatter", reductions * rs,
                  reductions * exposed_seconds(rs, in.backward_s, rs_tail, overlap),
                  str(in.unit_numel.size(), " units over ", mesh.shard, " ranks (ring, ", where, "-node), ",
                      reductions, reductions == 1 ? " time" : " times", " a step"));
    }
    if (mesh.replicas > 1) {
        const GroupPlacement rp = place_group(mesh.replicas, mesh.shard * mesh.tensor, mesh.ranks_per_node);
        const Link rl = group_link(c, rp, mesh.active_on_node);
        const CollectiveTime ar =
            collective_time(PlannedCollective::kAllReduce, total_numel / mesh.shard * reduce, mesh.replicas, rl);
        // Each unit's starts when its reduce-scatter of the last micro-batch ends, so it runs
        // beside what is left of that backward; unit 0's (the last) cannot.
        const double tail = ar.seconds * (in.unit_numel.empty() || total_numel <= 0 ? 1 : in.trained_numel.front() / total_numel);
        add_phase(plan, "replica all-reduce", ar.seconds,
                  exposed_seconds(ar.seconds, std::max(0.0, in.backward_s - rs), tail,
                                  hides_collectives(mesh, c, rl)),
                  str("the owned shards over ", mesh.replicas, " replicas (", ar.algorithm, ", ",
                      rl.inter_node ? "inter" : "intra", "-node; hybrid sharding)"));
    }
    if (mesh.shard <= 1) return;
    if (stage == 3) {
        const double passes = 2.0 * in.micro_batches;
        const double exposed = in.micro_batches * (exposed_seconds(ag, in.forward_s, ag_tail, overlap) +
                                                   exposed_seconds(ag, in.backward_s, ag_tail, overlap)) +
                               exposed_seconds(sums, in.forward_s, sums_tail, overlap);
        add_phase(plan, "param all-gather", passes * ag + sums, exposed,
                  str("every unit before each forward and backward (", passes, " a step, depth ",
                      memory.overlap_depth, " ahead; ring, ", where, "-node)",
                      sums > 0 ? "; the adapters summed after the step" : ""));
    } else {
        add_phase(plan, "param all-gather", ag, exposed_seconds(ag, in.forward_s, ag_tail, overlap),
                  str("the updated shards after the step (LoRA: the adapters), waited for by the next forward (",
                      where, "-node)"));
    }
}

/// The optimizer's pass over the owned parameters (AdamW: master, m, v read and written,
/// the gradient read, the working copy written) and the step's scalar all-reduces.
void add_optimizer(const Config& cfg, const ClusterConfig& c, const Mesh& mesh, double rank_numel, TimePlan& plan) {
    const bool sharded = cfg.parallel.zero_stage > 0;
    const double owned = rank_numel / (sharded ? mesh.shard : 1);  // trained elements only (LoRA: the adapters)
    const double bytes_each = 6 * 4 + dtype_size(grads_dtype(cfg)) + dtype_size(stored_dtype(cfg)) + 4;
    const double seconds = owned * bytes_each / rank_memory_bytes_per_s(c, mesh.active_on_node);
    add_phase(plan, "optimizer", seconds, seconds,
              str("AdamW over ", owned / 1e6, " M owned parameters (", bytes_each, " B each) + the gradient norm"));
    const GroupPlacement world = place_group(mesh.world, 1, mesh.ranks_per_node);
    const Link link = group_link(c, world, mesh.active_on_node);
    const double scalars = 3 * collective_time(PlannedCollective::kAllReduce, 8, mesh.world, link).seconds;
    if (mesh.world > 1) add_phase(plan, "scalars", scalars, scalars, "loss, gradient norm, finite check (all ranks)");
}

/// train.optimizer = muon: each rank orthogonalizes the blocks' matrices that meet its owned
/// elements (all of its stage's under DDP, about 1/shard of them under ZeRO, the whole
/// matrices on every rank of a tensor group: ns_steps of
/// 4 k^2 n + 2 k^3 flops for a k x n matrix, k <= n, at train.muon_ns_dtype's rate), after
/// gathering each block's update
/// over the shard group in fp32.
void add_muon(const Config& cfg, const ClusterConfig& c, const Mesh& mesh, TimePlan& plan) {
    if (cfg.train.optimizer != OptimizerKind::kMuon) return;
    ModelConfig one = cfg.model;
    one.n_layer = 1;
    const ModelLayout block = make_model_layout(one);
    double flops = 0;
    for (const MuonMatrix& mat : muon_matrices(block, 1)) {
        const double k = std::min(mat.rows, mat.cols);
        const double n = std::max(mat.rows, mat.cols);
        flops += cfg.train.muon_ns_steps * (4 * k * k * n + 2 * k * k * k);
    }
    const double blocks = static_cast<double>(cfg.model.n_layer) / mesh.pipeline;
    const bool sharded = cfg.parallel.zero_stage > 0 && mesh.shard > 1;
    const double share = sharded ? blocks / mesh.shard : blocks;
    const DType operands = cfg.train.muon_ns_dtype;
    const double ns = share * product_seconds(flops, rank_peak_flops(c, operands, mesh.active_on_node), c);
    add_phase(plan, "muon", ns, ns,
              str("Newton-Schulz on ", share, " block(s) of matrices (", cfg.train.muon_ns_steps, " steps, ",
                  dtype_name(operands), ")"));
    if (mesh.tensor > 1) {
        // Every rank of a tensor group orthogonalizes the whole matrices from the slices.
        const Link link = group_link(c, place_group(mesh.tensor, 1, mesh.ranks_per_node), mesh.active_on_node);
        const double gather =
            share * collective_time(PlannedCollective::kAllGather, block.unit_numel[1] * 4.0, mesh.tensor, link).seconds;
        add_phase(plan, "muon tensor all-gather", gather, gather,
                  str("each matrix's fp32 update from its ", mesh.tensor, " slices, before its orthogonalization"));
    }
    if (!sharded) return;
    const GroupPlacement place = place_group(mesh.shard, mesh.tensor, mesh.ranks_per_node);
    const Link link = group_link(c, place, mesh.active_on_node);
    const double gather = blocks *
                          collective_time(PlannedCollective::kAllGather, block.unit_numel[1] * 4.0 / mesh.tensor,
                                          mesh.shard, link).seconds;
    add_phase(plan, "muon all-gather", gather, gather,
              str("each block's fp32 update over the ", mesh.shard, "-rank shard group, before its orthogonalization"));
}

/// 16-bit stored gradients at ZeRO-0/1: each micro-step's fp32 gradient scratch is rounded
/// into them (the first: read 4 B, write 2) or added into them (read 4 + 2, write 2). fp32
/// ones (precision.grad_dtype) are written by backward itself; at stages 2-3 each
/// micro-step's reduced shard is added in either way (a 1/N share, left out).
void add_gradient_accumulation(const Config& cfg, const ClusterConfig& c, const Mesh& mesh, double rank_numel, int m,
                               TimePlan& plan) {
    const DType grads = grads_dtype(cfg);
    if (grads == DType::kF32 || cfg.parallel.zero_stage >= 2) return;
    const double g = dtype_size(grads);
    const double bytes = rank_numel * ((4 + g) + (m - 1) * (4 + 2 * g));
    const double seconds = bytes / rank_memory_bytes_per_s(c, mesh.active_on_node);
    add_phase(plan, "grad accumulation", seconds, seconds,
              str("each micro-step's fp32 gradients rounded or added into the ", dtype_name(grads),
                  " stored ones (", m, " micro-step(s); precision.grad_dtype = fp32 has backward write them)"));
}

/// This rank's elements of each unit (its tensor split; under a pipeline, a stage's share).
/// `trained`: the part of each that trains (the tail from trainable_begins()).
std::vector<double> rank_unit_numel(const Config& cfg, const Mesh& mesh, bool trained = false) {
    const ModelLayout layout = make_model_layout(cfg.model, TensorSplit{mesh.tensor, 0});
    const std::vector<size_t> begin = trainable_begins(layout);
    std::vector<double> out;
    for (size_t u = 0; u < layout.unit_numel.size(); ++u) {
        out.push_back(static_cast<double>(layout.unit_numel[u] - (trained ? begin[u] : 0)));
    }
    if (mesh.pipeline <= 1) return out;
    // A stage holds its blocks (and the first and last the embedding, head and final norm):
    // by FLOPs about 1/P of the units, which the time model takes as every unit / P.
    for (double& n : out) n /= mesh.pipeline;
    return out;
}

/// The fraction of a core each thread of a cpu node's ranks gets while they all compute: below
/// 1 where their threads (train.threads each) outnumber the node's cores.
double core_share(const Config& cfg, const ClusterConfig& c, const Mesh& mesh) {
    if (!c.is_cpu() || c.cores_per_node <= 0) return 1;
    const int threads = cfg.train.threads > 0 ? cfg.train.threads : std::max(1, c.cores_per_node / mesh.active_on_node);
    return std::min(1.0, c.cores_per_node / (static_cast<double>(mesh.active_on_node) * threads));
}

/// The pipeline's bubble: its schedule on a clock, m micro-batches of passes f (forward) and b
/// (backward, of which `weight` the weight gradients: zero-bubble's W passes, inside B for the
/// others), less the compute the other phases count (m v (f + b)).
void add_pipeline_bubble(const Config& cfg, const ClusterConfig& c, const Mesh& mesh, int m, double f, double b,
                         double weight, TimePlan& plan) {
    const int v = mesh.chunks;
    const PipelineScheduleKind kind = pipeline_schedule_kind(cfg.parallel);
    // Ranks sharing a node's cores run at `share` of full speed while every stage computes
    // (the rates f and b assume); a stage that waits lends its cores, so the others' passes
    // run up to 1 / share faster meanwhile, and the bubble can come out below zero.
    const double share = core_share(cfg, c, mesh);
    const double capacity = share < 1 ? share * mesh.pipeline : 0;
    const double makespan =
        pipeline_makespan(kind, mesh.pipeline, m, v, f * share, (b - weight) * share, weight * share, capacity);
    const double busy = m * v * (f + b);
    std::string what = str(pipeline_schedule_name(kind), ", ", mesh.pipeline, " stages x ", v, " chunk(s), ", m,
                           " micro-batches: its schedule on a clock");
    if (share < 1) {
        what += str("; ", c.cores_per_node, " cores for ", std::lround(c.cores_per_node / share),
                    " threads: a waiting stage's cores go to the others (up to ", 1 / share, "x faster)");
    }
    add_phase(plan, "pipeline bubble", makespan - busy, makespan - busy, what);
}

}  // namespace

TimePlan plan_time(const Config& cfg, const ClusterConfig& c, int world_size, int ranks_per_node,
                   const MemoryPlan& memory) {
    const Mesh mesh = mesh_of(cfg, c, world_size, ranks_per_node, memory);
    const MicroBatchCost mb = micro_batch_cost(cfg, mesh, c);
    const Recompute recompute = recompute_of(cfg, c);
    const int m = std::max(1, cfg.train.grad_accum);
    const double P = mesh.pipeline;
    TimePlan plan;
    const double products = m * (3 * (mb.block_products + mb.head_products) - mb.frozen_products) / P;
    add_phase(plan, "products", products, products, mb.product_what);
    const double attention = m * (1 + mb.attention_backward_factor) * mb.attention / P;
    add_phase(plan, "attention", attention, attention,
              mb.attention_backward_factor > 2
                  ? str("two (T x T) products per head, causal, forward and 2.5x backward (fused, at ",
                        100 * fused_attention_efficiency(c),
                        "% of the peak)")
                  : std::string("two (T x T) products per head, causal, forward and 2x backward"));
    const double scores = m * (mb.scores + mb.scores_backward) / P;
    if (scores > 0) {
        add_phase(plan, "attention scores", scores, scores,
                  "the (T x T) scores and probabilities written and read back: bytes at the memory bandwidth");
    }
    add_phase(plan, "element-wise", m * 3 * mb.elementwise / P, m * 3 * mb.elementwise / P, mb.elementwise_what);
    if (mb.recompute(recompute) > 0) {
        add_phase(plan, "recompute", m * mb.recompute(recompute) / P, m * mb.recompute(recompute) / P,
                  recompute == Recompute::kFull        ? "every block's forward again in backward"
                  : recompute == Recompute::kAttention ? "every block's attention forward again, for its probabilities"
                                                       : "every second product and the element-wise ops again (selective op)");
    }
    if (mesh.tensor > 1) add_phase(plan, "tensor comm", m * 2 * mb.tensor_comm / P, m * 2 * mb.tensor_comm / P, mb.tensor_what);
    const double forward = mb.forward() / P;
    const double backward = mb.backward(recompute) / P;
    if (mesh.pipeline > 1) {
        const int v = mesh.chunks;
        const double sends = 2.0 * m * v * mb.pipeline_send;
        add_phase(plan, "pipeline p2p", sends, sends, str("activations and their gradients, ", 2 * m * v,
                                                          " messages a step per stage boundary"));
        const double weight = (mb.block_products + mb.head_products - mb.frozen_products) / P / v;  // weight gradients
        add_pipeline_bubble(cfg, c, mesh, m, forward / v + mb.pipeline_send, backward / v + mb.pipeline_send, weight,
                            plan);
    }
    DataParallelInput dp;
    dp.unit_numel = rank_unit_numel(cfg, mesh);
    dp.trained_numel = rank_unit_numel(cfg, mesh, true);
    dp.forward_s = forward;
    dp.backward_s = backward;
    dp.micro_batches = m;
    add_data_parallel(cfg, c, mesh, memory, dp, plan);
    double rank_numel = 0;
    for (double n : dp.trained_numel) rank_numel += n;
    add_gradient_accumulation(cfg, c, mesh, rank_numel, m, plan);
    add_optimizer(cfg, c, mesh, rank_numel, plan);
    add_muon(cfg, c, mesh, plan);
    double most = -1;
    for (const TimePhase& p : plan.phases) {
        plan.step_ms += p.exposed_ms;
        if (p.exposed_ms > most) {
            most = p.exposed_ms;
            plan.bottleneck = p.name;
        }
    }
    plan.tokens_per_step = memory.tokens_per_step;
    plan.tokens_per_s = plan.step_ms > 0 ? memory.tokens_per_step / (plan.step_ms / 1e3) : 0;
    const double peak = rank_peak_flops(c, cfg.precision.dtype, mesh.active_on_node) * world_size;
    plan.mfu = plan.step_ms > 0 ? memory.flops_per_step / (plan.step_ms / 1e3) / peak : 0;
    plan.cluster_what = str(world_size, " rank(s) = ", (world_size + mesh.ranks_per_node - 1) / mesh.ranks_per_node,
                            " node(s) x ", mesh.active_on_node, ", ", c.device, ", mesh: data ", mesh.data,
                            " x tensor ", mesh.tensor, mesh.sequence ? " (sequence)" : "", " x pipeline ",
                            mesh.pipeline, ", ZeRO-", cfg.parallel.zero_stage);
    return plan;
}

std::string format_time_plan(const TimePlan& plan) {
    std::ostringstream os;
    os << "time plan per step (" << plan.cluster_what << "):\n";
    char line[512];
    std::snprintf(line, sizeof line, "  %-20s %12s %12s   %s\n", "phase", "total ms", "exposed ms", "what");
    os << line;
    for (const TimePhase& p : plan.phases) {
        std::snprintf(line, sizeof line, "  %-20s %12.3f %12.3f   %s\n", p.name.c_str(), p.total_ms, p.exposed_ms,
                      p.what.c_str());
        os << line;
    }
    std::snprintf(line, sizeof line, "tokens per step %.0f, %.0f tokens/s, MFU %.1f%%, bottleneck: %s\n",
                  plan.tokens_per_step, plan.tokens_per_s, 100 * plan.mfu, plan.bottleneck.c_str());
    os << line;
    std::snprintf(line, sizeof line, "predicted step: %.1f ms\n", plan.step_ms);
    os << line;
    return os.str();
}

MemoryPlan plan_memory_on_cluster(const Config& cfg, const ClusterConfig& c, int world_size, int ranks_per_node) {
    Config planned = cfg;
    planned.backend = c.is_cpu() ? BackendChoice::kCpu : BackendChoice::kCuda;
    planned.cluster = c;  // its attention kernel decides whether the probabilities are kept
    MemoryPlan plan = plan_for_deck(planned, world_size, ranks_per_node);
    plan.available = c.memory_gib * 1024.0 * 1024 * 1024;
    plan.available_what = str("cluster.memory_gib (", c.is_cpu() ? "each node" : "each GPU", ")");
    return plan;
}

}  // namespace zt
