// Collectives on device buffers through host memory and MPI.
//
// NCCL refuses two ranks on one GPU, so when ranks share a device (a one-GPU test machine
// running -np 4) their device buffers are copied to pinned host memory, reduced by an MPI
// communicator and copied back. Slower than NCCL (two PCIe copies and a host reduction per
// call) but the same interface and results, so the multi-rank GPU path runs anywhere.
#pragma once

#include <memory>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/memory/device_memory.hpp"

namespace zt {

/// `host` does the reductions on host buffers (normally make_mpi_communicator); `memory`
/// moves data between the device buffers the callers pass and host staging buffers.
/// A started collective copies its input to host memory before start_* returns, so the
/// caller may reuse the input buffer at once; results land in device memory in wait().
std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host,
                                                       std::unique_ptr<DeviceMemory> memory);

}  // namespace zt
