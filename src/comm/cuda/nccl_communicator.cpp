// NCCL communicator: collectives on device buffers, on a stream of their own, ordered after
// compute with events (see include/ztrain/comm/nccl_communicator.hpp).
#include "ztrain/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>
#include <vector>

#include "../host_backed_communicator.hpp"
#include "ztrain/comm/device_memory.hpp"
#include "ztrain/cuda_runtime/cuda_check.hpp"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/cuda_runtime/stream.hpp"

namespace zt {
namespace detail {
inline bool nccl_ok(ncclResult_t r) { return r == ncclSuccess; }
inline std::string nccl_error_string(ncclResult_t r) {
    const char* last = ncclGetLastError(nullptr);
    return str(ncclGetErrorString(r), last != nullptr && *last != '\0' ? str(" (", last, ")") : std::string());
}
}  // namespace detail
}  // namespace zt

/// Checks an NCCL call (ncclSuccess), naming the call, file and line like ZT_CUDA_CHECK.
#define ZT_NCCL_CHECK(expr) ZT_CHECK_GEN(expr, ::zt::detail::nccl_ok, ::zt::detail::nccl_error_string, "NCCL")

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
    NcclCommunicator(std::unique_ptr<Communicator> host, void* compute_stream)
        : HostBackedCommunicator(std::move(host)), m_compute(static_cast<cudaStream_t>(compute_stream)) {
        select_local_device(local_rank());
        m_stream = create_stream();
        ZT_CUDA_CHECK(cudaEventCreateWithFlags(&m_compute_done, cudaEventDisableTiming));
        // Rank 0 sends its status with the id, so a failure there fails every rank instead
        // of leaving them waiting in ncclCommInitRank.
        struct {
            ncclUniqueId id;
            int ok;
        } boot{};
        if (rank() == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
        host_comm().broadcast_bytes(&boot, sizeof boot, 0);
        ZT_REQUIRE(boot.ok == 1, "NCCL: rank 0 could not create the unique id (ncclGetUniqueId)");
        ZT_NCCL_CHECK(ncclCommInitRank(&m_nccl, size(), boot.id, rank()));
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
        for (cudaEvent_t ev : m_free_events) cudaEventDestroy(ev);
        if (m_compute_done != nullptr) cudaEventDestroy(m_compute_done);
        if (m_stream != nullptr) cudaStreamDestroy(m_stream);
    }
    std::string name() const override { return "nccl"; }
    void abort_outstanding() noexcept override {
        // Unchecked (noexcept): ncclCommAbort ends this rank's NCCL kernels, so the streams
        // waiting on them drain; the destructor then finds no communicator left to destroy.
        if (m_nccl != nullptr) ncclCommAbort(m_nccl);
        m_nccl = nullptr;
    }

  protected:
    CommRequest do_start_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) override {
        after_compute();
        ZT_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(dt), nccl_op(op), m_nccl, m_stream));
        return done();
    }
    CommRequest do_start_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op,
                                        DType dt) override {
        after_compute();
        ZT_NCCL_CHECK(ncclReduceScatter(in, out, count_per_rank, nccl_type(dt), nccl_op(op), m_nccl, m_stream));
        return done();
    }
    CommRequest do_start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) override {
        // In place: NCCL's convention is sendbuff = recvbuff + rank * sendcount.
        const void* send = in != nullptr ? in
                                         : static_cast<const char*>(out) +
                                               count_per_rank * dtype_size(dt) * static_cast<size_t>(rank());
        after_compute();
        ZT_NCCL_CHECK(ncclAllGather(send, out, count_per_rank, nccl_type(dt), m_nccl, m_stream));
        return done();
    }
    void do_wait(CommRequest& request) override {
        cudaEvent_t ev = m_pending.take(request);
        m_free_events.push_back(ev);  // reusable at once: the wait below captured its state
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_compute, ev, 0));
    }
    void do_broadcast(void* buf, size_t bytes, int root) override {
        after_compute();
        ZT_NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, m_nccl, m_stream));
        CommRequest r = done();
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
    CommRequest done() {
        cudaEvent_t ev = nullptr;
        if (m_free_events.empty()) {
            ZT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        } else {
            ev = m_free_events.back();
            m_free_events.pop_back();
        }
        const cudaError_t recorded = cudaEventRecord(ev, m_stream);
        if (recorded != cudaSuccess) m_free_events.push_back(ev);
        ZT_CUDA_CHECK(recorded);
        return m_pending.add(ev);
    }

    cudaStream_t m_compute;
    cudaStream_t m_stream = nullptr;
    cudaEvent_t m_compute_done = nullptr;
    ncclComm_t m_nccl = nullptr;
    RequestTable<cudaEvent_t> m_pending;
    std::vector<cudaEvent_t> m_free_events;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, void* compute_stream) {
    ZT_REQUIRE(host != nullptr, "NCCL communicator needs an MPI communicator for its bootstrap");
    return std::make_unique<NcclCommunicator>(std::move(host), compute_stream);
}

}  // namespace zt
