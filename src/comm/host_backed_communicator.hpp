// Shared by the communicators whose collectives run on device buffers (NCCL, host-staged):
// they keep an MPI communicator for everything that lives in host memory (bootstrap bytes,
// scalars, barriers), express each blocking collective as its non-blocking form plus wait,
// and map their CommRequest handles to per-request state.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

/// Per-request state of started collectives, keyed by the CommRequest handle.
template <typename T>
class RequestTable {
  public:
    CommRequest add(T value) {
        const int64_t id = m_next_id++;
        m_items.emplace(id, std::move(value));
        return CommRequest(id);
    }
    T take(const CommRequest& request) {
        auto it = m_items.find(request.handle());
        ZT_REQUIRE(it != m_items.end(), "wait on unknown request ", request.handle());
        T value = std::move(it->second);
        m_items.erase(it);
        return value;
    }
    bool empty() const { return m_items.empty(); }
    /// Hands every pending entry to f and forgets it (teardown).
    template <typename F>
    void drain(F&& f) {
        for (auto& [id, value] : m_items) f(value);
        m_items.clear();
    }

  private:
    std::unordered_map<int64_t, T> m_items;
    int64_t m_next_id = 0;
};

class HostBackedCommunicator : public Communicator {
  protected:
    explicit HostBackedCommunicator(std::unique_ptr<Communicator> host)
        : Communicator(host->rank(), host->size(), host->local_rank(), host->local_size()),
          m_host(std::move(host)) {}

    Communicator& host_comm() { return *m_host; }
    /// Destroys the host communicator early, which completes its pending requests: done
    /// before freeing host buffers they may still write.
    void release_host_comm() { m_host.reset(); }

    void do_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) override {
        CommRequest r = do_start_all_reduce(buf, count, op, dt);
        do_wait(r);
    }
    void do_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op, DType dt) override {
        CommRequest r = do_start_reduce_scatter(in, out, count_per_rank, op, dt);
        do_wait(r);
    }
    void do_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) override {
        CommRequest r = do_start_all_gather(in, out, count_per_rank, dt);
        do_wait(r);
    }
    void do_broadcast_bytes(void* buf, size_t bytes, int root) override { m_host->broadcast_bytes(buf, bytes, root); }
    void do_all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) override {
        m_host->all_gather_bytes(in, out, bytes_per_rank);
    }
    void do_barrier() override { m_host->barrier(); }
    void do_all_reduce_scalars(double* values, size_t count, ReduceOp op) override {
        m_host->all_reduce_scalars(values, count, op);
    }

  private:
    std::unique_ptr<Communicator> m_host;
};

}  // namespace zt
