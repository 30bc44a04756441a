// environment_report(): what ztrain was built with and what it runs on (`ztrain --env`).
//
// Every line comes from the library itself at run time (not from CMake's view at build
// time), so a mismatched shared library on a cluster node shows up here. Deliberately not
// here: anything per-rank beyond the calling rank's view (the caller gathers if it wants),
// and linking NCCL (the communicators own that; only the header version is read here).
//
// A component of its own, above core and the CUDA runtime helpers, because it reports on
// both: core stays free of any device code.
#include "ztrain/env/env.hpp"

#include "ztrain/backend/cpu_bf16.hpp"

#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#if ZT_HAVE_CUDA
#include "ztrain/cuda_runtime/device.hpp"
#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#endif
#endif
#endif

#include <boost/version.hpp>
#include <cblas.h>
#include <hdf5.h>
#include <mpi.h>
#include <omp.h>

#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

namespace zt {
namespace {

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    const auto e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// The value of the first "name : value" line in a /proc file, or "" when absent.
std::string proc_field(const char* path, const std::string& name) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        const auto colon = line.find(':');
        if (colon != std::string::npos && trim(line.substr(0, colon)) == name) {
            return trim(line.substr(colon + 1));
        }
    }
    return {};
}

std::string mpi_line() {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    std::string library = "unknown";
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        // Open MPI packs build details after the first comma / line; the first part names it.
        library = trim(std::string(lib, static_cast<size_t>(len)));
        const auto cut = library.find_first_of(",\n");
        if (cut != std::string::npos) {
            library = trim(library.substr(0, cut));
        }
    }
    int major = 0;
    int minor = 0;
    MPI_Get_version(&major, &minor);
    std::string out = str(library, " (MPI ", major, ".", minor, ")");

    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        int size = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        int provided = MPI_THREAD_SINGLE;
        MPI_Query_thread(&provided);
        // The progress engine (parallel.comm_thread) and background checkpoint writes call
        // MPI from a second thread.
        out += str(", world size ", size, ", thread level ",
                   provided >= MPI_THREAD_MULTIPLE ? "MULTIPLE (communication thread and async checkpoints available)"
                                                   : "below MULTIPLE (no communication thread, synchronous checkpoints)",
                   "; polling ", mpi_polling_description());
    } else {
        out += ", not initialised";
    }
    return out;
}

std::string hdf5_line() {
    unsigned major = 0;
    unsigned minor = 0;
    unsigned release = 0;
    if (H5get_libversion(&major, &minor, &release) < 0) {
        return "unknown";
    }
#ifdef H5_HAVE_PARALLEL
    const char* parallel = "parallel";
#else
    const char* parallel = "NOT parallel";
#endif
    return str(major, ".", minor, ".", release, " (", parallel, ")");
}

std::string blas_line() {
    const char* config = openblas_get_config();
    // The kernel name in the config string is OpenBLAS's choice for this CPU unless the
    // environment forced it: say which, since a forced older kernel can halve fp32 products.
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    return str(config != nullptr ? trim(config) : std::string("OpenBLAS (no config string)"), ", ",
               openblas_get_num_threads(), " threads",
               forced != nullptr && *forced != '\0' ? str("; kernels forced by OPENBLAS_CORETYPE = ", forced)
                                                    : std::string("; kernels chosen for this CPU"));
}

std::string openmp_line() {
    // _OPENMP is the compiler's: the spec version the build was compiled against.
#ifdef _OPENMP
    const long date = _OPENMP;
    return str(openmp_spec_version(date), " (_OPENMP ", date, "), ", omp_get_max_threads(), " max threads");
#else
    return str("not enabled at build time, ", omp_get_max_threads(), " max threads");
#endif
}

std::string memory_line() {
    // MemTotal is "16309780 kB".
    const std::string total = proc_field("/proc/meminfo", "MemTotal");
    std::istringstream in(total);
    double kib = 0;
    if (!(in >> kib) || kib <= 0) {
        return "unknown";
    }
    std::ostringstream os;
    os << std::fixed << std::setprecision(1) << kib / (1024.0 * 1024.0) << " GiB";
    return os.str();
}

std::string cuda_lines() {
#if ZT_HAVE_CUDA
    // The CUDA report is unindented multi-line text; align it under the other values.
    std::istringstream in(cuda_environment_report());
    std::string out;
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
        out += str(first ? "  CUDA:    " : "           ", line, "\n");
        first = false;
    }
#if defined(NCCL_MAJOR) && defined(NCCL_MINOR)
#if defined(NCCL_PATCH)
    out += str("  NCCL:    headers ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, "\n");
#else
    out += str("  NCCL:    headers ", NCCL_MAJOR, ".", NCCL_MINOR, "\n");
#endif
#else
    out += "  NCCL:    headers not found at build time\n";
#endif
    return out;
#else
    return "  CUDA:    not built (configure with -DZT_CUDA=ON on a machine with nvcc)\n";
#endif
}

}  // namespace

std::string openmp_spec_version(long openmp_date) {
    // The _OPENMP value each OpenMP specification prescribes (yyyymm of its release).
    static const struct {
        long date;
        const char* version;
    } kSpecs[] = {{199810, "1.0"}, {200203, "2.0"}, {200505, "2.5"}, {200805, "3.0"},
                  {201107, "3.1"}, {201307, "4.0"}, {201511, "4.5"}, {201811, "5.0"},
                  {202011, "5.1"}, {202111, "5.2"}, {202411, "6.0"}};
    for (const auto& s : kSpecs) {
        if (s.date == openmp_date) return s.version;
    }
    return "unknown";
}

std::string environment_report() {
    const std::string cpu = proc_field("/proc/cpuinfo", "model name");
    const unsigned cores = std::thread::hardware_concurrency();
    std::ostringstream os;
    os << "ztrain " << ZT_VERSION << "\n"
       << "  MPI:     " << mpi_line() << "\n"
       << "  HDF5:    " << hdf5_line() << "\n"
       << "  BLAS:    " << blas_line() << "\n"
       << "  oneDNN:  " << cpu_bf16_products_report() << "\n"
       << "  Boost:   " << BOOST_VERSION / 100000 << "." << BOOST_VERSION / 100 % 1000 << "."
       << BOOST_VERSION % 100 << "\n"
       << "  OpenMP:  " << openmp_line() << "\n"
       << "  CPU:     " << (cpu.empty() ? std::string("unknown") : cpu) << "\n"
       << "  cores:   " << (cores == 0 ? std::string("unknown") : std::to_string(cores))
       << " hardware threads\n"
       << "  memory:  " << memory_line() << "\n"
       << cuda_lines();
    return os.str();
}

namespace {
constexpr const char* kYieldVariable = "OMPI_MCA_mpi_yield_when_idle";
}  // namespace

void prefer_mpi_yield_when_idle() { setenv(kYieldVariable, "1", /*overwrite=*/0); }

std::string mpi_polling_description() {
    const char* v = std::getenv(kYieldVariable);
    if (v != nullptr && std::string(v) == "1") return "yields the core while waiting (mpi_yield_when_idle = 1)";
    return str("busy-polls while waiting (", kYieldVariable, " = ", v == nullptr ? "unset" : v, ")");
}

}  // namespace zt
