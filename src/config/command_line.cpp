// The ztrain command line: --config FILE, --section.key=value overrides, the actions
// (--help, --version, --env, --plan), and `ztrain --help`'s text. Deliberately not done
// here: anything that touches the file system beyond reading the deck (shard globs, run
// directories, resume paths are checked by the components that use them), and anything
// needing MPI.
#include <algorithm>
#include <sstream>

#include "parsing.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace {

using namespace config_detail;

std::string strip_option_token(std::string token) {
    const auto eq = token.find('=');
    if (eq != std::string::npos) {
        token.resize(eq);
    }
    const auto first = token.find_first_not_of('-');
    return first == std::string::npos ? token : token.substr(first);
}

std::string help_text() {
    const Config defaults;
    std::ostringstream os;
    os << "Usage: mpirun -np N ztrain [--config FILE] [--section.key=VALUE ...]\n"
       << "       ztrain --help | --version | --env\n"
       << "       [mpirun -np N] ztrain --config FILE --force-unlock [--section.key=VALUE ...]\n"
       << "       [mpirun -np N] ztrain --plan [--plan-world-size=N] [--config FILE] [--section.key=VALUE ...]\n"
       << "       ztrain --config FILE --plan [--search [--all] [--write DECK]] [--plan-world-size=N | --cluster FILE]\n"
       << "       [mpirun -np N] ztrain --calibrate --cluster-out FILE\n\n"
       << "Trains a GPT-2 or Llama style model with data parallelism over MPI ranks.\n\n"
       << "Options:\n"
       << "  --config FILE   INI deck: '[section]' headers, then 'key = value' lines ('#' comments)\n"
       << "  --help, -h      print this help and exit\n"
       << "  --version       print the ztrain version and exit\n"
       << "  --env           print the build and machine environment and exit\n"
       << "  --plan          print each rank's predicted peak memory, tokens and FLOPs per step for\n"
       << "                  the deck, and exit without allocating or writing anything\n"
       << "                  and the time of a step on the cluster ([cluster] keys; ending 'predicted step: N ms')\n"
       << "  --plan-world-size=N  plan for N ranks (all on this node) instead of the job's own\n"
       << "  --cluster FILE  plan for the cluster a [cluster] file describes (its nodes x ranks_per_node)\n"
       << "  --search        with --plan: rank the meshes of the deck's global batch by predicted step time\n"
       << "                  (the ten fastest; --all: every candidate); --write DECK writes the fastest as a deck\n"
       << "  --calibrate     measure this machine (products, element-wise bandwidth, MPI collectives) and\n"
       << "                  write a cluster file to --cluster-out FILE (--backend=cuda: the GPUs, with\n"
       << "                  --cluster FILE of the GPU node for its data-sheet peaks)\n"
       << "  --force-unlock  take run.dir and checkpoint.dir although their lock file names a job on\n"
       << "                  another host (only when that job is gone: docs/reliability.md)\n\n"
       << "Every key below can be set in the deck or overridden on the command line as\n"
       << "--section.key=VALUE (or --section.key VALUE); the command line wins over the deck.\n"
       << "'backend' is a top-level key: put it before any [section] or pass --backend=VALUE.\n";
    std::string section = "\x01";  // never a real section, so the first key prints a header
    for (const KeyDef& k : keys()) {
        const std::string sec = section_of(k.key);
        if (sec != section) {
            section = sec;
            os << "\n" << (sec.empty() ? std::string("(top level)") : "[" + sec + "]") << "\n";
        }
        const std::string value = format_value(k, defaults);
        std::string left = str("  --", k.key, "=", type_name(k.field(const_cast<Config&>(defaults))));
        if (left.size() < 34) {
            left.resize(34, ' ');
        } else {
            left += ' ';
        }
        os << left << k.doc << " (default: " << (value.empty() ? "\"\"" : value) << ")\n";
    }
    return os.str();
}

/// The options `ztrain` takes: the actions, every key, and the positional words.
po::options_description command_line_options(const po::options_description& settings) {
    po::options_description actions("actions");
    actions.add_options()("config", po::value<std::string>(), "INI deck")("help,h", "help")(
        "version", "version")("env", "environment")("plan", "memory plan")(
        "plan-world-size", po::value<int>(), "ranks to plan for")("force-unlock", "break another host's lock")(
        "cluster", po::value<std::string>(), "cluster file")("search", "search the meshes")("all", "every candidate")(
        "write", po::value<std::string>(), "deck to write")("calibrate", "measure this machine")(
        "cluster-out", po::value<std::string>(), "cluster file to write");
    po::options_description hidden;
    hidden.add_options()("zt-positional", po::value<std::vector<std::string>>());

    po::options_description cli;
    cli.add(actions).add(settings).add(hidden);
    return cli;
}

/// Boost's reading of the arguments, its errors worded as exit-2 messages.
po::parsed_options tokenize_command_line(int argc, const char* const* argv, const po::options_description& cli) {
    // Positional words are collected (not rejected by Boost) so the message can quote them.
    po::positional_options_description positional;
    positional.add("zt-positional", -1);

    // Guessing is off: "--model.n_lay=3" silently meaning model.n_layer is a trap.
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    try {
        return po::command_line_parser(argc, const_cast<char**>(argv))
            .options(cli)
            .positional(positional)
            .style(style)
            .run();
    } catch (const po::unknown_option& e) {
        std::string token = e.get_option_name();
        token = token.substr(0, token.find('='));
        throw InputError(str("command line: unknown option '", token, "'", suggestion(strip_option_token(token), "--"),
                             "; see ztrain --help"));
    } catch (const po::invalid_command_line_syntax& e) {
        if (e.kind() == po::invalid_syntax::missing_parameter) {
            throw InputError(str("command line: ", e.get_option_name(), " needs a value (",
                                 e.get_option_name(), "=VALUE)"));
        }
        if (e.kind() == po::invalid_syntax::empty_adjacent_parameter) {
            throw InputError(str("command line: ", e.get_option_name(), "= has no value (to set an empty value, write ",
                                 e.get_option_name(), " \"\")"));
        }
        throw InputError(str("command line: ", e.what()));
    } catch (const po::error& e) {
        throw InputError(str("command line: ", e.what()));
    }
}

/// Stores the parsed command line in `vm`; rejects a key given twice and a positional word.
void store_command_line(const po::parsed_options& parsed_cli, po::variables_map& vm) {
    check_duplicates(parsed_cli, "command line", {});
    try {
        po::store(parsed_cli, vm);
    } catch (const po::error& e) {
        throw InputError(str("command line: ", e.what()));
    }
    if (vm.count("zt-positional")) {
        const auto& words = vm["zt-positional"].as<std::vector<std::string>>();
        throw InputError(str("command line: unexpected argument '", words.front(),
                             "' (settings are --section.key=VALUE, a deck is --config FILE; see ztrain --help)"));
    }
}

/// The keys the command line sets, in its order.
std::vector<std::string> command_line_keys(const po::parsed_options& parsed_cli) {
    std::vector<std::string> cli_keys;
    for (const po::option& opt : parsed_cli.options) {
        if (find_key(opt.string_key) != nullptr) {
            cli_keys.push_back(opt.string_key);
        }
    }
    return cli_keys;
}

/// --plan and its options (--plan-world-size, --cluster, --search, --all, --write), and
/// --calibrate --cluster-out: each option only with the action it belongs to.
void read_plan_options(const po::variables_map& vm, CliResult& result) {
    if (vm.count("plan") || vm.count("plan-world-size")) {
        result.action = CliAction::kPlan;
        if (vm.count("plan-world-size")) {
            result.plan_world_size = vm["plan-world-size"].as<int>();
            ZT_INPUT_CHECK(result.plan_world_size >= 1, "--plan-world-size = ", result.plan_world_size,
                           ": expected an integer >= 1");
        }
    }
    const bool cluster_keys = vm.count("cluster.nodes") > 0 || vm.count("cluster.ranks_per_node") > 0;
    result.plan_cluster = vm.count("cluster") > 0 || cluster_keys;
    ZT_INPUT_CHECK(!(vm.count("cluster") && vm.count("plan-world-size")),
                   "command line: --plan-world-size and --cluster are both given: with --cluster the world is "
                   "cluster.nodes x cluster.ranks_per_node; give one of them");
    ZT_INPUT_CHECK(!(cluster_keys && vm.count("plan-world-size")),
                   "command line: --plan-world-size and cluster.nodes / cluster.ranks_per_node are both given: the "
                   "cluster's world is nodes x ranks_per_node; give one of them");
    result.plan_search = vm.count("search") > 0;
    result.plan_all = vm.count("all") > 0;
    if (vm.count("write")) result.plan_write = vm["write"].as<std::string>();
    ZT_INPUT_CHECK(!result.plan_search || result.action == CliAction::kPlan, "command line: --search needs --plan");
    ZT_INPUT_CHECK(!(result.plan_all || vm.count("write")) || result.plan_search,
                   "command line: --all and --write need --plan --search");
    ZT_INPUT_CHECK(!vm.count("write") || !result.plan_write.empty(), "command line: --write needs a file name");
    if (vm.count("calibrate")) {
        ZT_INPUT_CHECK(result.action != CliAction::kPlan, "command line: --calibrate and --plan are both given");
        result.action = CliAction::kCalibrate;
        ZT_INPUT_CHECK(vm.count("cluster-out") && !vm["cluster-out"].as<std::string>().empty(),
                       "command line: --calibrate needs --cluster-out FILE (the cluster file it writes)");
        result.cluster_out = vm["cluster-out"].as<std::string>();
    }
    ZT_INPUT_CHECK(!vm.count("cluster-out") || vm.count("calibrate"), "command line: --cluster-out needs --calibrate");
}

/// Sets every key the command line or the deck gives. With `rejected`, a typed setting that
/// refuses its text is recorded there (validate_read reports it); without, it is thrown.
void assign_settings(Config& cfg, const po::variables_map& vm, RejectedSettings* rejected) {
    for (const KeyDef& k : keys()) {
        if (!vm.count(k.key)) {
            continue;
        }
        assign(cfg, k, vm[k.key].as<std::string>(),
               set_on_command_line(cfg, k.key) ? std::string("command line") : file_origin(cfg, k.key), rejected);
    }
}

}  // namespace

CliResult parse_command_line(int argc, const char* const* argv, FamilyRulesOf family_rules,
                             const HfConfigReader& read_hf) {
    CliResult result;
    const po::options_description settings = settings_description();
    const po::options_description cli = command_line_options(settings);
    const po::parsed_options parsed_cli = tokenize_command_line(argc, argv, cli);
    po::variables_map vm;
    store_command_line(parsed_cli, vm);
    if (vm.count("help")) {
        result.action = CliAction::kHelp;
        result.help_text = help_text();
        return result;
    }
    if (vm.count("version")) {
        result.action = CliAction::kVersion;
        return result;
    }

    Config& cfg = result.config;
    RejectedSettings rejected;
    cfg.cli_keys = command_line_keys(parsed_cli);

    // The command line was stored first, so Boost keeps its values over the cluster file's,
    // and those over the deck's.
    if (vm.count("cluster")) {
        cfg.cluster_file = vm["cluster"].as<std::string>();
        ZT_INPUT_CHECK(!cfg.cluster_file.empty(), "--cluster: needs a file name");
        for (const auto& [key, line] : store_cluster_file(cfg.cluster_file, settings, vm)) {
            if (!set_on_command_line(cfg, key)) cfg.cluster_file_lines[key] = line;
        }
    }
    if (vm.count("config")) {
        cfg.config_file = vm["config"].as<std::string>();
        ZT_INPUT_CHECK(!cfg.config_file.empty(), "--config: needs a file name");
        cfg.config_file_lines = store_deck(cfg.config_file, read_deck(cfg.config_file), settings, vm);
    }
    po::notify(vm);
    read_plan_options(vm, result);
    result.force_unlock = vm.count("force-unlock") > 0;

    // --env skips validate_read (below), so a value its type refuses is an error at once.
    assign_settings(cfg, vm, vm.count("env") ? nullptr : &rejected);
    if (!cfg.model.from_hf.empty()) apply_from_hf(cfg, vm, read_hf);
    // max_steps has a default, so only here is it known whether the deck or command line
    // gave it too: a run cannot be both a number of steps and a number of epochs long.
    if (vm.count("train.epochs") && vm.count("train.max_steps") && cfg.train.epochs > 0) {
        throw InputError(str("train.epochs = ", cfg.train.epochs, " and train.max_steps = ", cfg.train.max_steps,
                             " are both given (", set_on_command_line(cfg, "train.max_steps") ? "command line" : cfg.config_file,
                             "): give one of them"));
    }

    // --env reports the groups this deck and these settings would form, so it reads them,
    // but it runs nothing: no data.train needed.
    if (vm.count("env")) {
        result.action = CliAction::kEnv;
        return result;
    }
    // --calibrate measures the machine: it reads no deck.
    if (result.action == CliAction::kCalibrate) return result;
    validate_read(cfg, rejected, family_rules);
    return result;
}

}  // namespace zt
