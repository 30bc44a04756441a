/* Just enough of mpi.h for src/core/error.cpp in the GPU-only check build (bench/gpu):
 * the device machine has no MPI, and that file only asks whether MPI is running (it is
 * not) and how to print an MPI error code. Never used by the real build. */
#pragma once

typedef int MPI_Comm;
#define MPI_COMM_WORLD 0
#define MPI_SUCCESS 0
#define MPI_MAX_ERROR_STRING 256

static inline int MPI_Initialized(int* flag) { *flag = 0; return MPI_SUCCESS; }
static inline int MPI_Finalized(int* flag) { *flag = 0; return MPI_SUCCESS; }
static inline int MPI_Comm_rank(MPI_Comm comm, int* rank) { (void)comm; *rank = 0; return MPI_SUCCESS; }
static inline int MPI_Error_string(int code, char* buf, int* len) { (void)code; (void)buf; *len = 0; return 1; }
