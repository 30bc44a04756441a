// Pageable host memory, and DeviceMemory over plain host memory (for CPU backends and for
// running the staged communicator without a GPU).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ztrain/core/error.hpp"
#include "ztrain/core/stream_copy.hpp"
#include "ztrain/memory/device_memory.hpp"
#include "pinned_memory.hpp"

namespace zt {


void* alloc_host(size_t bytes, HostMemoryKind kind) {
    if (kind == HostMemoryKind::kPinned) return pinned_alloc(bytes);
    void* p = nullptr;
    if (::posix_memalign(&p, kHostPageAlign, std::max<size_t>(bytes, 1)) != 0 || p == nullptr) {
        throw Error(str("cannot allocate ", bytes, " bytes of host memory"));
    }
    return p;
}

void free_host(void* p, HostMemoryKind kind) noexcept {
    if (p == nullptr) return;
    if (kind == HostMemoryKind::kPinned) {
        pinned_free(p);
    } else {
        std::free(p);
    }
}

namespace {

class HostDeviceMemory final : public DeviceMemory {
  public:
    explicit HostDeviceMemory(HostCopyTiming timing) : m_timing(timing) {}
    std::string name() const override { return "host"; }
    HostMemoryKind host_memory_kind() const override { return HostMemoryKind::kPageable; }
    void copy_to_host(void* host, const void* device, size_t bytes) override { queue(host, device, bytes, false); }
    void copy_to_host_past_cache(void* host, const void* device, size_t bytes) override {
        queue(host, device, bytes, true);
    }
    void copy_to_device(void* device, const void* host, size_t bytes) override { queue(device, host, bytes, false); }
    void copy_device(void* dst, const void* src, size_t bytes) override { queue(dst, src, bytes, false); }
    void synchronize() override {
        for (const Copy& c : m_queue) run(c);
        m_queue.clear();
    }

  private:
    struct Copy {
        void* dst;
        const void* src;
        size_t bytes;
        bool past_cache;
    };
    static void run(const Copy& c) {
        if (c.past_cache) {
            copy_past_cache(c.dst, c.src, c.bytes);
        } else {
            std::memmove(c.dst, c.src, c.bytes);
        }
    }
    void queue(void* dst, const void* src, size_t bytes, bool past_cache) {
        if (bytes == 0 || dst == src) return;
        const Copy c{dst, src, bytes, past_cache};
        if (m_timing == HostCopyTiming::kAtCall) {
            run(c);
        } else {
            m_queue.push_back(c);
        }
    }
    HostCopyTiming m_timing;
    std::vector<Copy> m_queue;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_host_device_memory(HostCopyTiming timing) {
    return std::make_unique<HostDeviceMemory>(timing);
}

}  // namespace zt
