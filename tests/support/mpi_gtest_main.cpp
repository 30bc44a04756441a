// main() for the MPI test executables (run by ctest under mpiexec -np N).
//
// - Only rank 0 prints GoogleTest's normal output; other ranks print just their own failures,
//   prefixed with the rank, so a failure on any rank is visible and names the rank.
// - After each test the ranks agree on which of them failed; rank 0 lists them.
// - The exit code is the maximum over ranks, so any rank's failure fails the test.
// - A watchdog ends the process with exit code 124 after ZT_TEST_WATCHDOG_S seconds
//   (default 120): a deadlocked collective fails in seconds instead of hanging ctest.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_rank = 0;
int g_size = 1;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  public:
    void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (g_rank == 0 || !r.failed()) return;
        std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", g_rank, r.file_name() ? r.file_name() : "?",
                     r.line_number(), r.summary());
        std::fflush(stderr);
    }
    void OnTestEnd(const ::testing::TestInfo& info) override {
        int failed = info.result()->Failed() ? 1 : 0;
        std::vector<int> all(static_cast<size_t>(g_size));
        MPI_Gather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (g_rank != 0) return;
        std::string ranks;
        for (int r = 0; r < g_size; ++r) {
            if (all[static_cast<size_t>(r)]) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
        }
        if (!ranks.empty()) {
            std::printf("[  RANKS   ] %s.%s failed on rank(s) %s of %d\n", info.test_suite_name(), info.name(),
                        ranks.c_str(), g_size);
            std::fflush(stdout);
        }
    }
};

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    ::testing::InitGoogleTest(&argc, argv);

    const char* env = std::getenv("ZT_TEST_WATCHDOG_S");
    const int limit_s = env ? std::atoi(env) : 120;
    std::thread([limit_s] {
        std::this_thread::sleep_for(std::chrono::seconds(limit_s));
        std::fprintf(stderr, "[rank %d] watchdog: test still running after %d s (deadlock?); exiting 124\n", g_rank,
                     limit_s);
        std::fflush(stderr);
        _exit(124);
    }).detach();

    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (g_rank != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);

    int code = RUN_ALL_TESTS();
    int worst = 0;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
