// Moving collective buffers between device memory and host staging memory.
//
// The host-staged communicator is written against this small interface instead of the CUDA
// runtime, so the same code runs under MPI on a machine without a GPU (the host
// implementation: "device" buffers are host memory and copies are memcpy) and on GPUs
// (the CUDA implementation: pinned host memory and asynchronous copies on a transfer stream).
//
// Ordering contract: a copy_to_host reads the device buffer after all work already enqueued
// on the compute stream (it cannot see stale gradients); synchronize() returns once every
// copy issued so far is complete, so the host may read what copy_to_host wrote and the
// compute stream's later work sees what copy_to_device wrote.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace zt {

class DeviceMemory {
  public:
    virtual ~DeviceMemory() = default;
    virtual std::string name() const = 0;
    /// Host memory the copies can use at full speed (page-locked for CUDA); never null.
    virtual void* alloc_host(size_t bytes) = 0;
    virtual void free_host(void* p) noexcept = 0;
    virtual void copy_to_host(void* host, const void* device, size_t bytes) = 0;
    virtual void copy_to_device(void* device, const void* host, size_t bytes) = 0;
    /// Device to device, ordered like the other copies.
    virtual void copy_device(void* dst, const void* src, size_t bytes) = 0;
    virtual void synchronize() = 0;
};

/// "Device" memory that is host memory: memcpy copies. Lets the staged communicator be
/// tested under MPI without a GPU.
std::unique_ptr<DeviceMemory> make_host_device_memory();

/// CUDA device memory on the current device: pinned staging buffers, copies on a transfer
/// stream ordered after `compute_stream` (a cudaStream_t; null = the legacy default stream).
/// Throws zt::Error in builds without CUDA.
std::unique_ptr<DeviceMemory> make_cuda_device_memory(void* compute_stream);

}  // namespace zt
