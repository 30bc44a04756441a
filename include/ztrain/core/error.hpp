// Errors and checks used everywhere in ztrain.
//
// Two kinds of failure, matching the exit-status contract:
//  - InputError: the user gave something we reject (config, CLI, data, checkpoint) -> exit 2.
//  - Error:      anything else (I/O failure, library error, internal bug)            -> exit 1.
// Every library call is wrapped in a check macro that names the call, file and line, so
// a message from any rank says exactly what failed and where.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zt {

/// Exit codes of every ztrain executable (README, ztrain usage: "Exit status").
/// 3: replicas or state checksums disagree (silent data corruption suspected; parallel.check_every);
/// 4: train.spike_max_rollbacks loss-spike rollbacks were not enough.
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitBadInput = 2, kExitStateMismatch = 3, kExitTooManyRollbacks = 4 };

/// Concatenates any streamable values into one string: str("n_head=", 3).
template <typename... Args>
std::string str(Args&&... args) {
    std::ostringstream os;
    (os << ... << std::forward<Args>(args));
    return os.str();
}

/// A failure that is not the user's fault (exit status 1).
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A failure every rank detects at the same point, through values agreed by a collective
/// (e.g. a diverging run's non-finite gradients): rank 0 reports it once and every rank
/// exits 1 (or `exit_status`: 3, 4 for the long-run checks) through MPI_Finalize, with no
/// MPI_Abort and nothing left unwritten.
class AgreedError : public Error {
  public:
    explicit AgreedError(const std::string& what, int exit_status = kExitFailure)
        : Error(what), m_exit_status(exit_status) {}
    int exit_status() const { return m_exit_status; }

  private:
    int m_exit_status;
};

/// Bad input from the user: config, command line, data or checkpoint (exit status 2).
class InputError : public Error {
  public:
    explicit InputError(const std::string& what) : Error(what) {}
};

[[noreturn]] void throw_check_failure(const char* what, const char* call, const char* file, int line,
                                      const std::string& detail);

}  // namespace zt

/// Always-on internal invariant check: throws zt::Error naming the condition, file and line.
#define ZT_REQUIRE(cond, ...)                                                              \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            ::zt::throw_check_failure("requirement failed", #cond, __FILE__, __LINE__,     \
                                      ::zt::str(__VA_ARGS__));                             \
        }                                                                                  \
    } while (0)

/// Rejects user input: throws zt::InputError with the message as given (exit status 2).
#define ZT_INPUT_CHECK(cond, ...)                                 \
    do {                                                          \
        if (!(cond)) {                                            \
            throw ::zt::InputError(::zt::str(__VA_ARGS__));       \
        }                                                         \
    } while (0)

/// Generator for library-call checks: `ok` is a predicate on the returned status,
/// `to_str` turns the status into text.
#define ZT_CHECK_GEN(expr, ok, to_str, lib)                                                 \
    do {                                                                                    \
        auto zt_status_ = (expr);                                                           \
        if (!(ok(zt_status_))) {                                                            \
            ::zt::throw_check_failure(lib " call failed", #expr, __FILE__, __LINE__,        \
                                      to_str(zt_status_));                                  \
        }                                                                                   \
    } while (0)

namespace zt::detail {
std::string mpi_error_string(int code);
inline bool mpi_ok(int code) { return code == 0; }
}  // namespace zt::detail

/// Checks an MPI call (MPI_SUCCESS == 0).
#define ZT_MPI_CHECK(expr) ZT_CHECK_GEN(expr, ::zt::detail::mpi_ok, ::zt::detail::mpi_error_string, "MPI")
