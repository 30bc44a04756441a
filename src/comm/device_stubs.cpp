// What the NCCL communicator and point-to-point messages (src/comm/cuda/) provide, for builds
// without NCCL: callers compile and link in every build and fail with a clear message at
// run time.
#include "ztrain/comm/nccl_communicator.hpp"
#include "ztrain/comm/point_to_point.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#ifndef ZT_HAVE_NCCL
#define ZT_HAVE_NCCL 0
#endif

namespace zt {

#if !ZT_HAVE_NCCL
bool nccl_built() { return false; }
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, void*, int) {
    throw Error("NCCL communicator: this build has no NCCL (CUDA build with nccl.h and libnccl)");
}
bool nccl_point_to_point_built() { return false; }
std::unique_ptr<PointToPoint> make_nccl_point_to_point(MPI_Comm, void*) {
    throw Error("NCCL point-to-point: this build has no NCCL (CUDA build with nccl.h and libnccl)");
}
#endif

}  // namespace zt
