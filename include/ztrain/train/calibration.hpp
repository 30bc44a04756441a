// `ztrain --calibrate --cluster-out FILE`: measures this machine and writes a cluster file
// (the [cluster] keys) the planner reads: matrix products at a few sizes and each working
// dtype, fitted to the product rate model (time_plan.hpp: peak x efficiency x F / (F + F_half));
// the element-wise bandwidth; and, under mpirun, all-reduces of a few sizes fitted to alpha-beta.
// Takes seconds. Deliberately not done: measuring another node (a one-node job cannot), or
// the GPU (the device is only named; its figures come from its data sheet's file).
#pragma once

#include <string>

namespace zt {

/// Measures and writes `path` (InputError when it cannot be written); returns what it wrote
/// as text for rank 0 to print. Every rank must call it.
std::string calibrate_cluster(const std::string& path);

}  // namespace zt
