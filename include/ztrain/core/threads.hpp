// The CPU threads a rank uses when not told: the node's cores shared by the ranks on it
// (train.threads, zt-prepare --threads).
#pragma once

#include <algorithm>
#include <thread>

namespace zt {

/// `asked` when positive, else the node's cores divided by the ranks on the node (at least 1).
inline int threads_per_rank(int asked, int ranks_on_node) {
    if (asked > 0) return asked;
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, ranks_on_node));
}

}  // namespace zt
