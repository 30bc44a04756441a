// How much host memory Open MPI's blocking collectives allocate behind the caller's buffers:
// each rank's resident-set high-water mark (VmHWM) before and after three calls on a buffer of
// MB megabytes (fp32). Run by bench/mpi_temporaries.sh; docs/memory-plan.md quotes it.
//   mpiexec -np N mpi_temporaries {reduce_scatter|all_gather|all_reduce} MB
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {
double high_water_mb() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
    }
    return 0;
}
}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char* what = argc > 1 ? argv[1] : "reduce_scatter";
    const size_t total = static_cast<size_t>(argc > 2 ? std::atoi(argv[2]) : 64) * (1u << 20) / sizeof(float);
    const size_t part = total / static_cast<size_t>(size);
    // Every buffer is touched before the first reading, so only MPI's own memory adds after it.
    std::vector<float> in(total, 1.f), out(part, 0.f), full(part * static_cast<size_t>(size), 0.f);
    const double before = high_water_mb();
    for (int i = 0; i < 3; ++i) {
        if (std::strcmp(what, "reduce_scatter") == 0) {
            MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(part), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else if (std::strcmp(what, "all_gather") == 0) {
            MPI_Allgather(out.data(), static_cast<int>(part), MPI_FLOAT, full.data(), static_cast<int>(part), MPI_FLOAT,
                          MPI_COMM_WORLD);
        } else {
            MPI_Allreduce(MPI_IN_PLACE, in.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    const double added = high_water_mb() - before;
    std::vector<double> all(static_cast<size_t>(size));
    MPI_Gather(&added, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        std::printf("| %s | %d | %zu |", what, size, total * sizeof(float) >> 20);
        for (double a : all) std::printf(" %.1f", a);
        std::printf(" |\n");
    }
    MPI_Finalize();
    return 0;
}
