// to_ini: the resolved configuration written back as an INI deck (every key and its value,
// loadable with --config), as ztrain stores it in the run directory and in checkpoints.
#include <sstream>

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
    for (const KeyDef& k : keys()) {
        const std::string sec = section_of(k.key);
        if (sec != section) {
            section = sec;
            if (!sec.empty()) {
                os << "\n[" << sec << "]\n";
            }
        }
        os << leaf_of(k.key) << " = " << format_value(k, cfg) << "\n";
    }
    return os.str();
}

}  // namespace zt
