// The config component's private declarations: the key table (key_table.cpp) and the
// values' text <-> typed value conversions (setting_values.cpp). Not part of the public API
// (include/ztrain/config/config.hpp); parsing.hpp declares the parsing steps.
//
// One table (keys()) names every key, where it lives in Config, and what it means. Defaults
// are not repeated in it: they are read from a default-constructed Config, so the struct in
// config.hpp stays the single source of defaults.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ztrain/config/config.hpp"

namespace zt::config_detail {

// ---------------------------------------------------------------------------
// The key table (key_table.cpp)
// ---------------------------------------------------------------------------

// Typed settings (DType, the enums, resume, loss scale) are read from and written as text
// by parse_setting / setting_text (setting_values.cpp); to --help they are strings ("STR").
using FieldRef = std::variant<int*, double*, std::string*, bool*, uint64_t*, DType*, std::optional<DType>*,
                              BackendChoice*, LrSchedule*, DecayShape*, OptimizerKind*, MuonLrAdjust*, ResumeSetting*, OnCheckpointError*, LossScaleSetting*,
                              MemoryCheck*, OnInputChange*, ModelArch*, RopeScaling*, ShardGroupSetting*,
                              DataPacking*, DataOverlong*, PipelineSchedule*, SpikePolicy*, ActivationRecompute*>;

struct KeyDef {
    const char* key;               ///< "section.key", or a bare top-level key
    FieldRef (*field)(Config&);    ///< where the value lives in a Config
    const char* doc;               ///< one line for --help and the dumped deck
};

/// Every key, in the order --help and to_ini list them.
struct KeyRange {
    const KeyDef* first;
    const KeyDef* last;
    const KeyDef* begin() const { return first; }
    const KeyDef* end() const { return last; }
};
KeyRange keys();

/// The key's entry, or nullptr.
const KeyDef* find_key(const std::string& key);
/// "model" for "model.n_layer", "" for a top-level key.
std::string section_of(const std::string& key);
/// "n_layer" for "model.n_layer", the key itself for a top-level key.
std::string leaf_of(const std::string& key);
/// Whether `key` was set on the command line (cfg.cli_keys).
bool set_on_command_line(const Config& cfg, const std::string& key);
/// "path:line", or "path" where the line is not known (0).
std::string file_at_line(const std::string& path, int line);
/// "cluster.ini:3" where the cluster file gives `key`, else "deck.ini:12" where the deck
/// does, else the deck's name (the file to edit).
std::string file_origin(const Config& cfg, const std::string& key);
/// " (did you mean '<prefix>key'?)" for the registered key nearest `unknown`, or "".
std::string suggestion(const std::string& unknown, const char* prefix);

// ---------------------------------------------------------------------------
// Values <-> text (setting_values.cpp)
// ---------------------------------------------------------------------------

/// Shortest text that reads back to the same double (whole numbers without exponent).
std::string format_double(double v);
/// The key's value in `cfg` as a deck writes it.
std::string format_value(const KeyDef& k, const Config& cfg);
/// "INT", "NUM", "STR", "BOOL" or "UINT": the value's kind in --help.
const char* type_name(const FieldRef& ref);
/// Whether a key's value is text in a deck (quoted in messages, checked for '#').
bool is_text(const FieldRef& ref);
/// A fixed precision.loss_scale is finite and > 0.
bool fixed_loss_scale_ok(double v);

/// A typed setting's text that its parser refused, and what it expected instead.
struct RejectedText {
    std::string text;
    std::string expected;
};
/// Keyed by the key. parse_command_line reports these where validate() reported them when
/// they were strings, so a deck with several bad values names the same one first as before.
using RejectedSettings = std::map<std::string, RejectedText>;

/// Sets one key from its text; `origin` is the deck file name or "command line". A typed
/// setting that refuses its text is recorded in `*rejected` when given, else thrown.
void assign(Config& cfg, const KeyDef& k, const std::string& text, const std::string& origin,
            RejectedSettings* rejected = nullptr);

}  // namespace zt::config_detail
