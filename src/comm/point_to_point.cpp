// Point-to-point messages over MPI on host memory (see include/ztrain/comm/point_to_point.hpp).
#include "ztrain/comm/point_to_point.hpp"

#include <climits>
#include <vector>

#include "ztrain/core/error.hpp"

namespace zt {
namespace {

class MpiPointToPoint final : public PointToPoint {
  public:
    explicit MpiPointToPoint(MPI_Comm comm) : m_comm(comm) {
        ZT_REQUIRE(comm != MPI_COMM_NULL, "point-to-point over MPI_COMM_NULL");
        ZT_MPI_CHECK(MPI_Comm_rank(comm, &m_rank));
        ZT_MPI_CHECK(MPI_Comm_size(comm, &m_size));
        int* tag_ub = nullptr;
        int found = 0;
        ZT_MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &found));
        m_max_tag = found ? *tag_ub : 32767;  // the standard's guaranteed minimum
    }
    int rank() const override { return m_rank; }
    int size() const override { return m_size; }
    int max_tag() const override { return m_max_tag; }

    SendRequest start_send(const void* buf, size_t bytes, int peer, int tag) override {
        long id = 0;
        if (!m_free.empty()) {
            id = m_free.back();
            m_free.pop_back();
        } else {
            id = static_cast<long>(m_requests.size());
            m_requests.push_back(MPI_REQUEST_NULL);
        }
        ZT_MPI_CHECK(MPI_Isend(buf, as_count(bytes), MPI_BYTE, peer, tag, m_comm, &m_requests[static_cast<size_t>(id)]));
        return SendRequest{id};
    }

    void recv(void* buf, size_t bytes, int peer, int tag) override {
        ZT_MPI_CHECK(MPI_Recv(buf, as_count(bytes), MPI_BYTE, peer, tag, m_comm, MPI_STATUS_IGNORE));
    }

    void wait(SendRequest& request) override {
        if (!request.active()) return;
        ZT_MPI_CHECK(MPI_Wait(&m_requests[static_cast<size_t>(request.id)], MPI_STATUS_IGNORE));
        m_free.push_back(request.id);
        request = SendRequest{};
    }

  private:
    static int as_count(size_t bytes) {
        ZT_REQUIRE(bytes <= static_cast<size_t>(INT_MAX), "a point-to-point message of ", bytes,
                   " bytes exceeds MPI's int count");
        return static_cast<int>(bytes);
    }

    MPI_Comm m_comm;
    int m_rank = 0;
    int m_size = 1;
    int m_max_tag = 32767;
    std::vector<MPI_Request> m_requests;  ///< by SendRequest::id
    std::vector<long> m_free;             ///< ids whose send completed
};

}  // namespace

std::unique_ptr<PointToPoint> make_mpi_point_to_point(MPI_Comm comm) { return std::make_unique<MpiPointToPoint>(comm); }

}  // namespace zt
