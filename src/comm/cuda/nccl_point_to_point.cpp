// Point-to-point messages over NCCL on device memory (see
// include/ztrain/comm/point_to_point.hpp): ncclSend / ncclRecv on a stream of their own,
// ordered after the compute stream's work with an event, and the compute stream made to wait
// for each receive (and, before it writes a sent buffer again, for the send: wait()). The
// host does not block. Tags are not sent: NCCL matches a pair's messages in issue order.
// A send issued alone holds its stream until the peer posts the receive, so two ranks that
// each send before receiving would wait for each other for ever: sends are queued and issued
// in one NCCL group with the next receive (or at wait(), or at teardown).
#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>
#include <vector>

#include "nccl_check.hpp"
#include "ztrain/comm/point_to_point.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/cuda_runtime/cuda_check.hpp"
#include "ztrain/cuda_runtime/stream.hpp"

namespace zt {
namespace {

class NcclPointToPoint final : public PointToPoint {
  public:
    NcclPointToPoint(MPI_Comm comm, void* compute_stream) : m_compute(static_cast<cudaStream_t>(compute_stream)) {
        ZT_REQUIRE(comm != MPI_COMM_NULL, "NCCL point-to-point over MPI_COMM_NULL");
        ZT_MPI_CHECK(MPI_Comm_rank(comm, &m_rank));
        ZT_MPI_CHECK(MPI_Comm_size(comm, &m_size));
        ZT_CUDA_CHECK(cudaGetDevice(&m_device));  // the backend's: it selected one per local rank
        m_stream = create_stream();
        ZT_CUDA_CHECK(cudaEventCreateWithFlags(&m_compute_done, cudaEventDisableTiming));
        m_nccl = detail::init_nccl_comm(m_rank, m_size, [&](void* buf, size_t bytes) {
            ZT_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, 0, comm));
        });
    }
    ~NcclPointToPoint() override {
        // Unchecked teardown (a destructor must not throw); while an exception unwinds the
        // peer may never post its side, so abort instead of waiting.
        if (std::uncaught_exceptions() > 0) {
            if (m_nccl != nullptr) ncclCommAbort(m_nccl);
        } else {
            if (m_nccl != nullptr && !m_queued.empty() && ncclGroupStart() == ncclSuccess) {
                for (const QueuedSend& q : m_queued) ncclSend(q.buf, q.bytes, ncclUint8, q.peer, m_nccl, m_stream);
                ncclGroupEnd();
            }
            cudaStreamSynchronize(m_stream);
            if (m_nccl != nullptr) ncclCommDestroy(m_nccl);
        }
        for (cudaEvent_t ev : m_events) cudaEventDestroy(ev);
        if (m_compute_done != nullptr) cudaEventDestroy(m_compute_done);
        if (m_stream != nullptr) cudaStreamDestroy(m_stream);
    }
    int rank() const override { return m_rank; }
    int size() const override { return m_size; }
    int max_tag() const override { return 1 << 30; }  // tags are not sent

    SendRequest start_send(const void* buf, size_t bytes, int peer, int /*tag*/) override {
        const long id = take_event();
        m_queued.push_back(QueuedSend{buf, bytes, peer, id});
        return SendRequest{id};
    }

    void recv(void* buf, size_t bytes, int peer, int /*tag*/) override {
        after_compute();
        ZT_NCCL_CHECK(ncclGroupStart());
        issue_queued();
        ZT_NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, m_nccl, m_stream));
        ZT_NCCL_CHECK(ncclGroupEnd());
        record_issued();
        // The compute stream's next kernels read the bytes: they wait for the receive.
        ZT_CUDA_CHECK(cudaEventRecord(m_compute_done, m_stream));
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_compute, m_compute_done, 0));
    }

    void wait(SendRequest& request) override {
        if (!request.active()) return;
        if (!m_queued.empty()) {
            after_compute();
            ZT_NCCL_CHECK(ncclGroupStart());
            issue_queued();
            ZT_NCCL_CHECK(ncclGroupEnd());
            record_issued();
        }
        // The compute stream writes the sent buffer next: it waits for the send to finish.
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_compute, m_events[static_cast<size_t>(request.id)], 0));
        m_free.push_back(request.id);
        request = SendRequest{};
    }

  private:
    struct QueuedSend {
        const void* buf;
        size_t bytes;
        int peer;
        long id;  ///< its SendRequest's event
    };
    /// Inside an NCCL group: the queued sends, in the order they were started.
    void issue_queued() {
        for (const QueuedSend& q : m_queued) ZT_NCCL_CHECK(ncclSend(q.buf, q.bytes, ncclUint8, q.peer, m_nccl, m_stream));
    }
    /// After the group: each issued send's event (the group's operations complete together).
    void record_issued() {
        for (const QueuedSend& q : m_queued) ZT_CUDA_CHECK(cudaEventRecord(m_events[static_cast<size_t>(q.id)], m_stream));
        m_queued.clear();
    }
    /// The communication stream waits for every kernel enqueued on the compute stream so far.
    void after_compute() {
        ZT_CUDA_CHECK(cudaEventRecord(m_compute_done, m_compute));
        ZT_CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_compute_done, 0));
    }
    long take_event() {
        if (!m_free.empty()) {
            const long id = m_free.back();
            m_free.pop_back();
            return id;
        }
        cudaEvent_t ev = nullptr;
        ZT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        m_events.push_back(ev);
        return static_cast<long>(m_events.size()) - 1;
    }

    int m_rank = 0;
    int m_size = 1;
    int m_device = 0;
    cudaStream_t m_compute = nullptr;
    cudaStream_t m_stream = nullptr;
    cudaEvent_t m_compute_done = nullptr;
    ncclComm_t m_nccl = nullptr;
    std::vector<cudaEvent_t> m_events;  ///< by SendRequest::id: each send's completion
    std::vector<long> m_free;           ///< ids whose send was waited for
    std::vector<QueuedSend> m_queued;   ///< started sends not yet issued
};

}  // namespace

bool nccl_point_to_point_built() { return true; }

std::unique_ptr<PointToPoint> make_nccl_point_to_point(MPI_Comm comm, void* compute_stream) {
    return std::make_unique<NcclPointToPoint>(comm, compute_stream);
}

}  // namespace zt
