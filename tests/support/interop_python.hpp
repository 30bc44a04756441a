// The unit tests that compare against the real Python libraries (transformers, PEFT) find the
// interop environment's Python here, and skip without it unless ZT_REQUIRE_INTEROP=1 makes its
// absence a failure, as tests/interop/run.sh does. Needs ZT_SOURCE_DIR (unit and MPI tests).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace zt::test {

/// ZT_INTEROP_VENV's python (else .venv at the source root) when it runs and can import
/// every module named, else "". find_spec, not import: importing torch costs seconds, the
/// test's script pays it once.
inline std::string interop_python(std::initializer_list<const char*> modules) {
    const char* venv = std::getenv("ZT_INTEROP_VENV");
    const std::string python = std::string(venv != nullptr ? venv : ZT_SOURCE_DIR "/.venv") + "/bin/python";
    std::string found = "True";
    for (const char* m : modules) found += std::string(" and u.find_spec(\"") + m + "\")";
    const std::string probe =
        python + " -c 'import importlib.util as u, sys; sys.exit(not (" + found + "))' > /dev/null 2>&1";
    return std::system(probe.c_str()) == 0 ? python : "";
}

/// Whether a missing interop environment fails the test instead of skipping it.
inline bool interop_required() {
    const char* v = std::getenv("ZT_REQUIRE_INTEROP");
    return v != nullptr && std::string(v) == "1";
}

}  // namespace zt::test

/// In a test body: fails (ZT_REQUIRE_INTEROP=1) or skips the test when `python` is empty.
#define ZT_SKIP_WITHOUT_INTEROP(python, why)                     \
    do {                                                         \
        if ((python).empty()) {                                  \
            if (::zt::test::interop_required()) FAIL() << (why); \
            GTEST_SKIP() << (why);                               \
        }                                                        \
    } while (0)
