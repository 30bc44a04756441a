// The memory service (memory/device_memory.hpp) over host memory: when copies run, which
// bytes they write, and the host allocations' alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/memory/device_memory.hpp"

namespace {

using zt::DeviceMemory;
using zt::HostCopyTiming;
using zt::HostMemoryKind;

std::vector<float> iota(size_t n, float from) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
    return v;
}

TEST(DeviceMemory, HostCopiesAtCallAreDoneWhenTheCallReturns) {
    auto memory = zt::make_host_device_memory(HostCopyTiming::kAtCall);
    const std::vector<float> src = iota(1000, 1.f);
    std::vector<float> host(1000, 0.f), device(1000, 0.f), past(1000, 0.f);
    memory->copy_to_device(device.data(), src.data(), src.size() * sizeof(float));
    EXPECT_EQ(device, src) << "copy_to_device at the call";
    memory->copy_to_host(host.data(), device.data(), 500 * sizeof(float));
    for (size_t i = 0; i < 1000; ++i) {
        EXPECT_EQ(host[i], i < 500 ? src[i] : 0.f) << "copy_to_host of 500 floats, element " << i;
    }
    memory->copy_to_host_past_cache(past.data() + 3, device.data(), 997 * sizeof(float));
    EXPECT_EQ(past[0], 0.f);
    EXPECT_EQ(std::memcmp(past.data() + 3, src.data(), 997 * sizeof(float)), 0) << "past-cache copy differs";
    memory->synchronize();  // nothing queued: a no-op
    EXPECT_EQ(device, src);
}

// The staged communicator's tests rely on this: a copy read before synchronize() is stale.
TEST(DeviceMemory, HostCopiesAtSynchronizeRunInOrderThere) {
    auto memory = zt::make_host_device_memory(HostCopyTiming::kAtSynchronize);
    const std::vector<float> src = iota(64, 10.f);
    std::vector<float> device(64, 0.f), host(64, -1.f), moved(64, 0.f);
    memory->copy_to_device(device.data(), src.data(), 64 * sizeof(float));
    memory->copy_device(moved.data(), device.data(), 64 * sizeof(float));
    memory->copy_to_host_past_cache(host.data(), moved.data(), 64 * sizeof(float));
    EXPECT_EQ(device, std::vector<float>(64, 0.f)) << "a queued copy ran before synchronize()";
    EXPECT_EQ(host, std::vector<float>(64, -1.f)) << "a queued copy ran before synchronize()";
    memory->synchronize();
    EXPECT_EQ(device, src) << "copy_to_device after synchronize()";
    EXPECT_EQ(moved, src) << "copy_device saw the copy issued before it";
    EXPECT_EQ(host, src) << "copy_to_host saw the copies issued before it";
}

TEST(DeviceMemory, PageableHostMemoryIsPageAligned) {
    auto memory = zt::make_host_device_memory(HostCopyTiming::kAtCall);
    EXPECT_EQ(memory->host_memory_kind(), HostMemoryKind::kPageable);
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, size_t{3} << 20}) {
        void* p = memory->alloc_host(bytes);
        ASSERT_NE(p, nullptr) << bytes << " bytes";
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % zt::kHostPageAlign, 0u) << bytes << " bytes";
        if (bytes > 0) std::memset(p, 0xa5, bytes);
        memory->free_host(p);
    }
    zt::free_host(nullptr, HostMemoryKind::kPageable);
    zt::free_host(nullptr, HostMemoryKind::kPinned);
}

TEST(DeviceMemory, PinnedMemoryWithoutCudaSaysSo) {
    if (ZT_HAVE_CUDA) GTEST_SKIP() << "a CUDA build: pinned memory is tested by the gpu label";
    try {
        zt::alloc_host(4096, HostMemoryKind::kPinned);
        FAIL() << "pinned memory in a build without CUDA did not throw";
    } catch (const zt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA"), std::string::npos) << e.what();
    }
    EXPECT_THROW(zt::make_cuda_device_memory(nullptr), zt::Error);
}

}  // namespace
