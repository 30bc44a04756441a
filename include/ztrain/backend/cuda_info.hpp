// Moved: the device queries (cuda_device_count, cuda_environment_report) are the CUDA
// runtime helpers' now, in ztrain/cuda_runtime/device.hpp. This header only forwards
// there, for src/train/trainer.cpp and tests/unit/test_backend_select.cpp, which other
// branches of the redesign own; delete it once they include the new header.
#pragma once

#include "ztrain/cuda_runtime/device.hpp"
