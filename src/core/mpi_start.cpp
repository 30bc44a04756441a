#include "ztrain/core/mpi_start.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace zt {

namespace {

// Plain storage: read by an atexit handler, which may run after static destructors.
char g_private_tmpdir[4096] = {};

void remove_private_tmpdir() {
    if (g_private_tmpdir[0] == '\0') return;
    std::error_code ignored;
    std::filesystem::remove_all(g_private_tmpdir, ignored);
}

bool started_by_a_launcher() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
        if (std::getenv(name) != nullptr) return true;
    }
    return false;
}

}  // namespace

void prefer_isolated_mpi_singleton() {
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
    if (started_by_a_launcher() || std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr) return;
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = (tmp != nullptr && tmp[0] != '\0') ? tmp : "/tmp";
    const std::string pattern = base + "/ztrain-mpi.XXXXXX";
    if (pattern.size() >= sizeof(g_private_tmpdir)) return;
    std::snprintf(g_private_tmpdir, sizeof(g_private_tmpdir), "%s", pattern.c_str());
    // Where no private directory can be made, Open MPI's shared one is still there.
    if (mkdtemp(g_private_tmpdir) == nullptr) {
        g_private_tmpdir[0] = '\0';
        return;
    }
    setenv("OMPI_MCA_orte_tmpdir_base", g_private_tmpdir, /*overwrite=*/1);
    std::atexit(remove_private_tmpdir);
}

}  // namespace zt
