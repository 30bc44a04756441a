// model.from_hf: the model keys a Hugging Face config.json determines, filled in under the
// keys the deck and command line give explicitly (which must agree with it). config/ cannot
// read config.json itself (that is ckpt/'s knowledge); the caller passes the reader in.
#include "parsing.hpp"
#include "ztrain/core/error.hpp"

namespace zt::config_detail {

void apply_from_hf(Config& cfg, const po::variables_map& vm, const HfConfigReader& read_hf) {
    const std::string origin =
        set_on_command_line(cfg, "model.from_hf") ? std::string("command line: ") : cfg.config_file + ": ";
    ZT_INPUT_CHECK(read_hf != nullptr, origin, "model.from_hf is not supported by this program");
    std::vector<HfSetting> settings = read_hf(cfg.model.from_hf);
    settings.push_back({"model.init_from", cfg.model.from_hf, "", true});
    const std::string file = cfg.model.from_hf + "/config.json";
    for (const HfSetting& s : settings) {
        const KeyDef* k = find_key(s.key);
        ZT_REQUIRE(k != nullptr, "from_hf: unknown key ", s.key);
        Config probe = cfg;
        assign(probe, *k, s.text, file);
        if (!vm.count(s.key)) {
            cfg = probe;
            continue;
        }
        // Given explicitly too: the same value, or (not binding) the explicit one wins.
        if (!s.binding || format_value(*k, probe) == format_value(*k, cfg)) continue;
        const std::string key_origin = set_on_command_line(cfg, s.key) ? std::string("command line") : cfg.config_file;
        throw InputError(str(key_origin, ": ", s.key, " = ", format_value(*k, cfg), ", but model.from_hf = ",
                             cfg.model.from_hf, " says ", format_value(*k, probe),
                             s.hf_field.empty() ? "" : str(" (", file, ": ", s.hf_field, ")"),
                             ": remove the key to take the model's value, or drop model.from_hf"));
    }
}

}  // namespace zt::config_detail
