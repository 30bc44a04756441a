// Host memory for transfers, and copies between host and device memory: the one service
// every component that moves data across the host/device boundary uses (the backend's
// to_host/to_device, the host-staged communicator, the checkpoint snapshot).
//
// Two implementations of DeviceMemory: over plain host memory ("device" buffers are host
// memory, copies are memcpy), and over CUDA (page-locked host memory, asynchronous copies on
// a transfer stream ordered after the compute stream). Callers pick one by the backend's
// capabilities (BackendCapabilities::device_memory), never by the backend's name.
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

/// Alignment of alloc_host memory (a page: what direct I/O needs).
constexpr size_t kHostPageAlign = 4096;

/// Plain (pageable) host memory, or page-locked memory a device copies to and from at full
/// speed (CUDA builds only).
enum class HostMemoryKind { kPageable, kPinned };

/// `bytes` of host memory of `kind`, aligned to kHostPageAlign, not zeroed; a unique,
/// freeable pointer also for 0 bytes. Throws zt::Error when none is left (or for kPinned in
/// a build without CUDA).
void* alloc_host(size_t bytes, HostMemoryKind kind);
/// Frees alloc_host memory of the same kind; null is a no-op.
void free_host(void* p, HostMemoryKind kind) noexcept;

class DeviceMemory {
  public:
    virtual ~DeviceMemory() = default;
    virtual std::string name() const = 0;
    /// The host memory this implementation's copies run at full speed with.
    virtual HostMemoryKind host_memory_kind() const = 0;
    void* alloc_host(size_t bytes) { return zt::alloc_host(bytes, host_memory_kind()); }
    void free_host(void* p) noexcept { zt::free_host(p, host_memory_kind()); }

    virtual void copy_to_host(void* host, const void* device, size_t bytes) = 0;
    /// copy_to_host for a large copy whose host side is read much later, by another thread
    /// (a checkpoint snapshot): over host memory it writes past the CPU caches
    /// (core/stream_copy.hpp); a device's copy is copy_to_host.
    virtual void copy_to_host_past_cache(void* host, const void* device, size_t bytes) {
        copy_to_host(host, device, bytes);
    }
    virtual void copy_to_device(void* device, const void* host, size_t bytes) = 0;
    /// Device to device, ordered like the other copies.
    virtual void copy_device(void* dst, const void* src, size_t bytes) = 0;
    virtual void synchronize() = 0;
};

/// When host DeviceMemory copies run: at the call (a CPU backend's memory), or queued and
/// run in synchronize() as a stream would complete them later (the staged communicator's
/// tests without a GPU: one that forgot a synchronize() reads stale data and fails here
/// rather than only on a GPU).
enum class HostCopyTiming { kAtCall, kAtSynchronize };

/// "Device" memory that is host memory: copies are memcpy, at the time `timing` says.
std::unique_ptr<DeviceMemory> make_host_device_memory(HostCopyTiming timing);

/// CUDA device memory on the current device: pinned host memory, copies on a transfer
/// stream ordered after `compute_stream` (a cudaStream_t; null = the legacy default stream).
/// Throws zt::Error in builds without CUDA.
std::unique_ptr<DeviceMemory> make_cuda_device_memory(void* compute_stream);

}  // namespace zt
