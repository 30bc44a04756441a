// Host-staged communicator: device buffers in, host MPI collectives, device buffers out.
//
// Each started collective owns a host staging buffer until its wait(), so several may be in
// flight at once and the caller may do other work (or reuse the input buffer) before
// finishing them. Buffers come from a pool so steady-state steps allocate no pinned memory.
#include "ztrain/comm/staged_communicator.hpp"

#include <vector>

#include "host_backed_communicator.hpp"

namespace zt {
namespace {

/// Host staging buffers, reused once their collective has finished.
class StagingPool {
  public:
    explicit StagingPool(DeviceMemory& memory) : m_memory(memory) {}
    ~StagingPool() {
        for (const Slot& s : m_slots) m_memory.free_host(s.ptr);
    }
    StagingPool(const StagingPool&) = delete;
    StagingPool& operator=(const StagingPool&) = delete;

    char* acquire(size_t bytes) {
        Slot* best = nullptr;
        for (Slot& s : m_slots) {
            if (!s.busy && s.capacity >= bytes && (best == nullptr || s.capacity < best->capacity)) best = &s;
        }
        if (best == nullptr) {
            m_slots.push_back({static_cast<char*>(m_memory.alloc_host(bytes)), bytes, false});
            best = &m_slots.back();
        }
        best->busy = true;
        return best->ptr;
    }
    void release(const char* ptr) {
        for (Slot& s : m_slots) {
            if (s.ptr == ptr) s.busy = false;
        }
    }

  private:
    struct Slot {
        char* ptr;
        size_t capacity;
        bool busy;
    };
    DeviceMemory& m_memory;
    std::vector<Slot> m_slots;
};

class StagedCommunicator final : public HostBackedCommunicator {
  public:
    StagedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<DeviceMemory> memory)
        : HostBackedCommunicator(std::move(host)), m_memory(std::move(memory)), m_pool(*m_memory) {}
    // Completes the MPI requests still writing into staging buffers before the pool frees
    // them; their results are not copied back.
    ~StagedCommunicator() override { release_host_comm(); }
    std::string name() const override { return "staged(" + m_memory->name() + ")"; }

  protected:
    CommRequest do_start_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) override {
        const size_t bytes = count * dtype_size(dt);
        char* host = stage_in(buf, bytes, bytes, 0);
        return keep({host_comm().start_all_reduce(host, count, op, dt), host, buf, host, bytes});
    }
    CommRequest do_start_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op,
                                        DType dt) override {
        const size_t block = count_per_rank * dtype_size(dt);
        const size_t total = block * static_cast<size_t>(size());
        char* host = stage_in(in, total, total + block, 0);
        return keep({host_comm().start_reduce_scatter(host, host + total, count_per_rank, op, dt), host, out,
                     host + total, block});
    }
    CommRequest do_start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) override {
        const size_t block = count_per_rank * dtype_size(dt);
        const size_t offset = block * static_cast<size_t>(rank());
        const void* mine = in != nullptr ? in : static_cast<const char*>(out) + offset;
        // Only this rank's block goes to the host; the gather fills the rest in place.
        char* host = stage_in(mine, block, block * static_cast<size_t>(size()), offset);
        return keep({host_comm().start_all_gather(nullptr, host, count_per_rank, dt), host, out, host,
                     block * static_cast<size_t>(size())});
    }
    void do_wait(CommRequest& request) override {
        Pending p = m_pending.take(request);
        host_comm().wait(p.inner);
        m_memory->copy_to_device(p.device_out, p.host_out, p.bytes_out);
        finish(p.staging);
    }
    void do_broadcast(void* buf, size_t bytes, int root) override {
        char* host = m_pool.acquire(bytes);
        if (rank() == root) {
            m_memory->copy_to_host(host, buf, bytes);
            m_memory->synchronize();
        }
        host_comm().broadcast_bytes(host, bytes, root);
        if (rank() != root) m_memory->copy_to_device(buf, host, bytes);
        finish(host);
    }
    void copy_local(const void* in, void* out, size_t bytes) override {
        m_memory->copy_device(out, in, bytes);
        m_memory->synchronize();
    }

  private:
    struct Pending {
        CommRequest inner;
        char* staging;         ///< the pool buffer to release
        void* device_out;      ///< where the result goes in wait()
        const char* host_out;  ///< where it is in the staging buffer
        size_t bytes_out;
    };

    /// A staging buffer of `capacity` bytes with `bytes` of `device` copied to `offset`,
    /// complete on return (the host collective reads it next).
    char* stage_in(const void* device, size_t bytes, size_t capacity, size_t offset) {
        char* host = m_pool.acquire(capacity);
        m_memory->copy_to_host(host + offset, device, bytes);
        m_memory->synchronize();
        return host;
    }
    /// Completes the copies back to the device and frees the staging buffer for reuse.
    void finish(const char* staging) {
        m_memory->synchronize();
        m_pool.release(staging);
    }
    CommRequest keep(Pending p) { return m_pending.add(p); }

    std::unique_ptr<DeviceMemory> m_memory;
    StagingPool m_pool;
    RequestTable<Pending> m_pending;
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host,
                                                       std::unique_ptr<DeviceMemory> memory) {
    ZT_REQUIRE(host != nullptr && memory != nullptr, "staged communicator needs a host communicator and memory");
    return std::make_unique<StagedCommunicator>(std::move(host), std::move(memory));
}

}  // namespace zt
