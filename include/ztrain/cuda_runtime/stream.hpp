// Stream creation for everything that enqueues GPU work (the CUDA backend's compute stream,
// the NCCL communicator's stream, the staging copies' stream). CUDA builds only: this
// header needs <cuda_runtime.h>.
#pragma once

#include <cuda_runtime.h>

namespace zt {

/// A new stream on the current device that does not synchronize with the legacy default
/// stream (cudaStreamNonBlocking): ztrain orders its streams with events, never through
/// stream 0. The caller owns it (cudaStreamDestroy). Throws zt::Error on failure.
cudaStream_t create_stream();

}  // namespace zt
