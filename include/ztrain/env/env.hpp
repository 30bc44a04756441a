// The build and machine environment, for `ztrain --env` and the head of every run log.
#pragma once

#include <string>

namespace zt {

/// Multi-line, human-readable report: ztrain version; MPI library, standard and world size;
/// HDF5 version and whether it is parallel; OpenBLAS build and threads; Boost; OpenMP
/// version (from _OPENMP) and threads; CPU model, hardware threads and memory; the CUDA
/// report in CUDA builds.
/// Needs MPI initialised for the world size (says so otherwise). Never throws on a
/// missing /proc file: it reports "unknown" instead.
std::string environment_report();

/// The OpenMP specification version ("4.5") whose _OPENMP value is `openmp_date` (yyyymm,
/// e.g. 201511); "unknown" for a value no specification prescribes.
std::string openmp_spec_version(long openmp_date);

/// Call before MPI_Init: Open MPI's blocking calls poll for their peer without sleeping, and
/// the communication thread's poll would take a core from the training threads it shares
/// the cores with (and a rank waiting in a blocking call from its peer). So unless the user
/// chose (OMPI_MCA_mpi_yield_when_idle set), the poll yields the core to runnable threads.
void prefer_mpi_yield_when_idle();
/// How MPI polls, for --env: "yields when idle" or "spins (...)".
std::string mpi_polling_description();

}  // namespace zt
