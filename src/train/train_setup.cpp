#include "ztrain/train/train_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/backend_cuda/cuda_backend.hpp"
#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/comm/comm_select.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/threads.hpp"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/data/tokenizer.hpp"
#include "ztrain/train/example_feed.hpp"

namespace zt {

void check_cuda_training(const Config& cfg) {
    // Which precisions cuda trains in is the backend's answer (cuda_capabilities). Imported
    // weights (model.init_from, model.from_hf) reach the state through StateShards::write,
    // which copies to the device.
    const BackendCapabilities caps = cuda_capabilities();
    const DType dt = cfg.precision.dtype;
    ZT_INPUT_CHECK(caps.supports(dt), "precision.dtype = ", dtype_name(dt), ": backend = cuda trains in ",
                   caps.work_dtypes(), " only, use one of those or backend = cpu");
    const std::optional<DType>& rd = cfg.precision.reduce_dtype;
    ZT_INPUT_CHECK(!rd || caps.supports(*rd), "precision.reduce_dtype = ", rd ? dtype_name(*rd) : "",
                   ": backend = cuda reduces gradients in ", caps.work_dtypes(),
                   " only, leave precision.reduce_dtype empty or use one of those, or use backend = cpu");
    ZT_INPUT_CHECK(stored_dtype(cfg) == dt, "lora.base_dtype = ", dtype_name(stored_dtype(cfg)),
                   ": backend = cuda stores the weights in precision.dtype (", dtype_name(dt),
                   ") only; leave lora.base_dtype empty or use backend = cpu");
}

namespace {

/// A path the file system refuses outright (a symlink loop, a component over NAME_MAX, a
/// file where a directory must be) is bad input naming the key, found before any work; a
/// path that does not exist yet is fine (run.dir and checkpoint.dir are created). Later
/// std::filesystem calls on it then cannot throw filesystem_error (exit 1, no key named).
void require_usable_path(const char* key, const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    (void)std::filesystem::status(path, ec);  // only the error matters
    ZT_INPUT_CHECK(!ec || ec == std::errc::no_such_file_or_directory, key, " = ", path, ": ", ec.message());
}

/// Finds the tokenizer description: data.tokenizer, else tokenizer.json beside the first
/// training shard. Returns null (samples shown as token ids) only when neither is set/found.
/// `*file` names the file loaded.
std::unique_ptr<Tokenizer> find_tokenizer(const Config& cfg, const std::string& first_train_file, std::string* file) {
    if (!cfg.data.tokenizer.empty()) {
        ZT_INPUT_CHECK(std::filesystem::exists(cfg.data.tokenizer), "data.tokenizer: cannot read '",
                       cfg.data.tokenizer, "'");
        *file = cfg.data.tokenizer;
        return load_tokenizer(cfg.data.tokenizer);
    }
    const auto beside = std::filesystem::path(first_train_file).parent_path() / "tokenizer.json";
    if (!std::filesystem::exists(beside)) return nullptr;
    *file = beside.string();
    return load_tokenizer(beside.string());
}

/// The compute backend `kind` (cpu or cuda, as resolved); a GPU run uses the device of this
/// rank's local rank, the same one make_communicator picks.
/// eval.tasks, each read and tokenized on every rank (a bad file fails every rank alike).
std::vector<ChoiceTask> read_eval_tasks(const Config& cfg, const Tokenizer* tokenizer) {
    if (cfg.eval.tasks.empty()) return {};
    ZT_INPUT_CHECK(tokenizer != nullptr, "eval.tasks = ", cfg.eval.tasks,
                   ": needs a tokenizer (data.tokenizer, or tokenizer.json beside the training shards)");
    return read_choice_tasks(cfg.eval.tasks, *tokenizer);
}

/// The corpora of `key` (data.train or data.val, set): one file or glob, or a weighted
/// blend, whose corpora must be pretraining shards; rank 0 prints the weights' normalisation.
std::unique_ptr<TokenCorpora> read_corpora(const std::string& text, const char* key, const ModelConfig& mc,
                                           bool root) {
    const CorpusList list = parse_corpus_list(text, key);
    for (const CorpusSpec& c : list.corpora) {
        ZT_INPUT_CHECK(!list.weighted || !is_example_shard(c.pattern, key), key, ": corpus '", c.pattern,
                       "' holds example shards (zt-prepare --format jsonl): blends are of pretraining shards; "
                       "fine-tune on one example corpus without weights");
    }
    if (root && !list.note.empty()) std::printf("ztrain: note: %s\n", list.note.c_str());
    return std::make_unique<TokenCorpora>(list, key, mc.vocab_size, mc.seq_len);
}

/// data.train and data.val as pretraining corpora, with their samplers: the blend's order
/// for training, each validation corpus's leading windows for evaluation.
void read_pretraining_data(const Config& cfg, TrainSetup& s) {
    const bool root = s.comm->rank() == 0;
    s.train_data = read_corpora(cfg.data.train, "data.train", cfg.model, root);
    if (!cfg.data.val.empty()) s.val_data = read_corpora(cfg.data.val, "data.val", cfg.model, root);
    s.train_sampler = std::make_unique<BlendSampler>(*s.train_data, cfg.train.seed, true);
    for (size_t c = 0; s.val_data && c < s.val_data->size(); ++c) {
        s.val_samplers.push_back(std::make_unique<BatchSampler>(s.val_data->dataset(c), cfg.train.seed, false));
    }
}

/// Runs longer than this without periodic checkpoints get a note at start.
constexpr int kLongRunSteps = 500;

}  // namespace

std::unique_ptr<Backend> make_backend(BackendChoice kind, int threads, int local_rank) {
#if ZT_HAVE_CUDA
    if (kind == BackendChoice::kCuda) return make_cuda_backend(local_device(local_rank, cuda_device_count()));
#else
    (void)local_rank;
#endif
    ZT_REQUIRE(kind == BackendChoice::kCpu, "backend '", setting_text(kind), "' is not available in this build");
    return make_cpu_backend(threads);
}

TrainSetup::TrainSetup() = default;
TrainSetup::~TrainSetup() = default;
TrainSetup::TrainSetup(TrainSetup&&) noexcept = default;

bool TrainSetup::has_validation() const { return !val_samplers.empty() || (examples && examples->val()); }

std::vector<std::string> TrainSetup::train_files() const {
    return examples ? examples->train().files() : train_data->files();
}

std::vector<std::string> TrainSetup::val_files() const {
    if (examples) return examples->val() ? examples->val()->files() : std::vector<std::string>{};
    return val_data ? val_data->files() : std::vector<std::string>{};
}

namespace {

/// Each file's corpus pattern, for a weighted list; empty for one plain corpus.
std::vector<std::string> file_corpora(const TokenCorpora* corpora) {
    std::vector<std::string> out;
    if (corpora == nullptr || !corpora->weighted()) return out;
    for (size_t c = 0; c < corpora->size(); ++c) {
        out.insert(out.end(), corpora->dataset(c).files().size(), corpora->spec(c).pattern);
    }
    return out;
}

}  // namespace

std::vector<std::string> TrainSetup::train_file_corpora() const { return file_corpora(train_data.get()); }

std::vector<std::string> TrainSetup::val_file_corpora() const { return file_corpora(val_data.get()); }

std::string TrainSetup::describe_data() const {
    if (examples) return examples->describe_units();
    const auto corpora = [](const TokenCorpora& d) {
        return d.weighted() ? str(" in ", d.size(), " corpora") : std::string();
    };
    return str(train_data->num_windows(), " train windows", corpora(*train_data),
               val_data ? str(", ", val_data->num_windows(), " val windows", corpora(*val_data)) : std::string());
}

TrainSetup set_up_mesh(const Config& cfg, MPI_Comm mpi_comm) {
    TrainSetup s;
    s.comm = make_mpi_communicator(mpi_comm);
    s.mesh = std::make_unique<DeviceMesh>(mpi_comm, cfg.parallel.pipeline, cfg.parallel.tensor,
                                          cfg.parallel.shard_group.ranks, cfg.parallel.zero_stage);
    // An absent dimension's MPI communicator is MPI_COMM_NULL: a communicator of one rank.
    s.data_comm = make_mpi_communicator(s.mesh->data_comm());
    s.pipeline_comm = make_mpi_communicator(s.mesh->pipeline_comm());
    return s;
}

TrainSetup set_up_training(const Config& cfg, MPI_Comm mpi_comm) {
    TrainSetup s = set_up_mesh(cfg, mpi_comm);
    if (s.comm->rank() == 0) {
        std::printf("ztrain: ranks: %s\n", s.layout().describe().c_str());
        if (!s.mesh->note().empty()) std::printf("ztrain: note: %s\n", s.mesh->note().c_str());
    }
    // backend = cpu | cuda | auto: a cuda that cannot run here is bad input, before any work.
    std::string backend_note;
    // resolve_backend answers "cpu" or "cuda"; from here on it is an enum.
    const std::string resolved = resolve_backend(setting_text(cfg.backend), &backend_note);
    s.backend_kind = resolved == "cuda" ? BackendChoice::kCuda : BackendChoice::kCpu;
    if (s.backend_kind == BackendChoice::kCuda) check_cuda_training(cfg);
    if (s.comm->rank() == 0 && !backend_note.empty()) std::printf("ztrain: %s\n", backend_note.c_str());
    if (s.comm->rank() == 0 && cfg.checkpoint.every == 0 && cfg.train.max_steps > kLongRunSteps) {
        std::printf("ztrain: note: train.max_steps = %d with checkpoint.every = 0: only the end of the run (or a "
                    "stop signal) writes a checkpoint, so a crash or a kill -9 loses every step; set "
                    "checkpoint.every (e.g. --checkpoint.every=%d)\n",
                    cfg.train.max_steps, kLongRunSteps);
    }

    require_usable_path("run.dir", cfg.run.dir);
    require_usable_path("checkpoint.dir", cfg.checkpoint.dir);
    require_usable_path("data.tokenizer", cfg.data.tokenizer);
    const ModelConfig& mc = cfg.model;
    // Example shards (version 3) train on example rows (example_feed.hpp); data.packing and
    // data.overlong mean nothing to pretraining shards, which ignore them.
    if (is_example_shard(cfg.data.train, "data.train")) {
        // Block-diagonal attention is trusted on the cpu only: the CUDA version has not run on
        // a GPU yet (its gpu test, CudaOps.SegmentedAttentionMatchesTheCpu, first). Padded rows
        // need no new op (on CUDA they stay one example per row, uncompacted).
        ZT_INPUT_CHECK(s.backend_kind != BackendChoice::kCuda || cfg.data.packing == DataPacking::kPad,
                       "data.packing = pack: packed examples need block-diagonal attention, whose backend = cuda "
                       "version has not run on a GPU yet; use data.packing = pad or backend = cpu");
        ZT_INPUT_CHECK(cfg.data.val.empty() || !parse_corpus_list(cfg.data.val, "data.val").weighted,
                       "data.val = ", cfg.data.val, ": a weighted list, while data.train holds example shards: "
                       "blends are of pretraining shards; give one example corpus without weights");
        s.examples = std::make_unique<ExampleFeed>(cfg, s.backend_kind != BackendChoice::kCuda);
    } else {
        read_pretraining_data(cfg, s);
    }
    s.tokenizer = find_tokenizer(cfg, s.train_files().front(), &s.tokenizer_file);
    if (s.tokenizer) {
        ZT_INPUT_CHECK(s.tokenizer->vocab_size() <= mc.vocab_size, "model.vocab_size = ", mc.vocab_size,
                       " is smaller than the tokenizer's vocabulary (", s.tokenizer->vocab_size(), " tokens)");
    }
    s.eval_tasks = read_eval_tasks(cfg, s.tokenizer.get());
    return s;
}

void start_compute(TrainSetup& s, const Config& cfg) {
    // Ranks on one node share its cores unless told otherwise.
    const int threads = threads_per_rank(cfg.train.threads, s.comm->local_size());
    // ZT_PROFILE_OPS=1 wraps the backend in a ProfilingBackend (per-op times in ops_ms).
    s.backend = profile_ops_from_env(make_backend(s.backend_kind, threads, s.comm->local_rank()));
    s.op_profile = dynamic_cast<ProfilingBackend*>(s.backend.get());
    // How the backend runs the working dtype's products, where worth saying (the CPU without
    // bf16 instructions or with ZT_CPU_BF16=off); a bad ZT_CPU_BF16 is an input error here.
    const std::string products_note = s.backend->activation_dtype_note(cfg.precision.dtype);
    if (s.comm->rank() == 0 && !products_note.empty()) std::printf("ztrain: note: %s\n", products_note.c_str());
    const RankLayout& L = s.layout();
    if (s.backend->capabilities().device_memory) {
        // Device buffers: NCCL (or staging) inside the group, and across groups when there are
        // replicas; the node-local rank of the whole job picks the GPU.
        const NodePlacement node{L.local_rank, L.local_size};
        s.shard_comm = make_communicator("cuda", s.mesh->shard_comm(), cuda_stream(*s.backend), node,
                                         L.replicas > 1 ? "shard-group" : "model-state");
        s.replica_comm = L.replicas > 1 ? make_communicator("cuda", s.mesh->replica_comm(), cuda_stream(*s.backend),
                                                            node, "replica")
                                        : make_mpi_communicator(MPI_COMM_NULL);
        s.tensor_comm = L.tensor > 1 ? make_communicator("cuda", s.mesh->tensor_comm(), cuda_stream(*s.backend),
                                                         node, "tensor")
                                     : make_mpi_communicator(MPI_COMM_NULL);
    } else {
        const bool engine = cfg.parallel.comm_thread;
        s.shard_comm = make_mpi_communicator(s.mesh->shard_comm(), engine);
        s.replica_comm = make_mpi_communicator(L.replicas > 1 ? s.mesh->replica_comm() : MPI_COMM_NULL, engine);
        // The tensor group's sums are waited for at once (the next op reads them): no thread.
        s.tensor_comm = make_mpi_communicator(s.mesh->tensor_comm());  // MPI_COMM_NULL when T = 1: one rank
    }
    s.tensor_group = std::make_unique<CommunicatorTensorGroup>(*s.tensor_comm);
}

}  // namespace zt
