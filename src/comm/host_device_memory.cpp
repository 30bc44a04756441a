// DeviceMemory over plain host memory, for running the staged communicator without a GPU.
//
// Copies are queued and run in synchronize(), as a stream would complete them later: a
// staged communicator that forgot a synchronize() reads stale data and fails its tests here
// rather than only on a GPU.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ztrain/comm/device_memory.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace {

class HostDeviceMemory final : public DeviceMemory {
  public:
    std::string name() const override { return "host"; }
    void* alloc_host(size_t bytes) override {
        void* p = std::malloc(bytes > 0 ? bytes : 1);
        if (p == nullptr) throw Error(str("host staging buffer: cannot allocate ", bytes, " bytes"));
        return p;
    }
    void free_host(void* p) noexcept override { std::free(p); }
    void copy_to_host(void* host, const void* device, size_t bytes) override { m_queue.push_back({host, device, bytes}); }
    void copy_to_device(void* device, const void* host, size_t bytes) override {
        m_queue.push_back({device, host, bytes});
    }
    void copy_device(void* dst, const void* src, size_t bytes) override { m_queue.push_back({dst, src, bytes}); }
    void synchronize() override {
        for (const Copy& c : m_queue) std::memmove(c.dst, c.src, c.bytes);
        m_queue.clear();
    }

  private:
    struct Copy {
        void* dst;
        const void* src;
        size_t bytes;
    };
    std::vector<Copy> m_queue;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_host_device_memory() { return std::make_unique<HostDeviceMemory>(); }

}  // namespace zt
