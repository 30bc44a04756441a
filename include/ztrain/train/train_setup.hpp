// What a training run stands on, set up before any model exists: the MPI communicator, the
// compute backend (and, on a GPU, the device communicator for the model state), the training
// and validation data with their samplers, and the tokenizer. Every input checked here is
// checked before any work starts (bad input: InputError, exit 2). Not here: the model, the
// checkpoint to resume from (resume_policy.hpp), the run directory.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "ztrain/config/config.hpp"

namespace zt {

class ProfilingBackend;

class Backend;
class BatchSampler;
class Communicator;
class TokenDataset;
class Tokenizer;

/// backend = cuda trains what is integrated on device memory: fp32 (precision.dtype and
/// reduce_dtype), every ZeRO stage, checkpoints staged through the host. Throws InputError
/// naming the key for the rest (16-bit precision, model.init_from). Pure: no GPU needed.
void check_cuda_training(const Config& cfg);

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
    std::unique_ptr<TokenDataset> train_data;
    std::unique_ptr<TokenDataset> val_data;  ///< null without data.val
    std::unique_ptr<Tokenizer> tokenizer;    ///< null: samples are shown as token ids
    std::unique_ptr<BatchSampler> train_sampler;
    std::unique_ptr<BatchSampler> val_sampler;  ///< null without data.val
    std::unique_ptr<Backend> backend;
    /// `backend` itself when ZT_PROFILE_OPS wrapped it in a ProfilingBackend, else null.
    ProfilingBackend* op_profile = nullptr;
    /// On a GPU the model state's collectives run on device buffers (NCCL, or host staging
    /// where ranks share a GPU); null on the cpu.
    std::unique_ptr<Communicator> device_comm;

    /// The communicator the model state reduces and gathers through.
    Communicator& state_comm() const { return device_comm ? *device_comm : *comm; }
};

/// Sets up the communicator, the backend choice and the data of a run over `mpi_comm`
/// (collective). Rank 0 prints the backend note of backend = auto.
TrainSetup set_up_training(const Config& cfg, MPI_Comm mpi_comm);

/// Creates the backend (threads: train.threads, or the node's cores shared by its ranks) and,
/// on a GPU, the device communicator (collective; rank 0 prints the choice). A second step,
/// so that the checkpoint to resume from is resolved (and its note printed) before it.
void start_compute(TrainSetup& setup, const Config& cfg, MPI_Comm mpi_comm);

}  // namespace zt
