// Formatting of check failures; the only place that includes mpi.h for error strings.
#include "ztrain/core/error.hpp"

#include <mpi.h>

namespace zt {

void throw_check_failure(const char* what, const char* call, const char* file, int line,
                         const std::string& detail) {
    int rank = -1;
    int initialized = 0;
    MPI_Initialized(&initialized);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    std::string msg = str(what, ": ", call, " at ", file, ":", line);
    if (rank >= 0) msg += str(" (rank ", rank, ")");
    if (!detail.empty()) msg += str(": ", detail);
    throw Error(msg);
}

namespace detail {
std::string mpi_error_string(int code) {
    char buf[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return str("MPI error ", code);
    return std::string(buf, static_cast<size_t>(len));
}
}  // namespace detail

}  // namespace zt
