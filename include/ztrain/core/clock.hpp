// Wall-clock intervals: the step phases, checkpoint phases and run time all use one helper.
#pragma once

#include <chrono>

namespace zt {

/// Wall seconds since t0 (steady clock).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace zt
