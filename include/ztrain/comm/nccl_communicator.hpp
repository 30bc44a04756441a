// NCCL collectives on device buffers. Plain C++: no CUDA or NCCL header is needed to
// include this, so the selection code and the tests name it in every build.
//
// Streams: the collectives run in order on the communicator's own stream. A start_* call
// records an event on the compute stream and makes the communication stream wait for it
// (the collective sees every kernel enqueued before it), then enqueues the collective and
// returns at once, so compute enqueued afterwards overlaps the transfer. wait() makes the
// compute stream wait for the collective's completion event without blocking the host:
// compute enqueued after wait() sees the result. Blocking forms are start + wait, so they
// too are ordered on the streams rather than on the host; a host read of their results goes
// through the compute stream (e.g. the backend's to_host).
//
// The byte and scalar calls, the barrier and the NCCL id bootstrap go through the MPI
// communicator passed in, on host memory.
#pragma once

#include <memory>

#include "ztrain/comm/communicator.hpp"

namespace zt {

/// True when this build has the NCCL communicator (CUDA build with NCCL found).
bool nccl_built();

/// The NCCL communicator over the ranks of `host` (collective: every rank calls it).
/// Makes `device` current: the backend's, chosen from the rank's place in the whole job (a
/// sub-communicator's own local rank is not the node's); -1: local_device() of `host`'s
/// local rank. Creates the NCCL unique id on rank 0 and broadcasts it over `host`.
/// `compute_stream` is the backend's cudaStream_t (null: the legacy default stream). Throws
/// zt::Error when built without NCCL or when CUDA or NCCL fail (the message names the call,
/// file and line).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, void* compute_stream,
                                                     int device = -1);

}  // namespace zt
