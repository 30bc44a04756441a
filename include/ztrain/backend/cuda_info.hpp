// What the CUDA runtime sees (for `ztrain --env`). Only defined in CUDA builds.
#pragma once

#include <string>

namespace zt {
/// Multi-line report: runtime/driver versions, cuBLAS and NCCL versions, and each GPU
/// (name, memory, compute capability). Never throws: "no GPU" is a valid answer.
std::string cuda_environment_report();
/// Number of visible GPUs (0 when none or no driver).
int cuda_device_count();
}  // namespace zt
