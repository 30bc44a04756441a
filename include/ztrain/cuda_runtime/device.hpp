// The CUDA devices this process can use: how many, which one a rank takes, making it
// current, and what the runtime reports about them. Plain C++ (no CUDA header), declared
// in every build: without CUDA there are no devices (count 0, UUIDs all zero, a report
// that says so), and making one current throws, so callers need no #if.
//
// The one place for device discovery and selection: the CUDA backend, the NCCL and staged
// communicators, the trainer and `ztrain --env` all come here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

/// Number of visible GPUs; 0 when there are none, no driver, or no CUDA in this build.
/// Never throws: "no GPU" is an answer, not an error.
int cuda_device_count();

/// The device node-local rank `local_rank` uses: local_rank % device_count (ranks beyond
/// the GPU count share round-robin; the communicator choice notices). Pure arithmetic.
int local_device(int local_rank, int device_count);

/// Makes device `device` current for this thread. Throws zt::Error, naming the device and
/// how many are visible, when it does not exist, and in builds without CUDA.
void cuda_set_device(int device);

/// Picks this rank's device (local_device over the visible GPUs), makes it current and
/// returns it. Throws zt::Error when no GPU is visible.
int select_local_device(int local_rank);

/// Device `device`'s UUID, which tells whether two ranks drive the same GPU even when each
/// sees its own CUDA_VISIBLE_DEVICES; all zero when unknown (no CUDA, no such device).
std::array<uint8_t, 16> cuda_device_uuid(int device);

/// Free and total bytes of the current device's memory (cudaMemGetInfo, after the CUDA
/// context exists); false when unknown (no CUDA in this build, no device, a runtime error).
/// Never throws: the memory plan then just cannot check the device.
bool cuda_memory_info(size_t* free_bytes, size_t* total_bytes);

/// Multi-line report for `ztrain --env`: runtime/driver and cuBLASLt versions, then each
/// GPU (name, memory, compute capability). Never throws. Only meaningful in CUDA builds.
std::string cuda_environment_report();

}  // namespace zt
