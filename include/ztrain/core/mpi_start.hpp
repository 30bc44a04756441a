// Settings every executable makes before MPI_Init.
#pragma once

namespace zt {

/// A process started without a launcher (an Open MPI singleton: `ztrain --help`, a rejected
/// key, a one-rank run) starts no Open MPI daemon: ztrain never spawns processes, and without
/// the daemon MPI_Init takes about 0.2 s less. The user's own OMPI_MCA_ess_singleton_isolated
/// wins; under mpiexec or srun it does not apply.
///
/// Isolated singletons all name one session directory ($TMPDIR/ompi.HOST.UID/jf.0/1), and each
/// removes it at MPI_Finalize: one ending while another starts failed the other's MPI_Init
/// ("orte_session_dir failed", before any ztrain code ran). So a singleton gets a directory of
/// its own ($TMPDIR/ztrain-mpi.XXXXXX, removed at exit) unless OMPI_MCA_orte_tmpdir_base is set.
void prefer_isolated_mpi_singleton();

}  // namespace zt
