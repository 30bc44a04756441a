// Which GPU a node-local rank uses (include/ztrain/cuda_runtime/device.hpp). Pure
// arithmetic, in every build, so the choice is unit-tested without a GPU.
#include "ztrain/cuda_runtime/device.hpp"

#include "ztrain/core/error.hpp"

namespace zt {

int local_device(int local_rank, int device_count) {
    ZT_REQUIRE(device_count > 0 && local_rank >= 0, "local_device(", local_rank, ", ", device_count, ")");
    return local_rank % device_count;
}

}  // namespace zt
