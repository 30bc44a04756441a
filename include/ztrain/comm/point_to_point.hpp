// Point-to-point messages between the ranks of a group: a pipeline's stages passing
// activations forward and their gradients back (parallel/pipeline_runner.hpp). A send is
// started and completed later, so a stage computes while it sends; a receive returns once
// the bytes are there for the caller's next work.
//
// Two implementations:
// - MPI on host memory: MPI_Isend / MPI_Recv on the group's communicator, matched by tag.
// - NCCL on device memory: ncclSend / ncclRecv on a stream of their own, ordered with the
//   compute stream by events (a send waits for the kernels that wrote its buffer; the
//   kernels after a receive wait for it; the host does not block). NCCL has no tags: the
//   messages between two ranks match in the order they are issued, so a sender's order of
//   sends to a peer must be that peer's order of receives from it. The pipeline runner
//   issues them in schedule order; that the orders agree for every schedule is on the GPU
//   issue's list to verify, with the rest of this file's NCCL half.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

namespace zt {

/// A started send, completed by PointToPoint::wait (a default-constructed one is complete).
struct SendRequest {
    long id = -1;
    bool active() const { return id >= 0; }
};

class PointToPoint {
  public:
    virtual ~PointToPoint() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// The largest tag a message may carry.
    virtual int max_tag() const = 0;
    /// Starts sending `bytes` at `buf` to `peer`; `buf` must not be written until wait().
    virtual SendRequest start_send(const void* buf, size_t bytes, int peer, int tag) = 0;
    /// Receives `bytes` from `peer` into `buf`.
    virtual void recv(void* buf, size_t bytes, int peer, int tag) = 0;
    /// Completes a started send (no-op for a complete one) and resets the request.
    virtual void wait(SendRequest& request) = 0;
};

/// Over `comm`'s ranks, on host memory. `comm` is used as is (not duplicated): it must
/// outlive the result.
std::unique_ptr<PointToPoint> make_mpi_point_to_point(MPI_Comm comm);

/// True when this build has the NCCL implementation (CUDA build with NCCL found).
bool nccl_point_to_point_built();
/// Over `comm`'s ranks with NCCL, on device memory (collective: every rank calls it; the
/// NCCL id goes over `comm`). `compute_stream`: the backend's cudaStream_t (null: the legacy
/// default stream). Throws Error when built without NCCL, or naming the failed call.
std::unique_ptr<PointToPoint> make_nccl_point_to_point(MPI_Comm comm, void* compute_stream);

}  // namespace zt
