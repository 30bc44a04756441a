// Which backend runs: the `backend` config key (cpu | cuda | auto) against what this build
// and this machine offer. Compiled in every build; only the CUDA parts are conditional.
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/backend/forwarding_backend.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#if ZT_HAVE_CUDA
#include "ztrain/cuda_runtime/device.hpp"
#endif

namespace zt {

void* cuda_stream(Backend& b) {
    // A decorator (profiling, activation rounding) runs on the stream of the backend it wraps.
    if (auto* decorator = dynamic_cast<ForwardingBackend*>(&b)) return cuda_stream(decorator->inner());
    auto* cuda = dynamic_cast<CudaBackend*>(&b);
    return cuda != nullptr ? cuda->stream() : nullptr;
}

PlannedBackend planned_backend(const std::string& setting, int /*B*/, int T, int NH, int threads) {
    PlannedBackend p;
    if (setting == "cuda") {
        p.capabilities = cuda_capabilities();
        p.attention_scratch_floats = cuda_attention_scratch_floats(T, NH);
    } else {
        p.attention_scratch_floats = static_cast<double>(cpu_attention_scratch_floats(T, threads));
    }
    return p;
}

std::string resolve_backend(const std::string& requested, std::string* note) {
    if (note != nullptr) note->clear();
    if (requested == "cpu") return "cpu";
#if ZT_HAVE_CUDA
    const int devices = cuda_device_count();
#else
    const int devices = 0;
#endif
    if (requested == "auto") {
        // auto stays on the CPU until the GPU path has been validated on a GPU (its typed
        // ops are compared with the CPU's by tests/gpu, which skip without one).
        if (devices > 0 && note != nullptr) {
            *note = "backend = auto: a GPU is visible; training on the cpu backend (set backend = cuda to "
                    "train on the GPU in " + cuda_capabilities().work_dtypes() + ")";
        }
        return "cpu";
    }
    ZT_INPUT_CHECK(requested == "cuda", "backend = '", requested, "': expected cpu, cuda or auto");
    ZT_INPUT_CHECK(ZT_HAVE_CUDA, "backend = cuda: this build has no CUDA support (configure with -DZT_CUDA=ON "
                                 "on a machine with the CUDA toolkit), use backend = cpu or auto");
    ZT_INPUT_CHECK(devices > 0, "backend = cuda: no CUDA device is visible on this machine "
                                "(check the driver and CUDA_VISIBLE_DEVICES), use backend = cpu or auto");
    // Which configurations cuda trains is the trainer's check (check_cuda_training).
    return "cuda";
}

}  // namespace zt
