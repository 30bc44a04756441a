// What a training run stands on, set up before any model exists: the MPI communicator, the
// compute backend (and, on a GPU, the device communicator for the model state), the training
// and validation data with their samplers, and the tokenizer. Every input checked here is
// checked before any work starts (bad input: InputError, exit 2). Not here: the model, the
// checkpoint to resume from (resume_policy.hpp), the run directory.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/data/choice_task.hpp"
#include "ztrain/parallel/device_mesh.hpp"
#include "ztrain/parallel/state_context.hpp"

namespace zt {

class ProfilingBackend;

class Backend;
class BatchSampler;
class BlendSampler;
class Communicator;
class ExampleFeed;
class TokenCorpora;
class Tokenizer;

/// backend = cuda trains what is integrated on device memory: fp32 (precision.dtype and
/// reduce_dtype), every ZeRO stage, checkpoints staged through the host. Throws InputError
/// naming the key for the rest (16-bit precision, model.init_from). Pure: no GPU needed.
void check_cuda_training(const Config& cfg);

/// The backend `kind` (resolved: cpu or cuda), `threads` for the CPU's, the GPU local_rank
/// picks for CUDA's.
std::unique_ptr<Backend> make_backend(BackendChoice kind, int threads, int local_rank);

struct TrainSetup {
    TrainSetup();
    ~TrainSetup();
    TrainSetup(TrainSetup&&) noexcept;
    TrainSetup& operator=(TrainSetup&&) = delete;
    TrainSetup(const TrainSetup&) = delete;
    TrainSetup& operator=(const TrainSetup&) = delete;

    // Declaration order is destruction order reversed: the device communicator goes before
    // the backend whose stream it uses, everything before the MPI communicator.
    std::unique_ptr<Communicator> comm;  ///< MPI: host-side traffic (scalars, checkpoints)
    BackendChoice backend_kind = BackendChoice::kCpu;  ///< kCpu | kCuda: `backend` resolved (never kAuto)
    /// data.train's corpora (one, or a weighted blend: data/blend.hpp); null on example shards.
    std::unique_ptr<TokenCorpora> train_data;
    std::unique_ptr<TokenCorpora> val_data;  ///< null without data.val or on example shards
    /// Example shards (zt-prepare --format jsonl): their rows instead of the windows and
    /// samplers above; null on pretraining shards.
    std::unique_ptr<ExampleFeed> examples;
    std::unique_ptr<Tokenizer> tokenizer;    ///< null: samples are shown as token ids
    std::string tokenizer_file;              ///< the file `tokenizer` came from ("" when none)
    std::vector<ChoiceTask> eval_tasks;      ///< eval.tasks, tokenized with `tokenizer`
    std::unique_ptr<BlendSampler> train_sampler;
    /// One per corpus of data.val (each evaluated on its own); empty without data.val.
    std::vector<std::unique_ptr<BatchSampler>> val_samplers;
    std::unique_ptr<Backend> backend;
    /// `backend` itself when ZT_PROFILE_OPS wrapped it in a ProfilingBackend, else null.
    ProfilingBackend* op_profile = nullptr;
    /// Who is where: nodes, ranks per node, the mesh's groups and their MPI communicators.
    std::unique_ptr<DeviceMesh> mesh;
    /// The model state's collectives: inside its shard group, and across the groups (one
    /// rank when nothing is replicated). MPI on host memory on the cpu; on a GPU, device
    /// buffers (NCCL, or host staging where ranks share a GPU).
    std::unique_ptr<Communicator> shard_comm;
    std::unique_ptr<Communicator> replica_comm;
    /// The mesh's other dimensions, each a communicator whatever its size (one rank when the
    /// dimension is absent): the tensor group's collectives (device buffers on a GPU when
    /// parallel.tensor > 1) and the model's face of them; the data-parallel ranks' host
    /// communicator (this rank's tensor rank and stage), over which the data is split and
    /// its scalars (losses, counts) summed; the host communicator of this rank's pipeline
    /// (the ranks at its place in every stage, by stage), over which the stages agree on the
    /// loss, the norm and the overflow verdict.
    std::unique_ptr<Communicator> tensor_comm;
    std::unique_ptr<TensorGroup> tensor_group;
    std::unique_ptr<Communicator> data_comm;
    std::unique_ptr<Communicator> pipeline_comm;
    Communicator& data() const { return *data_comm; }
    const RankLayout& layout() const { return mesh->layout(); }
    /// The tensor group as the model takes it: null when parallel.tensor = 1, which the
    /// model reads as "no tensor parallelism" (model/transformer.hpp).
    TensorGroup* tensor_group_or_null() const { return layout().tensor > 1 ? tensor_group.get() : nullptr; }
    /// The tensor group's communicator when it has more than one rank, else null: the step
    /// records then keep no `tensor` bytes (StepReporter::set_tensor_comms).
    const Communicator* split_tensor_comm() const { return layout().tensor > 1 ? tensor_comm.get() : nullptr; }

    /// Whether the run has validation data (data.val: windows or example rows).
    bool has_validation() const;
    /// The training and validation files, whichever kind of shard they are.
    std::vector<std::string> train_files() const;
    std::vector<std::string> val_files() const;
    /// The corpus (its pattern) of each of train_files() / val_files() when data.train /
    /// data.val is a weighted list; empty otherwise (the fingerprint then names files alone).
    std::vector<std::string> train_file_corpora() const;
    std::vector<std::string> val_file_corpora() const;
    /// What the start-up line says the data is, in its own units: "N train windows, M val
    /// windows" on token shards; on example shards the examples, the rows they make per
    /// epoch (data.packing) and what data.overlong left out or cut
    /// (ExampleFeed::describe_units).
    std::string describe_data() const;

    StateComms state_comms() const { return StateComms{*shard_comm, *replica_comm, tensor_comm.get()}; }
    /// Every communicator of the run (per-step accounting, the watchdog).
    std::vector<Communicator*> all_comms() const {
        return {comm.get(), shard_comm.get(), replica_comm.get(), tensor_comm.get(), data_comm.get(),
                pipeline_comm.get()};
    }
};

/// The communicator and the mesh of `cfg`'s parallel.* over `mpi_comm`, with its data and
/// pipeline communicators (the tensor group's comes with start_compute's backend); the
/// backend choice cpu, no data.
/// What set_up_training starts from, and all a model that is not trained needs before
/// start_compute (zt-eval). Collective.
TrainSetup set_up_mesh(const Config& cfg, MPI_Comm mpi_comm);

/// Sets up the communicator, the rank layout (shard groups), the backend choice and the data
/// of a run over `mpi_comm` (collective). Rank 0 prints the layout and the backend note of
/// backend = auto.
TrainSetup set_up_training(const Config& cfg, MPI_Comm mpi_comm);

/// Creates the backend (threads: train.threads, or the node's cores shared by its ranks) and
/// the model state's communicators (collective; on a GPU rank 0 prints the choice). A second step,
/// so that the checkpoint to resume from is resolved (and its note printed) before it.
void start_compute(TrainSetup& setup, const Config& cfg);

}  // namespace zt
