// Settings every executable makes before MPI_Init.
#pragma once

#include <cstdlib>

namespace zt {

/// A process started without a launcher (an Open MPI singleton: `ztrain --help`, a rejected
/// key, a one-rank run) starts no Open MPI daemon: ztrain never spawns processes, and without
/// the daemon MPI_Init takes about 0.2 s less. The user's own OMPI_MCA_ess_singleton_isolated
/// wins; under mpiexec or srun it does not apply.
inline void prefer_isolated_mpi_singleton() { setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0); }

}  // namespace zt
