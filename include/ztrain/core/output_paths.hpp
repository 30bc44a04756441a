// Where a tool may write: never over what it reads. A user who names an input as the output
// (the checkpoint's own meta.h5, the task file, a LoRA run's base directory) would otherwise
// get exit 0 and lose the input.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zt {

/// A path a tool reads, and how to name it in a message ("the checkpoint", "--tasks").
struct ReadPath {
    std::string what;
    std::string path;
};

/// Whether `a` and `b` name the same file or directory (symbolic links of their existing
/// parts followed; "dir/" is "dir").
bool same_path(const std::string& a, const std::string& b);

/// Throws InputError when `output` (named `flag` in the message) is one of `inputs` (the same
/// file or directory, symbolic links followed), or is a file that exists inside one of them
/// that is a directory (a checkpoint step's meta.h5; a new file beside an input is allowed). Inputs with
/// an empty path are skipped.
void refuse_output_over_inputs(const std::string& flag, const std::string& output, const std::vector<ReadPath>& inputs);

}  // namespace zt
