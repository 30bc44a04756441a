// NCCL communicator: collectives on device buffers, on a stream of their own, ordered after
// compute with events (see include/ztrain/comm/nccl_communicator.hpp).
#include "ztrain/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <deque>
#include <exception>
#include <mutex>
#include <vector>

#include "../host_backed_communicator.hpp"
#include "nccl_check.hpp"
#include "ztrain/memory/device_memory.hpp"
#include "ztrain/cuda_runtime/cuda_check.hpp"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/cuda_runtime/stream.hpp"

namespace zt {
namespace {

ncclDataType_t nccl_type(DType dt) {
    switch (dt) {
        case DType::kF32: return ncclFloat32;
        case DType::kBF16: return ncclBfloat16;
        case DType::kF16: return ncclFloat16;
    }
    throw Error("NCCL: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

class NcclCommunicator final : public HostBackedCommunicator {
  public:
    NcclCommunicator(std::unique_ptr<Communicator> host, void* compute_stream, int device)
        : HostBackedCommunicator(std::move(host)), m_compute(static_cast<cudaStream_t>(compute_stream)) {
        if (device >= 0) {
            cuda_set_device(device);
            m_device = device;
        } else {
            m_device = select_local_device(local_rank());
        }
        m_stream = create_stream();
        ZT_CUDA_CHECK(cudaEventCreateWithFlags(&m_compute_done, cudaEventDisableTiming));
        m_nccl = detail::init_nccl_comm(rank(), size(),
                                        [&](void* buf, size_t bytes) { host_comm().broadcast_bytes(buf, bytes, 0); });
    }
    ~NcclCommunicator() override {
        // Unchecked teardown: a destructor must not throw. While an exception unwinds, the
        // other ranks may never join the outstanding collectives, so abort instead of
        // waiting for them.
        if (std::uncaught_exceptions() > 0) {
            if (m_nccl != nullptr) ncclCommAbort(m_nccl);
        } else {
            cudaStreamSynchronize(m_stream);
            if (m_nccl != nullptr) ncclCommDestroy(m_nccl);
        }
        m_pending.drain([this](cudaEvent_t ev) { m_free_events.push_back(ev); });
        for (const InFlight& f : m_in_flight) cudaEventDestroy(f.done);
        for (cudaEvent_t ev : m_free_watch_events) cudaEventDestroy(ev);
        for (cudaEvent_t ev : m_free_events) cudaEventDestroy(ev);
        if (m_compute_done != nullptr) cudaEventDestroy(m_compute_done);
        if (m_stream != nullptr) cudaStreamDestroy(m_stream);
    }
    std::string name() const override { return "nccl"; }
    std::string device_stall(double timeout_s) noexcept override {
        // Runs on the watchdog's thread, which has its own current device.
        if (cudaSetDevice(m_device) != cudaSuccess) return {};
        ncclResult_t async = ncclSuccess;
        if (m_nccl != nullptr && ncclCommGetAsyncError(m_nccl, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
            return str("NCCL reports an asynchronous error (", ncclGetErrorString(async), ")");
        }
        std::lock_guard<std::mutex> lock(m_watch_mutex);
        // One stream: collectives finish in the order enqueued, so the oldest one decides.
        while (!m_in_flight.empty()) {
            const InFlight& oldest = m_in_flight.front();
            const cudaError_t state = cudaEventQuery(oldest.done);
            if (state == cudaSuccess) {
                m_free_watch_events.push_back(oldest.done);
                m_in_flight.pop_front();
                continue;
            }
            if (state != cudaErrorNotReady) {
                return str("collective ", oldest.collective, " failed on the GPU (", cudaGetErrorString(state), ")");
            }
            const double waited = static_cast<double>(steady_ns() - oldest.enqueued_ns) * 1e-9;
            if (waited < timeout_s) break;
            return str("collective ", oldest.collective, " has not finished on the GPU ",
                       static_cast<long>(waited), " s after it was enqueued");
        }
        return {};
    }
    void end_outstanding(double /*timeout_s*/) noexcept override {
        // Unchecked (noexcept): ncclCommAbort ends this rank's NCCL kernels, so the streams
        // waiting on them drain; the destructor then finds no communicator left to destroy.
        if (m_nccl != nullptr) ncclCommAbort(m_nccl);
        m_nccl = nullptr;
    }

  protected:
    CommRequest do_start_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) override {
        after_compute();
        ZT_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(dt), nccl_op(op), m_nccl, m_stream));
        return done("all_reduce");
    }
    CommRequest do_start_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op,
                                        DType dt) override {
        after_compute();
        ZT_NCCL_CHECK(ncclReduceScatter(in, out, count_per_rank, nccl_type(dt), nccl_op(op), m_nccl, m_stream));
        return done("reduce_scatter");
    }
    CommRequest do_start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) override {
        // In place: NCCL's convention is sendbuff = recvbuff + rank * sendcount.
        const void* send = in != nullptr ? in
                                         : static_cast<const char*>(out) +
                                               count_per_rank * dtype_size(dt) * static_cast<size_t>(rank());
        after_compute();
        ZT_NCCL_CHECK(ncclAllGather(send, out, count_per_rank, nccl_type(dt), m_nccl, m_stream));
        return done("all_gather");
    }
    void do_wait(CommRequest& request) override {
        cudaEvent_t ev = m_pending.take(request);
        m_free_events.push_back(ev);  // reusable at once: the wait below captured its state
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_compute, ev, 0));
    }
    void do_broadcast(void* buf, size_t bytes, int root) override {
        after_compute();
        ZT_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, m_nccl, m_stream));
        CommRequest r = done("broadcast");
        do_wait(r);
    }
    void copy_local(const void* in, void* out, size_t bytes) override {
        ZT_CUDA_CHECK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, m_compute));
    }

  private:
    /// The communication stream waits for everything the compute stream holds now.
    void after_compute() {
        ZT_CUDA_CHECK(cudaEventRecord(m_compute_done, m_compute));
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_compute_done, 0));
    }
    /// A request whose completion is an event recorded after the collective just enqueued.
    CommRequest done(const char* collective) {
        watch(collective);
        return m_pending.add(record_on_stream(m_free_events));
    }
    /// An event from `pool` (or a new one) recorded on m_stream; back in the pool on failure.
    cudaEvent_t record_on_stream(std::vector<cudaEvent_t>& pool) {
        cudaEvent_t ev = nullptr;
        if (pool.empty()) {
            ZT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        } else {
            ev = pool.back();
            pool.pop_back();
        }
        const cudaError_t recorded = cudaEventRecord(ev, m_stream);
        if (recorded != cudaSuccess) pool.push_back(ev);
        ZT_CUDA_CHECK(recorded);
        return ev;
    }

    static int64_t steady_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }
    /// Records a second event for the watchdog (device_stall): the request's own event is
    /// reused once waited on, while the GPU may still be running the collective.
    void watch(const char* collective) {
        std::lock_guard<std::mutex> lock(m_watch_mutex);
        // Reclaim what finished here too: without a watchdog thread nothing else would.
        while (!m_in_flight.empty() && cudaEventQuery(m_in_flight.front().done) == cudaSuccess) {
            m_free_watch_events.push_back(m_in_flight.front().done);
            m_in_flight.pop_front();
        }
        m_in_flight.push_back({record_on_stream(m_free_watch_events), collective, steady_ns()});
    }

    /// A collective enqueued on m_stream, as the watchdog sees it.
    struct InFlight {
        cudaEvent_t done;
        const char* collective;
        int64_t enqueued_ns;
    };

    cudaStream_t m_compute;
    int m_device = 0;
    cudaStream_t m_stream = nullptr;
    cudaEvent_t m_compute_done = nullptr;
    ncclComm_t m_nccl = nullptr;
    RequestTable<cudaEvent_t> m_pending;
    std::vector<cudaEvent_t> m_free_events;
    std::mutex m_watch_mutex;  ///< guards the two below, shared with the watchdog's thread
    std::deque<InFlight> m_in_flight;
    std::vector<cudaEvent_t> m_free_watch_events;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, void* compute_stream,
                                                     int device) {
    ZT_REQUIRE(host != nullptr, "NCCL communicator needs an MPI communicator for its bootstrap");
    return std::make_unique<NcclCommunicator>(std::move(host), compute_stream, device);
}

}  // namespace zt
