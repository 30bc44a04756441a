// The build and machine environment, for `ztrain --env` and the head of every run log.
#pragma once

#include <string>

namespace zt {

/// Multi-line, human-readable report: ztrain version; MPI library, standard and world size;
/// HDF5 version and whether it is parallel; OpenBLAS build and threads; Boost; OpenMP
/// threads; CPU model, hardware threads and memory; the CUDA report in CUDA builds.
/// Needs MPI initialised for the world size (says so otherwise). Never throws on a
/// missing /proc file: it reports "unknown" instead.
std::string environment_report();

}  // namespace zt
