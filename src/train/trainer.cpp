// The training loop.
//
// Per optimizer step on each rank: zero gradients; for each of grad_accum micro-steps,
// read this rank's slice of the global batch, forward (which also seeds dlogits), backward;
// sum gradients across ranks; global-norm clip; AdamW. The loss is normalised by the
// global token count (dloss = 1 / (micro_batch * T * grad_accum * world)), so the sum of
// every rank's gradient is the gradient of the global mean loss, for any world size.
//
// Global sample j of step s is sample g = s * global_batch + j of the run; rank r's
// micro-step a covers j in [(r * grad_accum + a) * micro_batch, ... + micro_batch). One rank
// with N-way accumulation therefore sees exactly the sequences N ranks see.
#include "ztrain/train/trainer.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <map>
#include <thread>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/comm_select.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/model/gpt.hpp"
#include "ztrain/optim/loss_scaler.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/metrics.hpp"

#if ZT_HAVE_CUDA
#include "ztrain/backend/cuda_info.hpp"
#endif

namespace zt {

void check_cuda_training(const Config& cfg) {
    // Which precisions cuda trains in is the backend's answer (cuda_capabilities); init_from
    // writes the master weights through host pointers.
    const BackendCapabilities caps = cuda_capabilities();
    const std::string& dt = cfg.precision.dtype;
    ZT_INPUT_CHECK(caps.supports(parse_dtype(dt, "precision.dtype")), "precision.dtype = ", dt,
                   ": backend = cuda trains in ", caps.work_dtypes(),
                   " only for now (bf16/fp16 are not integrated on the GPU yet), use precision.dtype = fp32 or "
                   "backend = cpu");
    const std::string& rd = cfg.precision.reduce_dtype;
    ZT_INPUT_CHECK(rd.empty() || caps.supports(parse_dtype(rd, "precision.reduce_dtype")),
                   "precision.reduce_dtype = ", rd, ": backend = cuda reduces gradients in ", caps.work_dtypes(),
                   " only for now, leave precision.reduce_dtype empty or fp32, or use backend = cpu");
    ZT_INPUT_CHECK(cfg.model.init_from.empty(), "model.init_from = ", cfg.model.init_from,
                   ": importing weights is not integrated with backend = cuda yet; start from a "
                   "checkpoint or use backend = cpu");
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string format_duration(double s) {
    if (!(s >= 0) || s > 1e8) return "?";
    const long t = static_cast<long>(s + 0.5);
    char buf[32];
    if (t >= 3600) {
        std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    } else if (t >= 60) {
        std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
    } else {
        std::snprintf(buf, sizeof buf, "%lds", t);
    }
    return buf;
}

/// Finds the tokenizer description: data.tokenizer, else tokenizer.json beside the first
/// training shard. Returns null (samples shown as token ids) only when neither is set/found.
std::unique_ptr<Tokenizer> find_tokenizer(const Config& cfg, const std::string& first_train_file) {
    if (!cfg.data.tokenizer.empty()) {
        ZT_INPUT_CHECK(std::filesystem::exists(cfg.data.tokenizer), "data.tokenizer: cannot read '",
                       cfg.data.tokenizer, "'");
        return load_tokenizer(cfg.data.tokenizer);
    }
    const auto beside = std::filesystem::path(first_train_file).parent_path() / "tokenizer.json";
    if (std::filesystem::exists(beside)) return load_tokenizer(beside.string());
    return nullptr;
}

/// Samples `n` tokens after an end-of-text token from the current weights, with
/// temperature 1 and top-k 40, from a counter-based generator keyed by (seed, step).
std::vector<uint32_t> generate(Gpt& model, UnitStore& store, uint32_t start_token, int n,
                               uint64_t seed, long step) {
    const ModelConfig& mc = model.config();
    const int V = mc.vocab_size;
    const int Vp = mc.padded_vocab();
    std::vector<int32_t> ctx{static_cast<int32_t>(start_token)};
    std::vector<uint32_t> out;
    std::vector<std::pair<float, int>> cand(static_cast<size_t>(V));
    std::vector<float> row(static_cast<size_t>(Vp));  // host copy: logits may be device memory
    const int top_k = std::min(40, V);
    for (int i = 0; i < n; ++i) {
        const int T = static_cast<int>(std::min<size_t>(ctx.size(), static_cast<size_t>(mc.seq_len)));
        const int32_t* window = ctx.data() + (ctx.size() - static_cast<size_t>(T));
        model.forward(store, window, nullptr, 1, T, 0.f);
        model.logits_row_to_host(T - 1, row.data());
        for (int v = 0; v < V; ++v) cand[static_cast<size_t>(v)] = {row[static_cast<size_t>(v)], v};
        std::partial_sort(cand.begin(), cand.begin() + top_k, cand.end(),
                          [](const auto& a, const auto& b) { return a.first > b.first; });
        double total = 0.0;
        std::vector<double> p(static_cast<size_t>(top_k));
        for (int k = 0; k < top_k; ++k) {
            p[static_cast<size_t>(k)] = std::exp(static_cast<double>(cand[static_cast<size_t>(k)].first - cand[0].first));
            total += p[static_cast<size_t>(k)];
        }
        double u = total * random_uniform(seed, static_cast<uint64_t>(RandomStream::kSample),
                                          static_cast<uint64_t>(step) * 1000003ull + static_cast<uint64_t>(i));
        int pick = top_k - 1;
        for (int k = 0; k < top_k; ++k) {
            u -= p[static_cast<size_t>(k)];
            if (u <= 0) {
                pick = k;
                break;
            }
        }
        const int token = cand[static_cast<size_t>(pick)].second;
        ctx.push_back(token);
        out.push_back(static_cast<uint32_t>(token));
    }
    return out;
}

/// Wall seconds of one optimizer step's phases. opt covers the overflow check, grad norm,
/// clipping, AdamW and re-assembling parameters (ZeRO all-gathers included); comm is the
/// time spent waiting for gradient reductions after backward (plus the loss all-reduce).
struct PhaseTimes {
    double zero = 0.0;
    double fwd = 0.0;
    double bwd = 0.0;
    double comm = 0.0;
    double opt = 0.0;
};

std::string printable(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') {
            out += "\n    ";
        } else if (static_cast<unsigned char>(c) < 32 && c != '\t') {
            out += '?';
        } else {
            out += c;
        }
    }
    return out;
}

/// The start-up table: bytes per buffer kind on this rank next to the ZeRO formula each
/// should follow (fp32: no separate master copy), so a user sees what sharding bought.
void print_memory_table(const StateBytes& sb, size_t activation_bytes, int stage, int world, size_t n_params,
                        DType work) {
    const bool f32 = work == DType::kF32;
    // Bytes per parameter of each kind: w = working dtype size; master 4 (16-bit only); Adam 8.
    const char* kParams[4] = {f32 ? "4P" : "2P", f32 ? "4P" : "2P", f32 ? "4P" : "2P", f32 ? "4P/N" : "2P/N"};
    const char* kGrads[4] = {f32 ? "4P" : "2P", f32 ? "4P" : "2P", f32 ? "4P/N" : "2P/N", f32 ? "4P/N" : "2P/N"};
    const char* kMaster[4] = {f32 ? "0" : "4P", f32 ? "0" : "4P/N", f32 ? "0" : "4P/N", f32 ? "0" : "4P/N"};
    static const char* const kOptim[4] = {"8P", "8P/N", "8P/N", "8P/N"};
    const char* kTotal[4] = {"16P", f32 ? "8P + 8P/N" : "4P + 12P/N", f32 ? "4P + 12P/N" : "2P + 14P/N", "16P/N"};
    const double mib = 1048576.0;
    std::printf("ztrain: memory per rank, ZeRO stage %d, N = %d, P = %zu parameters (%s)\n", stage, world, n_params,
                dtype_name(work));
    std::printf("  %-12s %10s   %s\n", "buffer", "MiB", "formula");
    std::printf("  %-12s %10.2f   %s\n", "params", sb.params / mib, kParams[stage]);
    std::printf("  %-12s %10.2f   %s\n", "grads", sb.grads / mib, kGrads[stage]);
    std::printf("  %-12s %10.2f   %s\n", "master", sb.master / mib, kMaster[stage]);
    std::printf("  %-12s %10.2f   %s\n", "optimizer", sb.optimizer / mib, kOptim[stage]);
    std::printf("  %-12s %10.2f   %s = %.2f MiB\n", "model state", sb.model_state() / mib, kTotal[stage],
                [&] {
                    const double P = static_cast<double>(n_params);
                    const double N = world;
                    const double w = static_cast<double>(dtype_size(work));
                    const double m = f32 ? 0.0 : 4.0;
                    // params, grads, master, Adam per stage: sharded kinds divide by N.
                    const double f[4] = {P * (2 * w + m + 8), P * (2 * w + (m + 8) / N),
                                         P * (w + (w + m + 8) / N), P * (2 * w + m + 8) / N};
                    return f[stage] / mib;
                }());
    std::printf("  %-12s %10.2f\n", "activations", activation_bytes / mib);
    std::printf("  %-12s %10.2f   %s\n", "scratch", sb.scratch / mib, "gathered units, gradient scratch (peak)");
}

/// Turns SIGTERM, SIGINT and SIGUSR1 into a flag read at step boundaries (Slurm sends one
/// of them before preempting or at the time limit). The previous handlers come back when the
/// training loop ends.
volatile std::sig_atomic_t g_stop_signal = 0;

/// A second SIGINT (Ctrl-C while the first one is pending, e.g. during a hung start-up) takes
/// the default action, so an interactive run can always be killed. SIGTERM and SIGUSR1 (the
/// batch system's warnings) only ever set the flag.
extern "C" void on_stop_signal(int sig) {
    if (sig == SIGINT && g_stop_signal == SIGINT) {
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
        return;
    }
    g_stop_signal = sig;
}

class StopSignals {
  public:
    StopSignals() {
        g_stop_signal = 0;
        for (int i = 0; i < 3; ++i) m_previous[i] = std::signal(kSignals[i], on_stop_signal);
    }
    ~StopSignals() {
        for (int i = 0; i < 3; ++i) std::signal(kSignals[i], m_previous[i]);
    }
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    double pending() const { return static_cast<double>(g_stop_signal); }

  private:
    static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};
    void (*m_previous[3])(int);
};

/// Aborts the job when this rank has waited in one collective longer than timeout_s: a rank
/// that died or hangs would otherwise keep every other rank waiting forever. Exiting with
/// status 1 makes mpirun/srun take the remaining ranks down.
class CollectiveWatchdog {
  public:
    CollectiveWatchdog(const Communicator& comm, double timeout_s, const std::atomic<long>& step)
        : m_comm(comm), m_timeout_s(timeout_s), m_step(step) {
        if (timeout_s > 0 && comm.size() > 1) m_thread = std::thread([this] { run(); });
    }
    ~CollectiveWatchdog() {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stop = true;
        }
        m_cv.notify_all();
        if (m_thread.joinable()) m_thread.join();
    }
    CollectiveWatchdog(const CollectiveWatchdog&) = delete;
    CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  private:
    void run() {
        const auto poll = std::chrono::milliseconds(static_cast<long>(std::min(1.0, m_timeout_s / 4) * 1000) + 1);
        std::unique_lock<std::mutex> lock(m_mutex);
        while (!m_cv.wait_for(lock, poll, [this] { return m_stop; })) {
            const char* name = m_comm.pending_collective();
            if (name == nullptr) continue;
            const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
            const double waited = static_cast<double>(now - m_comm.pending_since_ns()) * 1e-9;
            if (waited < m_timeout_s || m_comm.pending_collective() == nullptr) continue;
            std::fprintf(stderr,
                         "ztrain: rank %d: collective %s has waited %.0f s in step %ld (parallel.timeout_s = %g): "
                         "another rank is stuck or has died; aborting the job\n",
                         m_comm.rank(), name, waited, m_step.load() + 1, m_timeout_s);
            std::fflush(stderr);
            std::fflush(stdout);
            std::_Exit(kExitFailure);
        }
    }
    const Communicator& m_comm;
    double m_timeout_s;
    const std::atomic<long>& m_step;
    std::thread m_thread;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    bool m_stop = false;
};

/// Test hook for the watchdog: ZT_DEBUG_STALL="RANK:STEP:SECONDS" makes that rank sleep
/// before the gradient reduction of that (1-based) step, as a hung rank would.
void maybe_stall(int rank, long step) {
    const char* spec = std::getenv("ZT_DEBUG_STALL");
    if (spec == nullptr) return;
    int r = -1;
    long s = -1;
    double seconds = 0;
    if (std::sscanf(spec, "%d:%ld:%lf", &r, &s, &seconds) == 3 && r == rank && s == step) {
        std::fprintf(stderr, "ztrain: rank %d: ZT_DEBUG_STALL: sleeping %.0f s in step %ld\n", rank, seconds, step);
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    }
}

/// The compute backend `kind` ("cpu" or "cuda", from resolve_backend); a GPU run uses the
/// device of this rank's local rank, the same one make_communicator picks.
std::unique_ptr<Backend> make_backend(const std::string& kind, int threads, int local_rank) {
#if ZT_HAVE_CUDA
    if (kind == "cuda") return make_cuda_backend(local_device(local_rank, cuda_device_count()));
#else
    (void)local_rank;
#endif
    ZT_REQUIRE(kind == "cpu", "backend '", kind, "' is not available in this build");
    return make_cpu_backend(threads);
}

}  // namespace

TrainSummary train(const Config& cfg, const TrainOptions& options) {
    // SIGTERM/SIGINT/SIGUSR1 -> checkpoint at the next step boundary. Installed first, so a
    // signal during start-up (data, checkpoint load) is not the default action (death) but a
    // stop after the first step.
    const StopSignals signals;
    validate(cfg);
    auto comm_owner = make_mpi_communicator(options.comm);
    Communicator& comm = *comm_owner;
    const int rank = comm.rank();
    const int world = comm.size();
    // backend = cpu | cuda | auto: a cuda that cannot run here is bad input, before any work.
    std::string backend_note;
    const std::string backend_kind = resolve_backend(cfg.backend, &backend_note);
    if (backend_kind == "cuda") check_cuda_training(cfg);
    if (rank == 0 && !backend_note.empty()) std::printf("ztrain: %s\n", backend_note.c_str());
    const bool root = rank == 0;
    const ModelConfig& mc = cfg.model;
    const TrainConfig& tc = cfg.train;
    const int T = mc.seq_len;
    const int B = tc.micro_batch;

    // ---- data (all validation before any work) ----
    TokenDataset train_data(cfg.data.train, "data.train", mc.vocab_size, T);
    std::unique_ptr<TokenDataset> val_data;
    if (!cfg.data.val.empty()) val_data = std::make_unique<TokenDataset>(cfg.data.val, "data.val", mc.vocab_size, T);
    std::unique_ptr<Tokenizer> tokenizer = find_tokenizer(cfg, train_data.files().front());
    if (tokenizer) {
        ZT_INPUT_CHECK(tokenizer->vocab_size() <= mc.vocab_size, "model.vocab_size = ", mc.vocab_size,
                       " is smaller than the tokenizer's vocabulary (", tokenizer->vocab_size(), " tokens)");
    }
    BatchSampler train_sampler(train_data, tc.seed, true);
    std::unique_ptr<BatchSampler> val_sampler;
    if (val_data) val_sampler = std::make_unique<BatchSampler>(*val_data, tc.seed, false);

    // Nothing is written to run.dir until every input (data, checkpoint, init_from) has been
    // checked: a rejected run leaves an existing run directory exactly as it was.
    const std::filesystem::path run_dir(cfg.run.dir);
    const std::string ckpt_dir = cfg.checkpoint.dir.empty() ? (run_dir / "checkpoints").string() : cfg.checkpoint.dir;
    std::string resume_note;
    std::string resume_dir = resolve_resume(cfg.checkpoint.resume, ckpt_dir, &resume_note);
    if (root && !resume_note.empty()) std::printf("ztrain: note: %s\n", resume_note.c_str());

    // ---- model ----
    // Ranks on one node share its cores unless told otherwise.
    int threads = tc.threads;
    if (threads <= 0) {
        threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / comm.local_size());
    }
    const DType work = parse_dtype(cfg.precision.dtype, "precision.dtype");
    const DType reduce =
        cfg.precision.reduce_dtype.empty() ? work : parse_dtype(cfg.precision.reduce_dtype, "precision.reduce_dtype");
    // ZT_PROFILE_OPS=1 wraps the backend in a ProfilingBackend (per-op times in ops_ms).
    std::unique_ptr<Backend> backend = profile_ops_from_env(make_backend(backend_kind, threads, comm.local_rank()));
    auto* op_profile = dynamic_cast<ProfilingBackend*>(backend.get());
    // On a GPU the model state's collectives run on device buffers: NCCL, or host staging
    // where ranks share a GPU. `comm` (MPI) keeps the host-side traffic (scalars, checkpoints).
    // Declared after the backend, so it is destroyed before the stream it uses.
    std::unique_ptr<Communicator> device_comm;
    if (backend_kind == "cuda") device_comm = make_communicator("cuda", options.comm, cuda_stream(*backend));
    Communicator& state_comm = device_comm ? *device_comm : comm;
    Gpt model(mc, *backend, B, tc.recompute);
    model.set_activation_dtype(work);
    const size_t bucket_numel = std::max<size_t>(
        1, static_cast<size_t>(cfg.parallel.bucket_mb * 1048576.0 / static_cast<double>(dtype_size(reduce))));
    ModelState state(model.layout(), *backend, state_comm, cfg.parallel.zero_stage, bucket_numel, tc.seed, work,
                     reduce);
    // Loss scaling exists for fp16's narrow exponent range; bf16 and fp32 run unscaled but
    // still check every step's gradients for non-finite values.
    const bool fp16 = work == DType::kF16;
    LossScalerConfig scfg;
    scfg.dynamic = fp16 && cfg.precision.loss_scale == "dynamic";
    scfg.init_scale = !fp16 ? 1.0 : scfg.dynamic ? cfg.precision.init_scale : std::stod(cfg.precision.loss_scale);
    scfg.growth_interval = cfg.precision.growth_interval;
    scfg.hysteresis = cfg.precision.hysteresis;
    scfg.min_scale = std::min(cfg.precision.min_scale, scfg.init_scale);
    LossScaler scaler(scfg);
    const std::string loss_scale_mode = !fp16 ? "none" : scfg.dynamic ? "dynamic" : "static";

    // ---- initial weights from a file (a resumed checkpoint has its own) ----
    if (!cfg.model.init_from.empty() && resume_dir.empty()) {
        import_weights(cfg.model.init_from, model.layout(), mc, state, &comm);
        if (root) std::printf("ztrain: initialized weights from %s\n", cfg.model.init_from.c_str());
    } else if (!cfg.model.init_from.empty() && root) {
        std::printf("ztrain: model.init_from ignored: resuming from a checkpoint of this run\n");
    }

    // ---- resume ----
    TrainProgress progress;
    if (!resume_dir.empty()) {
        // resume=auto falls back to older complete checkpoints when the newest is damaged;
        // an explicit PATH is loaded or refused.
        std::vector<std::string> candidates{resume_dir};
        if (cfg.checkpoint.resume == "auto") {
            for (const std::string& d : list_checkpoints(ckpt_dir)) {
                if (std::filesystem::path(d) != std::filesystem::path(resume_dir)) candidates.push_back(d);
            }
        }
        for (size_t i = 0; i < candidates.size(); ++i) {
            try {
                progress = load_checkpoint(candidates[i], state, comm);
                resume_dir = candidates[i];
                break;
            } catch (const InputError& e) {
                if (i + 1 == candidates.size()) throw;
                if (root) {
                    std::fprintf(stderr, "ztrain: warning: checkpoint %s rejected: %s; falling back to %s\n",
                                 candidates[i].c_str(), e.what(), candidates[i + 1].c_str());
                }
            }
        }
        // The data order and sampling are functions of (seed, step): another seed would silently
        // continue a different run, so it is refused (every rank read the same meta: all throw).
        if (progress.seed_known && progress.seed != tc.seed) {
            throw InputError(str(resume_dir, ": train.seed = ", tc.seed, " differs from the checkpoint's train.seed = ",
                                 progress.seed, " (the data order depends on it): resume with --train.seed=",
                                 progress.seed, ", or start over with checkpoint.resume=never"));
        }
        // The scaler state continues only where it means the same thing: an fp16 checkpoint of
        // this dynamic mode. A static scale is the deck's; a bf16/fp32 checkpoint saved scale 1.
        const bool same_scaler = progress.dtype == "fp16" && progress.loss_scale_mode == loss_scale_mode;
        if (fp16 && scfg.dynamic && same_scaler) {
            scaler.restore(progress.loss_scale, progress.scaler_clean_steps, progress.scaler_hysteresis_left);
        } else if (fp16 && root && !(same_scaler && progress.loss_scale == scfg.init_scale)) {
            std::printf("ztrain: the checkpoint was written in %s%s: the fp16 loss scale %s %g (%s)\n",
                        progress.dtype.c_str(),
                        progress.dtype == "fp16" ? str(" with a ", progress.loss_scale_mode, " loss scale ",
                                                       progress.loss_scale).c_str() : "",
                        scfg.dynamic ? "starts at" : "is", scfg.init_scale,
                        scfg.dynamic ? "precision.init_scale" : "precision.loss_scale");
        }
        if (root) {
            std::printf("ztrain: resumed from %s at step %ld (%llu samples seen)\n", resume_dir.c_str(), progress.step,
                        static_cast<unsigned long long>(progress.samples_seen));
            if (progress.step >= tc.max_steps) {
                std::printf("ztrain: the checkpoint already reaches train.max_steps = %d: nothing to train "
                            "(raise train.max_steps, or --checkpoint.resume=never to start over)\n", tc.max_steps);
            }
        }
    }
    // ---- run directory: inputs are accepted, now it may change ----
    {
        std::error_code ec;
        std::filesystem::create_directories(run_dir, ec);  // every rank: all see the same outcome
        if (ec) throw InputError(str("run.dir: cannot create '", cfg.run.dir, "': ", ec.message()));
    }
    if (root) std::ofstream(run_dir / "config.ini") << to_ini(cfg);
    // A resumed run appends to the metrics of the run it continues.
    MetricsLog metrics(root ? (run_dir / "metrics.jsonl").string() : std::string(), !resume_dir.empty());

    const StateBytes sb = state.bytes();
    size_t n_params = 0;  // real parameters (the manifest), not alignment gaps
    for (const ParamSpec& p : model.layout().params) n_params += p.numel;
    if (root) {
        nlohmann::ordered_json mem;
        mem["event"] = "memory";
        mem["params"] = sb.params;
        mem["grads"] = sb.grads;
        mem["master"] = sb.master;
        mem["optimizer"] = sb.optimizer;
        mem["activations"] = model.activation_bytes();
        mem["scratch"] = sb.scratch;
        mem["model_state"] = sb.model_state();
        mem["world_size"] = world;
        mem["zero_stage"] = cfg.parallel.zero_stage;
        mem["dtype"] = cfg.precision.dtype;
        mem["num_params"] = n_params;
        metrics.write(mem);
        std::printf("ztrain: %d layers, %d heads, %d wide, seq %d, vocab %d (padded %d): %.2fM parameters\n",
                    mc.n_layer, mc.n_head, mc.n_embd, T, mc.vocab_size, mc.padded_vocab(),
                    static_cast<double>(n_params) / 1e6);
        std::printf("ztrain: %d rank(s) x %d thread(s), global batch %d x %d tokens, %zu train windows%s\n",
                    world, backend->threads(), B * tc.grad_accum * world, T, train_data.num_windows(),
                    val_data ? str(", ", val_data->num_windows(), " val windows").c_str() : "");
        print_memory_table(sb, model.activation_bytes(), cfg.parallel.zero_stage, world, n_params, work);
        if (work != DType::kF32 || reduce != work) {
            std::printf("ztrain: precision: %s working copy, fp32 master and AdamW state, gradients reduced in %s%s\n",
                        dtype_name(work), dtype_name(reduce),
                        fp16 ? (scfg.dynamic ? str(", dynamic loss scale from ", scaler.scale()).c_str()
                                             : str(", static loss scale ", scaler.scale()).c_str())
                             : "");
        }
        std::fflush(stdout);
    }

    std::vector<int32_t> inputs(static_cast<size_t>(B) * static_cast<size_t>(T));
    std::vector<int32_t> targets(inputs.size());
    const long global_batch = static_cast<long>(B) * tc.grad_accum * world;
    TrainSummary summary;

    auto evaluate = [&](long step) {
        if (!val_sampler) return;
        // Validation covers the same leading windows every time (no shuffle), split over ranks.
        const long per_rank = static_cast<long>(tc.eval_batches) * B;
        double sum = 0.0;
        for (int e = 0; e < tc.eval_batches; ++e) {
            const uint64_t first = static_cast<uint64_t>(rank * per_rank + e * B);
            val_sampler->fill(first, B, inputs.data(), targets.data());
            sum += model.forward(state, inputs.data(), targets.data(), B, T, 0.f);
        }
        comm.all_reduce_scalars(&sum, 1);
        const double val_loss = sum / (static_cast<double>(tc.eval_batches) * world);
        summary.val_losses.push_back(val_loss);
        if (root) {
            nlohmann::ordered_json rec;
            rec["step"] = step;
            rec["val_loss"] = val_loss;
            metrics.write(rec);
            std::printf("step %ld | val loss %.4f\n", step, val_loss);
        }
        if (tc.sample_tokens > 0) {
            // Every rank generates (the same tokens, from the same counter-based draws): with
            // sharded parameters each forward is collective. Only rank 0 prints.
            const uint32_t start = tokenizer ? tokenizer->eot() : 0;
            std::vector<uint32_t> toks = generate(model, state, start, tc.sample_tokens, tc.seed, step);
            std::string text;
            if (tokenizer) {
                text = tokenizer->decode(toks);
            } else {
                for (uint32_t t : toks) text += str(t, " ");
            }
            summary.last_sample = text;
            if (root) std::printf("sample at step %ld:\n    %s\n", step, printable(text).c_str());
        }
        std::fflush(stdout);
    };

    const auto run_start = Clock::now();
    double train_seconds = 0.0;
    long applied_steps = progress.applied_steps;  // optimizer/LR-schedule steps taken (skips excluded)
    int bad_steps = progress.bad_steps;           // consecutive skipped steps
    uint64_t samples_seen = progress.samples_seen;
    uint64_t tokens_seen = progress.tokens_seen;
    std::atomic<long> current_step{progress.step};
    const CollectiveWatchdog watchdog(comm, cfg.parallel.timeout_s, current_step);
    auto save = [&](long step_done) {
        TrainProgress p;
        p.step = step_done;
        p.applied_steps = applied_steps;
        p.samples_seen = samples_seen;
        p.tokens_seen = tokens_seen;
        p.loss_scale = scaler.scale();
        p.loss_scale_mode = loss_scale_mode;
        p.scaler_clean_steps = scaler.clean_steps();
        p.scaler_hysteresis_left = scaler.hysteresis_left();
        p.bad_steps = bad_steps;
        const auto t_save = Clock::now();
        try {
            const std::string dir = save_checkpoint(ckpt_dir, state, comm, p, to_ini(cfg), cfg.precision.dtype,
                                                    tc.seed, cfg.checkpoint.keep);
            if (root) {
                std::printf("ztrain: checkpoint %s written in %.2f s\n", dir.c_str(), seconds_since(t_save));
                std::fflush(stdout);
            }
        } catch (const Error& e) {
            // Every rank sees the same error (the save agrees on failures). `latest` still
            // names a complete checkpoint; the half-written directory goes.
            if (root) {
                std::error_code ec;
                std::filesystem::remove_all(std::filesystem::path(ckpt_dir) / (checkpoint_dir_name(step_done) + ".partial"), ec);
            }
            if (cfg.checkpoint.on_error != "continue") {
                throw Error(str("checkpoint at step ", step_done, " failed: ", e.what(),
                                " (latest still names a complete checkpoint; checkpoint.on_error = continue trains "
                                "on)"));
            }
            if (root) {
                std::fprintf(stderr, "ztrain: warning: checkpoint at step %ld failed: %s; training continues "
                             "(checkpoint.on_error = continue); latest still names a complete checkpoint\n",
                             step_done, e.what());
            }
        }
    };
    // A fresh run evaluates once before training, so the curve starts at the untrained loss.
    if (progress.step == 0 && tc.eval_every > 0 && progress.step < tc.max_steps) evaluate(0);
    for (long step = progress.step; step < tc.max_steps; ++step) {
        current_step = step;
        const auto t0 = Clock::now();
        comm.reset_stats();
        if (device_comm) device_comm->reset_stats();
        // Per-phase wall times of this step (metrics fields *_ms): where a step's time goes.
        PhaseTimes ph;
        if (op_profile != nullptr) op_profile->reset();
        state.zero_grads();
        ph.zero = seconds_since(t0);
        const double scale = scaler.scale();
        // The loss is scaled through dloss: every gradient comes out multiplied by `scale`.
        const float dloss_step = static_cast<float>(scale / (static_cast<double>(global_batch) * T));
        double loss_sum = 0.0;
        for (int a = 0; a < tc.grad_accum; ++a) {
            const uint64_t first =
                samples_seen + static_cast<uint64_t>((static_cast<long>(rank) * tc.grad_accum + a) * B);
            train_sampler.fill(first, B, inputs.data(), targets.data());
            state.begin_micro_step(a == 0, a == tc.grad_accum - 1);
            auto tp = Clock::now();
            loss_sum += model.forward(state, inputs.data(), targets.data(), B, T, dloss_step);
            ph.fwd += seconds_since(tp);
            tp = Clock::now();
            model.backward(state);
            ph.bwd += seconds_since(tp);
        }
        maybe_stall(rank, step + 1);
        auto tc0 = Clock::now();
        state.finish_grad_sync();
        ph.comm = seconds_since(tc0);
        if (options.after_grad_sync) options.after_grad_sync(step + 1, state);
        double loss = loss_sum / tc.grad_accum;
        tc0 = Clock::now();
        comm.all_reduce_scalars(&loss, 1);
        ph.comm += seconds_since(tc0);
        loss /= world;
        const auto t_opt = Clock::now();
        // Every rank checks its own gradients; the flag is agreed (MAX) so all skip together.
        const double sum_sq = state.grad_sum_squares_if_finite();
        const bool non_finite = std::isnan(sum_sq);
        const double grad_norm = std::sqrt(sum_sq) / scale;
        bool skipped = non_finite;
        // A run that cannot go on stops after this step's record is written. Every input to
        // the decision is agreed across ranks (the flag above, the scaler's state), so every
        // rank throws together and the job ends through MPI_Finalize, not MPI_Abort.
        std::string stop_error;
        if (fp16) {
            const LossScaler::Outcome outcome = scaler.update(non_finite);
            if (outcome == LossScaler::Outcome::kStuckAtMinimum) {
                stop_error = str("step ", step + 1, ": fp16 gradients overflow even at the minimum loss scale ",
                                 scaler.scale(), " (precision.min_scale); the run cannot continue in fp16: try bf16, "
                                 "a lower train.lr, or a lower precision.min_scale");
            }
            skipped = outcome != LossScaler::Outcome::kApplied;
        }
        const double lr = learning_rate(tc, applied_steps);
        if (skipped) {
            ++bad_steps;
            if (root) {
                std::printf("step %5ld/%d | non-finite gradients: step skipped%s\n", step + 1, tc.max_steps,
                            fp16 ? str(", loss scale ", scale, " -> ", scaler.scale()).c_str() : "");
            }
            // A dynamic fp16 scale stops at its floor (above); a fixed scale cannot change, so
            // it is bounded by train.max_bad_steps like bf16 and fp32.
            if (fp16 && !scfg.dynamic && bad_steps >= tc.max_bad_steps) {
                stop_error = str("step ", step + 1, ": ", bad_steps, " consecutive steps with fp16 gradient overflow "
                                 "at the static loss scale precision.loss_scale = ", cfg.precision.loss_scale,
                                 " (train.max_bad_steps = ", tc.max_bad_steps, "): expected a scale the gradients "
                                 "fit in fp16 at; lower precision.loss_scale or set it to dynamic");
            }
            if (!fp16 && bad_steps >= tc.max_bad_steps) {
                stop_error = str("step ", step + 1, ": ", bad_steps, " consecutive steps with non-finite gradients "
                                 "(train.max_bad_steps = ", tc.max_bad_steps, "); last loss ", loss,
                                 ". The run is diverging: lower train.lr or check the data");
            }
        } else {
            bad_steps = 0;
            // Unscaling and clipping share one multiplier, applied as AdamW reads the gradient.
            AdamWStep sp = adamw_step_params(tc, lr, applied_steps + 1);
            sp.grad_scale = static_cast<float>(clip_multiplier(grad_norm, tc.grad_clip) / scale);
            state.optimizer_step(sp);
            ++applied_steps;
        }
        ph.opt = seconds_since(t_opt);
        if (options.after_step) options.after_step(step + 1, state, skipped);
        const double step_s = seconds_since(t0);
        if (step > 0 || tc.max_steps == 1) train_seconds += step_s;  // step 0 warms caches
        const long done = step + 1;
        samples_seen += static_cast<uint64_t>(global_batch);
        tokens_seen += static_cast<uint64_t>(global_batch) * static_cast<uint64_t>(T);
        const double tokens = static_cast<double>(tokens_seen);
        const double tok_per_s = static_cast<double>(global_batch) * T / step_s;
        summary.losses.push_back(loss);
        summary.loss_scales.push_back(scale);
        summary.skipped.push_back(skipped);
        summary.grad_norms.push_back(grad_norm);
        summary.steps = static_cast<int>(done);
        if (root) {
            nlohmann::ordered_json rec;
            rec["step"] = done;
            rec["loss"] = loss;
            rec["lr"] = lr;
            rec["grad_norm"] = std::isfinite(grad_norm) ? nlohmann::ordered_json(grad_norm) : nlohmann::ordered_json();
            rec["tokens"] = static_cast<long long>(tokens);
            rec["tokens_per_s"] = tok_per_s;
            rec["step_ms"] = step_s * 1e3;
            rec["loss_scale"] = scale;
            rec["skipped"] = skipped;
            nlohmann::ordered_json cb = nlohmann::ordered_json::object();
            // On a GPU the model state's collectives go through device_comm: count both.
            std::map<CollectiveKind, uint64_t> sent;
            for (const Communicator* c : {&comm, device_comm.get()}) {
                if (c == nullptr) continue;
                for (const auto& [kind, entry] : c->stats().by_kind) sent[kind] += entry.bytes;
            }
            for (const auto& [kind, bytes] : sent) cb[collective_name(kind)] = bytes;
            rec["comm_bytes"] = cb;
            rec["zero_ms"] = ph.zero * 1e3;
            rec["fwd_ms"] = ph.fwd * 1e3;
            rec["bwd_ms"] = ph.bwd * 1e3;
            rec["comm_ms"] = ph.comm * 1e3;
            rec["opt_ms"] = ph.opt * 1e3;
            if (op_profile != nullptr) {
                nlohmann::ordered_json ops = nlohmann::ordered_json::object();
                for (int k = 0; k < ProfilingBackend::kNumOps; ++k) ops[ProfilingBackend::op_name(k)] = op_profile->op_ms(k);
                rec["ops_ms"] = ops;
            }
            metrics.write(rec);
            if (done % tc.log_every == 0 || done == tc.max_steps || done == 1) {
                const double avg = done > 1 ? train_seconds / static_cast<double>(done - 1) : step_s;
                std::printf("step %5ld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.0f ms | ETA %s\n",
                            done, tc.max_steps, loss, lr, grad_norm, tok_per_s, step_s * 1e3,
                            format_duration(avg * static_cast<double>(tc.max_steps - done)).c_str());
                std::fflush(stdout);
            }
        }
        if (!stop_error.empty()) throw AgreedError(stop_error);
        if ((tc.eval_every > 0 && done % tc.eval_every == 0) || done == tc.max_steps) evaluate(done);
        // Ranks agree on a pending stop signal at the step boundary, so all save together.
        double stop = signals.pending();
        comm.all_reduce_scalars(&stop, 1, ReduceOp::kMax);
        const bool periodic = cfg.checkpoint.every > 0 && done % cfg.checkpoint.every == 0;
        if (stop > 0 || periodic || done == tc.max_steps) save(done);
        if (stop > 0) {
            if (root) {
                std::printf("ztrain: stopped by signal %d after step %ld; resume with checkpoint.resume=auto\n",
                            static_cast<int>(stop), done);
            }
            summary.stopped_by_signal = true;
            break;
        }
    }
    if (root) {
        std::printf("ztrain: %d steps in %s\n", summary.steps, format_duration(seconds_since(run_start)).c_str());
    }
    if (options.collect_params) {
        for (int u = 0; u < model.layout().num_units(); ++u) {
            std::vector<float> unit(model.layout().unit_numel[static_cast<size_t>(u)]);
            state.gather_unit_params(u, unit.data());
            summary.final_params.insert(summary.final_params.end(), unit.begin(), unit.end());
        }
    }
    return summary;
}

}  // namespace zt
