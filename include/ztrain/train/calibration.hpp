// `ztrain --calibrate --cluster-out FILE`: measures this machine and writes a cluster file
// (the [cluster] keys) the planner reads: matrix products at a few sizes and each working
// dtype, fitted to the product rate model (time_plan.hpp: peak x efficiency x F / (F + F_half));
// the element-wise bandwidth; and, under mpirun, all-reduces of a few sizes fitted to alpha-beta.
// Takes seconds. With backend = cuda it measures this node's GPUs (cuBLASLt products, NCCL
// all-reduces), keeping the peaks and memory of the GPU node's cluster file given with
// --cluster (the data sheet's). Deliberately not done: measuring another node (a one-node
// job cannot).
#pragma once

#include <string>

#include "ztrain/config/config.hpp"

namespace zt {

/// Measures and writes `path` (InputError when it cannot be written); returns what it wrote
/// as text for rank 0 to print. Every rank must call it.
std::string calibrate_cluster(const Config& cfg, const std::string& path);

}  // namespace zt
