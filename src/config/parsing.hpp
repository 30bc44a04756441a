// The steps parse_command_line (command_line.cpp) takes from the other files of the config
// component: reading a deck (ini_parser.cpp), model.from_hf (hf_settings.cpp) and the checks
// (validate.cpp). Private to src/config/.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "key_table.hpp"

namespace zt::config_detail {

namespace po = boost::program_options;

// ---------------------------------------------------------------------------
// Reading a deck (ini_parser.cpp)
// ---------------------------------------------------------------------------

/// Every key as a string-valued Boost option.
po::options_description settings_description();
/// The deck file's text; InputError naming `path` when it cannot be read.
std::string read_deck(const std::string& path);
/// Rejects a key given twice in one source (`lines`: where each key stands, for the message).
void check_duplicates(const po::parsed_options& parsed, const std::string& origin,
                      const std::map<std::string, std::vector<int>>& lines);
/// Adds a deck's values to `vm` (values already there, e.g. the command line's, win) and
/// returns the line of each key the deck gives (messages name it). InputError naming the
/// line for a value wrapped in quotes (taken as written, it would name another path).
std::map<std::string, int> store_deck(const std::string& origin, const std::string& text,
                                      const po::options_description& settings, po::variables_map& vm);

/// Adds a cluster file's values to `vm` (the command line's win; they win over the deck's
/// when stored before it) and returns the line of each key it gives; InputError naming the
/// file and line for a key outside [cluster].
std::map<std::string, int> store_cluster_file(const std::string& path, const po::options_description& settings,
                                            po::variables_map& vm);

// ---------------------------------------------------------------------------
// The other steps of parse_command_line
// ---------------------------------------------------------------------------

/// model.from_hf: config.json's model keys under the explicit ones (hf_settings.cpp).
void apply_from_hf(Config& cfg, const po::variables_map& vm, const HfConfigReader& read_hf);

/// validate_deck(), plus the typed settings refused as the deck and command line were read,
/// each reported where its check stood when these settings were strings (validate.cpp).
void validate_read(const Config& cfg, const RejectedSettings& rejected, FamilyRulesOf family_rules);
/// The model keys' checks of validate_read alone (validate_model_keys).
void validate_model_read(const Config& cfg, FamilyRulesOf family_rules);

}  // namespace zt::config_detail
