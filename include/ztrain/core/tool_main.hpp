// main() of the single-process tools (zt-prepare, zt-consolidate): runs the tool and turns
// what it throws into the contract's exit status, with one "NAME: error: ..." line on stderr.
#pragma once

#include <exception>
#include <iostream>

#include <boost/program_options/errors.hpp>

#include "ztrain/core/error.hpp"

namespace zt {

/// Returns run()'s status; 2 for bad input (InputError, a command-line error), 1 otherwise.
template <typename Run>
int run_tool(const char* name, Run&& run) {
    try {
        return run();
    } catch (const InputError& e) {
        std::cerr << name << ": error: " << e.what() << "\n";
        return kExitBadInput;
    } catch (const boost::program_options::error& e) {
        std::cerr << name << ": error: " << e.what() << " (see --help)\n";
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::cerr << name << ": error: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace zt
