// Reading an INI deck: Boost.Program_options does the tokenising (INI sections, '#'
// comments) and the "first stored value wins" precedence; this file turns its errors into
// messages naming the file and line, and rejects a key given twice. Every key is registered
// as a string and converted by assign() (setting_values.cpp), strictly, because Boost's own
// conversion errors name neither the value nor its source well enough for an exit-2 message.
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "parsing.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace config_detail {

po::options_description settings_description() {
    po::options_description desc("settings");
    for (const KeyDef& k : keys()) {
        desc.add_options()(k.key, po::value<std::string>(), k.doc);
    }
    return desc;
}

namespace {

/// `s` without leading and trailing blanks and '\r'.
std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r");
    const auto e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// A deck line's content: the line without its '#' comment, trimmed.
std::string ini_content(const std::string& line) {
    const auto hash = line.find('#');
    return trim(hash == std::string::npos ? line : line.substr(0, hash));
}

/// `text` without a leading UTF-8 byte order mark (editors on Windows write one): Boost
/// would read it as part of the first line and refuse that line.
std::string without_bom(std::string text) {
    if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
    return text;
}

/// Line numbers of each key in an INI file, scanned the way Boost reads it (comments from
/// '#', [section] prefixes). Only used to make duplicate-key messages point at lines.
std::map<std::string, std::vector<int>> scan_key_lines(const std::string& text) {
    std::map<std::string, std::vector<int>> lines;
    std::istringstream in(text);
    std::string line;
    std::string prefix;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        line = ini_content(line);
        if (line.empty()) {
            continue;
        }
        if (line.front() == '[' && line.back() == ']') {
            prefix = trim(line.substr(1, line.size() - 2));
            prefix = prefix.empty() ? std::string() : prefix + ".";
            continue;
        }
        const auto eq = line.find('=');
        if (eq != std::string::npos) {
            lines[prefix + trim(line.substr(0, eq))].push_back(number);
        }
    }
    return lines;
}

}  // namespace

std::string read_deck(const std::string& path) {
    struct stat st {};
    const bool is_dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    std::ifstream in(path, std::ios::binary);
    ZT_INPUT_CHECK(in && !is_dir, "--config: cannot read '", path, "'",
                   (is_dir ? " (it is a directory)" : " (no such file, or no permission)"));
    std::ostringstream ss;
    ss << in.rdbuf();
    return without_bom(ss.str());
}

namespace {

/// "path:N" for the first line of `text` whose content (comment and blanks trimmed) is
/// `content`, or just "path" when none is (Boost's syntax errors name the line's text only).
std::string at_line(const std::string& path, const std::string& text, const std::string& content) {
    std::istringstream in(text);
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        const std::string found = ini_content(line);
        if (!found.empty() && found == content) return str(path, ":", number);
    }
    return path;
}

po::parsed_options parse_deck(const std::string& path, const std::string& text,
                              const po::options_description& desc) {
    std::istringstream in(text);
    try {
        return po::parse_config_file(in, desc, /*allow_unregistered=*/false);
    } catch (const po::unknown_option& e) {
        const std::string key = e.get_option_name();
        const auto lines = scan_key_lines(text);
        const auto it = lines.find(key);
        throw InputError(str(file_at_line(path, it != lines.end() ? it->second.front() : 0), ": unknown key '", key, "'", suggestion(key, "")));
    } catch (const po::invalid_config_file_syntax& e) {
        throw InputError(str(at_line(path, text, e.tokens()), ": cannot parse line '", e.tokens(),
                             "' (expected 'key = value', '[section]' or a '#' comment)"));
    } catch (const po::error& e) {
        throw InputError(str(path, ": ", e.what()));
    }
}

/// A deck value is taken as written: `dir = "runs/a"` would name a directory called `"runs`
/// (INI has no quoting), so a value wrapped in quotes is refused, naming the line.
void refuse_quoted_value(const std::string& where, const po::option& opt) {
    if (opt.value.empty()) return;
    const std::string& v = opt.value.front();
    const bool quoted = v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front();
    ZT_INPUT_CHECK(!quoted, where, ": ", opt.string_key, " = ", v,
                   ": a deck value is taken as written, quotes included (INI has no quoting); write it without them: ",
                   opt.string_key, " = ", v.substr(1, v.size() - 2));
}

}  // namespace

/// Rejects a key given twice in one source: Boost would keep one silently (or throw a
/// message without the file), and a deck that says two things is almost always a mistake.
void check_duplicates(const po::parsed_options& parsed, const std::string& origin,
                      const std::map<std::string, std::vector<int>>& lines) {
    std::set<std::string> seen;
    for (const po::option& opt : parsed.options) {
        if (opt.string_key.empty() || seen.insert(opt.string_key).second) {
            continue;
        }
        std::string where;
        const auto it = lines.find(opt.string_key);
        if (it != lines.end() && it->second.size() >= 2) {
            where = str(" (lines ", it->second[0], " and ", it->second[1], ")");
        }
        throw InputError(str(origin, ": key '", opt.string_key, "' is given more than once", where));
    }
}

/// Adds a deck's values to `vm` (values already there, e.g. the command line's, win).
std::map<std::string, int> store_deck(const std::string& origin, const std::string& text,
                                      const po::options_description& settings, po::variables_map& vm) {
    const po::parsed_options parsed_deck = parse_deck(origin, text, settings);
    const auto all_lines = scan_key_lines(text);
    check_duplicates(parsed_deck, origin, all_lines);
    std::map<std::string, int> lines;
    for (const po::option& opt : parsed_deck.options) {
        const auto it = all_lines.find(opt.string_key);
        const int line = it != all_lines.end() ? it->second.front() : 0;
        if (line > 0) lines[opt.string_key] = line;
        refuse_quoted_value(file_at_line(origin, line), opt);
    }
    try {
        po::store(parsed_deck, vm);
    } catch (const po::error& e) {
        throw InputError(str(origin, ": ", e.what()));
    }
    return lines;
}

std::map<std::string, int> store_cluster_file(const std::string& path, const po::options_description& settings,
                                              po::variables_map& vm) {
    std::ifstream in(path, std::ios::binary);
    ZT_INPUT_CHECK(in, "--cluster: cannot read '", path, "' (no such file, or no permission)");
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = without_bom(ss.str());
    const po::parsed_options parsed = parse_deck(path, text, settings);
    const auto lines = scan_key_lines(text);
    check_duplicates(parsed, path, lines);
    std::map<std::string, int> key_lines;
    for (const po::option& opt : parsed.options) {
        const auto it = lines.find(opt.string_key);
        const int line = it != lines.end() ? it->second.front() : 0;
        if (opt.string_key.rfind("cluster.", 0) != 0) {
            throw InputError(str(file_at_line(path, line), ": key '", opt.string_key,
                                 "' is not a [cluster] key (a cluster file describes machines only; "
                                 "the run's keys belong in the deck)"));
        }
        key_lines[opt.string_key] = line;
    }
    try {
        po::store(parsed, vm);
    } catch (const po::error& e) {
        throw InputError(str(path, ": ", e.what()));
    }
    return key_lines;
}

}  // namespace config_detail

using namespace config_detail;

Config parse_deck_text(const std::string& text, const std::string& origin) {
    po::variables_map vm;
    store_deck(origin, text, settings_description(), vm);
    Config cfg;
    for (const KeyDef& k : keys()) {
        if (vm.count(k.key)) {
            assign(cfg, k, vm[k.key].as<std::string>(), origin);
        }
    }
    return cfg;
}

}  // namespace zt
