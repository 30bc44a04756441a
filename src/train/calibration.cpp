// Calibration (see calibration.hpp). Every rank measures at once, so each sees its share of
// the node (the cores, the memory bus) as a run of this many ranks would; the node's figures
// are the shares times the ranks on it, as a cpu cluster file states them.
#include "ztrain/train/calibration.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/comm/comm_select.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/train/time_plan.hpp"
#include "ztrain/train/train_setup.hpp"

namespace zt {
namespace {

/// Each measurement repeats until this long has passed (the fastest repetition is kept).
constexpr double kMeasureSeconds = 0.15;

/// The fastest of repeated calls of `op` (seconds), every rank starting together. A local op
/// repeats until kMeasureSeconds have passed; a collective (`collective`) as many times as
/// rank 0's first call says fits in them, so every rank makes the same calls. `op` returns
/// when its work is done (on a GPU: it synchronizes).
double fastest_seconds(Communicator& comm, const std::function<void()>& op, bool collective = false) {
    comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    op();  // warm: first-touch pages, library start-up, a GPU's first launches
    double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int reps = 1000;
    if (collective) {
        comm.all_reduce_scalars(&first, 1, ReduceOp::kMax);
        reps = static_cast<int>(std::clamp(kMeasureSeconds / std::max(first, 1e-9), 3.0, 1000.0));
    }
    double best = 1e30;
    const auto start = std::chrono::steady_clock::now();
    for (int rep = 0; rep < reps; ++rep) {
        t0 = std::chrono::steady_clock::now();
        op();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
        if (!collective && std::chrono::duration<double>(t1 - start).count() > kMeasureSeconds) break;
    }
    comm.barrier();
    return best;
}

/// Least squares y = a x1 + b x2 (no intercept) in relative error (each row divided by its
/// y), so the small messages, whose times are small, count as much as the large ones.
std::pair<double, double> fit_two(const std::vector<double>& x1, const std::vector<double>& x2,
                                  const std::vector<double>& y) {
    double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        const double w = 1 / (y[i] * y[i]);
        s11 += w * x1[i] * x1[i];
        s12 += w * x1[i] * x2[i];
        s22 += w * x2[i] * x2[i];
        s1y += w * x1[i] * y[i];
        s2y += w * x2[i] * y[i];
    }
    const double det = s11 * s22 - s12 * s12;
    if (std::fabs(det) < 1e-300) return {0, 0};
    return {(s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det};
}

/// A rank's product rate R (FLOP/s) and F_half (FLOPs) of the rate model R F / (F + F_half),
/// from square products of a few sizes.
std::pair<double, double> measure_products(Communicator& comm, Backend& be, DType dtype, std::ostream& notes) {
    std::vector<double> flops, seconds;
    be.set_activation_dtype(dtype);
    // A GPU reaches its rate only on larger products than a CPU core.
    const bool device = be.capabilities().device_memory;
    const std::vector<int> sizes = device ? std::vector<int>{256, 512, 1024, 2048, 4096, 8192}
                                          : std::vector<int>{64, 128, 256, 512, 768};
    for (int n : sizes) {
        const size_t elems = static_cast<size_t>(n) * n;
        void* a = be.alloc_bytes(elems * dtype_size(dtype));
        void* w = be.alloc_bytes(elems * dtype_size(dtype));
        void* out = be.alloc_bytes(elems * dtype_size(dtype));
        be.zero_bytes(a, elems * dtype_size(dtype));
        be.zero_bytes(w, elems * dtype_size(dtype));
        const double t = fastest_seconds(comm, [&] {
            be.matmul_forward(ActPtr(out, dtype), ConstActPtr(a, dtype), ConstActPtr(w, dtype), nullptr, n, n, n);
            be.memory().synchronize();
        });
        be.free(a);
        be.free(w);
        be.free(out);
        flops.push_back(2.0 * n * n * n);
        seconds.push_back(t);
        notes << "# product " << dtype_name(dtype) << " " << n << "^3: " << t * 1e3 << " ms, "
              << flops.back() / t / 1e9 << " GFLOP/s per rank\n";
    }
    be.set_activation_dtype(DType::kF32);
    // Robust to a slow repetition on a shared machine: R is the best rate seen, and F_half
    // what makes the smallest product's rate R F / (F + F_half).
    double rate = 0;
    for (size_t i = 0; i < flops.size(); ++i) rate = std::max(rate, flops[i] / seconds[i]);
    const double small_rate = flops.front() / seconds.front();
    return {rate, std::max(1.0, flops.front() * (rate / small_rate - 1))};
}

/// A rank's element-wise bandwidth (bytes/s): a residual add over 64 MiB operands.
double measure_bandwidth(Communicator& comm, Backend& be, std::ostream& notes) {
    const size_t n = 16u << 20;
    float* a = be.alloc_floats(n);
    float* b = be.alloc_floats(n);
    float* out = be.alloc_floats(n);
    be.zero(a, n);
    be.zero(b, n);
    be.zero(out, n);
    const double t = fastest_seconds(comm, [&] {
        be.residual_forward(out, a, b, n);
        be.memory().synchronize();
    });
    be.free(a);
    be.free(b);
    be.free(out);
    notes << "# residual add of 3 x 64 MiB: " << t * 1e3 << " ms, " << 12.0 * n / t / 1e9 << " GB/s per rank\n";
    return 12.0 * n / t;
}

/// All-reduces over every rank of buffers in the backend's memory (a GPU's: NCCL) fitted to
/// the ring's 2(n-1) a + 2(n-1)/n B / b: {a, b}.
std::pair<double, double> measure_all_reduce(Communicator& comm, Backend& be, std::ostream& notes) {
    const double n = comm.size();
    std::vector<double> steps, volume, seconds;
    std::vector<size_t> sizes = {size_t{2}, size_t{1} << 10, size_t{1} << 14, size_t{1} << 18, size_t{1} << 21};
    if (be.capabilities().device_memory) sizes.push_back(size_t{1} << 25);  // NVLink needs 128 MiB
    for (size_t floats : sizes) {
        // Host buffers as the cpu calibration always measured (the shipped file's); a GPU's
        // in device memory.
        std::vector<float> host(be.capabilities().device_memory ? 0 : floats, 1.0f);
        float* buf = host.empty() ? be.alloc_floats(floats) : host.data();
        if (host.empty()) be.zero(buf, floats);
        const double t = fastest_seconds(comm, [&] {
            comm.all_reduce(buf, floats);
            be.memory().synchronize();
        }, true);
        if (host.empty()) be.free(buf);
        notes << "# all-reduce of " << 4 * floats << " B over " << comm.size() << " ranks: " << t * 1e6 << " us\n";
        steps.push_back(2 * (n - 1));
        volume.push_back(2 * (n - 1) / n * 4.0 * static_cast<double>(floats));
        seconds.push_back(t);
    }
    // Every rank's own fit would differ a little: rank 0's is everyone's.
    std::vector<double> fit{0, 0};
    std::tie(fit[0], fit[1]) = fit_two(steps, volume, seconds);
    std::vector<double> agreed = fit;
    comm.all_reduce_scalars(agreed.data(), 2, ReduceOp::kMax);
    const double latency = std::max(1e-7, agreed[0]);
    const double per_byte = std::max(1e-12, agreed[1]);
    return {latency, 1 / per_byte};
}

/// The cluster file's text: what was measured as comments, then the keys.
std::string cluster_text(const ClusterConfig& c, const std::string& what, const std::string& notes) {
    std::ostringstream os;
    os << "# ztrain --calibrate: " << what << "\n"
       << notes << "# the peaks are the data sheet's figures; the rest measured; inter_* are\n"
       << "# not measurable from one node and keep the defaults\n[cluster]\n";
    os << "nodes = " << c.nodes << "\nranks_per_node = " << c.ranks_per_node
       << "\ncores_per_node = " << c.cores_per_node << "\ndevice = " << c.device
       << "\npeak_tflops_fp32 = " << c.peak_tflops_fp32 << "\npeak_tflops_bf16 = " << c.peak_tflops_bf16
       << "\nmemory_gib = " << c.memory_gib << "\nintra_gbps = " << c.intra_gbps
       << "\nintra_latency_us = " << c.intra_latency_us << "\ninter_gbps = " << c.inter_gbps
       << "\ninter_latency_us = " << c.inter_latency_us << "\nmemory_gbps = " << c.memory_gbps
       << "\nproduct_efficiency = " << c.product_efficiency << "\nproduct_half_gflop = " << c.product_half_gflop
       << "\n";
    return os.str();
}

/// The measurements into `c`: the products (fp32 and bf16), the element-wise bandwidth and,
/// over several ranks, the all-reduce. `share`: what a rank's figure is multiplied by to be
/// the cluster file's (a cpu node's ranks share it; a GPU's figure is its own).
void measure_into(ClusterConfig& c, Communicator& comm, Backend& be, bool gpu, int local, std::ostream& notes) {
    const double share = gpu ? 1 : local;
    const auto [fp32_rate, fp32_half] = measure_products(comm, be, DType::kF32, notes);
    c.product_efficiency = std::min(1.0, fp32_rate * share / (c.peak_tflops_fp32 * 1e12));
    c.product_half_gflop = fp32_half / 1e9;
    const auto [bf16_rate, bf16_half] = measure_products(comm, be, DType::kBF16, notes);
    if (gpu) {
        // Tensor cores: the bf16 products are the ones that matter, against the bf16 peak.
        c.product_efficiency = std::min(1.0, bf16_rate / (c.peak_tflops_bf16 * 1e12));
        c.product_half_gflop = bf16_half / 1e9;
    } else {
        // One efficiency serves both dtypes: bf16's peak is stated as what that efficiency of
        // it gives the measured rate (oneDNN's products, or fp32 where the CPU has no bf16).
        c.peak_tflops_bf16 = bf16_rate * local / c.product_efficiency / 1e12;
    }
    c.memory_gbps = measure_bandwidth(comm, be, notes) * share / 1e9;
    if (comm.size() > 1) {
        const auto [latency, bytes_per_s] = measure_all_reduce(comm, be, notes);
        c.intra_latency_us = latency * 1e6;
        c.intra_gbps = bytes_per_s * (gpu ? 1 : std::min(comm.size(), local)) / 1e9;
    } else {
        notes << "# one rank: the collectives were not measured (run under mpirun -np 2 or more)\n";
    }
}

}  // namespace

std::string calibrate_cluster(const Config& cfg, const std::string& path) {
    auto host = make_mpi_communicator(MPI_COMM_WORLD);
    const int local = std::max(1, host->local_size());
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const bool gpu = resolve_backend(setting_text(cfg.backend), nullptr) == "cuda";
    // A GPU's peaks and memory are its data sheet's: the cluster file given (--cluster) says
    // them, and what is measured replaces the rest. A CPU's are this machine kind's.
    ZT_INPUT_CHECK(!gpu || cfg.cluster.device == "gpu", "--calibrate with backend = cuda: cluster.device = ",
                   cfg.cluster.device, ": expected gpu (give --cluster FILE of the GPU's node for its data-sheet peaks)");
    ClusterConfig c = gpu ? cfg.cluster : ClusterConfig{};
    c.nodes = 1;
    c.ranks_per_node = local;
    if (!gpu) c.cores_per_node = cores;
    auto backend = make_backend(gpu ? BackendChoice::kCuda : BackendChoice::kCpu, std::max(1, cores / local),
                                host->local_rank());
    std::unique_ptr<Communicator> device_comm;
    if (gpu) device_comm = make_communicator("cuda", MPI_COMM_WORLD, cuda_stream(*backend), {}, "calibration");
    Communicator& comm = gpu ? *device_comm : *host;
    std::ostringstream notes;
    measure_into(c, comm, *backend, gpu, local, notes);
    const std::string what = str("this machine (", cores, " cores, ", comm.size(), " rank(s), ", local,
                                 " on this node), measured with the ", gpu ? "cuda" : "cpu", " backend");
    const std::string text = cluster_text(c, what, notes.str());
    if (comm.rank() == 0) {
        std::ofstream out(path, std::ios::binary);
        ZT_INPUT_CHECK(out << text, "--cluster-out: cannot write '", path, "'");
    }
    host->barrier();
    return text;
}

}  // namespace zt
