// backend = cpu | cuda | auto: what each resolves to in this build on this machine.
#include <gtest/gtest.h>

#include <string>

#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/train/train_setup.hpp"

#if ZT_HAVE_CUDA
#include "ztrain/cuda_runtime/device.hpp"
#endif

namespace {

int visible_gpus() {
#if ZT_HAVE_CUDA
    return zt::cuda_device_count();
#else
    return 0;
#endif
}

TEST(BackendSelect, CpuIsAlwaysCpu) {
    std::string note = "stale";
    EXPECT_EQ(zt::resolve_backend("cpu", &note), "cpu");
    EXPECT_TRUE(note.empty());
}

TEST(BackendSelect, AutoFallsBackToCpu) {
    std::string note;
    EXPECT_EQ(zt::resolve_backend("auto", &note), "cpu");
    // A visible GPU that is not used is said out loud.
    EXPECT_EQ(note.empty(), visible_gpus() == 0) << note;
}

TEST(BackendSelect, CudaNeedsACudaBuildAndADevice) {
    if (ZT_HAVE_CUDA && visible_gpus() > 0) {
        EXPECT_EQ(zt::resolve_backend("cuda", nullptr), "cuda");
        return;
    }
    try {
        zt::resolve_backend("cuda", nullptr);
        FAIL() << "backend = cuda was accepted without a CUDA build and a device";
    } catch (const zt::InputError& e) {
        const std::string what = e.what();
        if (!ZT_HAVE_CUDA) {
            EXPECT_NE(what.find("no CUDA support"), std::string::npos) << what;
        } else {
            EXPECT_NE(what.find("no CUDA device"), std::string::npos) << what;
        }
    }
}

// What backend = cuda trains is decided from the config alone (no GPU needed to test it).
TEST(BackendSelect, CudaTrainsEveryDtypeAndNamesTheKeyItRefuses) {
    zt::Config cfg;
    EXPECT_NO_THROW(zt::check_cuda_training(cfg));  // defaults: fp32
    for (int stage = 0; stage <= 3; ++stage) {
        cfg.parallel.zero_stage = stage;
        EXPECT_NO_THROW(zt::check_cuda_training(cfg)) << "zero stage " << stage;
    }
    cfg.precision.reduce_dtype = zt::DType::kF32;
    EXPECT_NO_THROW(zt::check_cuda_training(cfg));
    auto refused_for = [](const zt::Config& c, const std::string& key) {
        try {
            zt::check_cuda_training(c);
            ADD_FAILURE() << key << " was accepted";
        } catch (const zt::InputError& e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    };
    // The GPU ops read and write 16-bit activations: bf16 and fp16 training and gradient
    // reduction are accepted (cuda_capabilities).
    for (const zt::DType dt : {zt::DType::kBF16, zt::DType::kF16}) {
        zt::Config c;
        c.precision.dtype = dt;
        EXPECT_NO_THROW(zt::check_cuda_training(c)) << zt::dtype_name(dt);
        zt::Config r;
        r.precision.dtype = dt;
        r.precision.reduce_dtype = dt;
        EXPECT_NO_THROW(zt::check_cuda_training(r)) << zt::dtype_name(dt);
    }
    // Imported weights go through the backend's copies (StateShards::write).
    zt::Config imp;
    imp.model.init_from = "gpt2.safetensors";
    EXPECT_NO_THROW(zt::check_cuda_training(imp));
    // A LoRA base stored in another dtype than the activations needs the CPU's products.
    zt::Config lora;
    lora.model.lora.rank = 4;
    lora.model.lora.base_dtype = zt::DType::kBF16;
    refused_for(lora, "lora.base_dtype");
}

TEST(BackendSelect, UnknownNameIsBadInput) {
    EXPECT_THROW(zt::resolve_backend("tpu", nullptr), zt::InputError);
}

}  // namespace
