// main() for the MPI test executables (run by ctest under mpiexec -np N).
//
// - Only rank 0 prints GoogleTest's normal output; other ranks print just their own failures,
//   prefixed with the rank, so a failure on any rank is visible and names the rank.
// - After each test the ranks agree on which of them failed; rank 0 lists them.
// - The exit code is the maximum over ranks, so any rank's failure fails the test.
// - A watchdog ends the process with exit code 124 when one test runs longer than
//   ZT_TEST_WATCHDOG_S seconds (default 60; the slowest test case takes ~1 s at np 4), naming
//   the test: a deadlocked collective fails within a minute instead of hanging ctest. The
//   trainer's own collective watchdog (parallel.timeout_s, 30 s in the test decks) names the
//   collective sooner.
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

// Per-test deadline, re-armed at each test's start (seconds on the steady clock).
std::atomic<long long> g_deadline{0};
std::atomic<const ::testing::TestInfo*> g_current{nullptr};

long long steady_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

class TestWatchdog : public ::testing::EmptyTestEventListener {
  public:
    explicit TestWatchdog(int limit_s) : m_limit_s(limit_s) {}
    void OnTestStart(const ::testing::TestInfo& info) override {
        g_current = &info;
        g_deadline = steady_seconds() + m_limit_s;
    }

  private:
    int m_limit_s;
};

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
    int thread_level = MPI_THREAD_SINGLE;  // as ztrain asks: async checkpoint writers call MPI
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    ::testing::InitGoogleTest(&argc, argv);

    const char* env = std::getenv("ZT_TEST_WATCHDOG_S");
    const int limit_s = env && std::atoi(env) > 0 ? std::atoi(env) : 60;
    g_deadline = steady_seconds() + limit_s;  // start-up and the first test
    std::thread([limit_s] {
        for (;;) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            if (steady_seconds() <= g_deadline.load()) continue;
            const ::testing::TestInfo* t = g_current.load();
            std::fprintf(stderr, "[rank %d] watchdog: %s%s%s still running after %d s (deadlock?); exiting 124\n",
                         g_rank, t ? t->test_suite_name() : "start-up", t ? "." : "", t ? t->name() : "", limit_s);
            std::fflush(stderr);
            _exit(124);
        }
    }).detach();

    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (g_rank != 0) delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
    listeners.Append(new TestWatchdog(limit_s));

    int code = RUN_ALL_TESTS();
    int worst = 0;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
