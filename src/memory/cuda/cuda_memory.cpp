// Page-locked host memory, and DeviceMemory on CUDA: copies on a transfer stream that waits
// for the compute stream, so a copy never blocks later compute and never reads a buffer
// before the kernels that write it have run.
#include <cuda_runtime.h>

#include <algorithm>

#include "ztrain/cuda_runtime/cuda_check.hpp"
#include "ztrain/cuda_runtime/stream.hpp"
#include "ztrain/memory/device_memory.hpp"
#include "../pinned_memory.hpp"

namespace zt {

void* pinned_alloc(size_t bytes) {
    void* p = nullptr;  // page-aligned by the CUDA runtime
    ZT_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault));
    return p;
}

void pinned_free(void* p) noexcept { (void)cudaFreeHost(p); }

namespace {

class CudaDeviceMemory final : public DeviceMemory {
  public:
    explicit CudaDeviceMemory(void* compute_stream) : m_compute(static_cast<cudaStream_t>(compute_stream)) {
        m_copy = create_stream();
        ZT_CUDA_CHECK(cudaEventCreateWithFlags(&m_compute_done, cudaEventDisableTiming));
    }
    ~CudaDeviceMemory() override {
        // Unchecked: a destructor must not throw, and a failure here changes nothing.
        cudaStreamSynchronize(m_copy);
        cudaEventDestroy(m_compute_done);
        cudaStreamDestroy(m_copy);
    }
    std::string name() const override { return "cuda"; }
    HostMemoryKind host_memory_kind() const override { return HostMemoryKind::kPinned; }
    void copy_to_host(void* host, const void* device, size_t bytes) override {
        copy(host, device, bytes, cudaMemcpyDeviceToHost);
    }
    void copy_to_device(void* device, const void* host, size_t bytes) override {
        copy(device, host, bytes, cudaMemcpyHostToDevice);
    }
    void copy_device(void* dst, const void* src, size_t bytes) override {
        copy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    }
    void synchronize() override { ZT_CUDA_CHECK(cudaStreamSynchronize(m_copy)); }

  private:
    /// Enqueues the copy after everything the compute stream holds now.
    void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
        if (bytes == 0) return;
        ZT_CUDA_CHECK(cudaEventRecord(m_compute_done, m_compute));
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_copy, m_compute_done, 0));
        ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, m_copy));
    }

    cudaStream_t m_compute;
    cudaStream_t m_copy = nullptr;
    cudaEvent_t m_compute_done = nullptr;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_device_memory(void* compute_stream) {
    return std::make_unique<CudaDeviceMemory>(compute_stream);
}

}  // namespace zt
