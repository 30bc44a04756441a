// backend = cpu | cuda | auto: what each resolves to in this build on this machine.
#include <gtest/gtest.h>

#include <string>

#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#if ZT_HAVE_CUDA
#include "ztrain/backend/cuda_info.hpp"
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

TEST(BackendSelect, CudaIsBadInputUntilTheTrainingPathExists) {
    try {
        zt::resolve_backend("cuda", nullptr);
        FAIL() << "backend = cuda was accepted";
    } catch (const zt::InputError& e) {
        const std::string what = e.what();
        if (!ZT_HAVE_CUDA) {
            EXPECT_NE(what.find("no CUDA support"), std::string::npos) << what;
        } else if (visible_gpus() == 0) {
            EXPECT_NE(what.find("no CUDA device"), std::string::npos) << what;
        } else {
            EXPECT_NE(what.find("not integrated yet"), std::string::npos) << what;
        }
    }
}

TEST(BackendSelect, UnknownNameIsBadInput) {
    EXPECT_THROW(zt::resolve_backend("tpu", nullptr), zt::InputError);
}

}  // namespace
