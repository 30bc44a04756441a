// to_ini: the resolved configuration written back as an INI deck (every key and its value,
// loadable with --config), as ztrain stores it in the run directory and in checkpoints.
#include <sstream>
#include <string>

#include "key_table.hpp"
#include "ztrain/config.hpp"

namespace zt {

using namespace config_detail;

std::string to_ini(const Config& cfg) {
    std::ostringstream os;
    os << "# ztrain " << ZT_VERSION << " resolved configuration";
    if (!cfg.config_file.empty()) {
        os << " from deck " << cfg.config_file;
    }
    if (!cfg.cli_keys.empty()) {
        os << "\n# command-line overrides:";
        for (const std::string& k : cfg.cli_keys) {
            os << " " << k;
        }
    }
    os << "\n# Reload with: ztrain --config THIS_FILE\n";
    std::string section = "\x01";
    const Config defaults;
    for (const KeyDef& k : keys()) {
        const std::string sec = section_of(k.key);
        // [cluster] describes the machines `ztrain --plan` plans for, not the run: written
        // only where it differs from this machine kind, so a reloaded run deck does not turn
        // --plan's world into cluster.nodes x cluster.ranks_per_node.
        if (sec == "cluster" && format_value(k, cfg) == format_value(k, defaults)) continue;
        if (sec != section) {
            section = sec;
            if (!sec.empty()) {
                os << "\n[" << sec << "]\n";
            }
        }
        // A run is train.epochs or train.max_steps long, never both (exit 2 when a deck gives
        // both): an epochs run's steps, computed from the examples, are written as a comment,
        // so the deck reloads.
        const bool computed_steps = std::string(k.key) == "train.max_steps" && cfg.train.epochs > 0;
        os << (computed_steps ? "# " : "") << leaf_of(k.key) << " = " << format_value(k, cfg)
           << (computed_steps ? "  (from train.epochs)" : "") << "\n";
    }
    return os.str();
}

}  // namespace zt
