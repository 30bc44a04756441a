// Stream creation (include/ztrain/cuda_runtime/stream.hpp).
#include "ztrain/cuda_runtime/stream.hpp"

#include "ztrain/cuda_runtime/cuda_check.hpp"

namespace zt {

cudaStream_t create_stream() {
    cudaStream_t stream = nullptr;
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
}

}  // namespace zt
