// Corpus preparation (prepare.hpp): the options, the input files, the choice between the
// text and JSON Lines runs, and the output folder's stale shards.
#include "ztrain/data/prepare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "prepare_detail.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

namespace detail {

std::string read_prepare_input(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw InputError(str("--input: cannot read '", path, "'"));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) {
        throw InputError(str("--input: read failed for '", path, "'"));
    }
    return ss.str();
}

bool is_binary(const std::string& content) { return content.find('\0') != std::string::npos; }


bool is_hf_tokenizer(const PrepareOptions& opt) { return opt.tokenizer != "byte" && opt.tokenizer != "gpt2"; }

void create_output_folder(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    ZT_INPUT_CHECK(!ec, "--output: cannot create '", dir, "' (", ec.message(), ")");
}

std::string shard_path(const std::string& dir, const std::string& prefix, size_t index) {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06zu.bin", prefix.c_str(), index);
    return (fs::path(dir) / name).string();
}

std::string describe_files(const std::vector<std::string>& files) {
    if (files.empty()) {
        return "no file";
    }
    if (files.size() == 1) {
        return files.front();
    }
    return str(files.front(), " .. ", files.back());
}

size_t finish_output(const PrepareOptions& opt, const Tokenizer& tok, const std::vector<std::string>& train_files,
                     const std::vector<std::string>& val_files) {
    std::set<std::string> written(train_files.begin(), train_files.end());
    written.insert(val_files.begin(), val_files.end());
    const size_t stale = remove_stale_shards(opt.output, written);
    tok.save(opt.output);
    return stale;
}

void print_stale_shards(std::ostream& out, size_t stale) {
    if (stale > 0) {
        out << "zt-prepare: removed " << stale << " stale shard(s) from an earlier run\n";
    }
}

void print_tokenizer_written(std::ostream& out, const PrepareOptions& opt) {
    out << "zt-prepare: wrote " << (fs::path(opt.output) / "tokenizer.json").string() << "\n";
}

}  // namespace detail

namespace {

/// The files of folder `input` to read (sorted), counting what is skipped.
std::vector<std::string> collect_folder(const std::string& input, SkippedInputs& skipped) {
    std::error_code ec;
    std::vector<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(input, ec)) {
        const fs::file_status link_st = entry.symlink_status(ec);
        if (fs::is_symlink(link_st)) {
            ++skipped.symlinks;
        } else if (!fs::is_regular_file(link_st)) {
            ++skipped.other;
        } else {
            found.push_back(entry.path().string());
        }
    }
    if (ec) {
        throw InputError(str("--input: cannot list '", input, "' (", ec.message(), ")"));
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> files;
    for (const std::string& f : found) {
        // Reading twice (here and when tokenizing) keeps memory at one file at a time.
        if (detail::is_binary(detail::read_prepare_input(f))) {
            ++skipped.binary;
            continue;
        }
        files.push_back(f);
    }
    if (files.empty()) {
        throw InputError(str("--input: folder '", input,
                             "' holds no text files (binary files, symlinks and subfolders are skipped)"));
    }
    return files;
}

bool ends_with_jsonl(const std::string& path) {
    const std::string ext = ".jsonl";
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

/// Whether the files are JSON Lines: --format says so, or (without --format) every file is
/// named *.jsonl. A mix without --format is an error: it is unclear what was meant.
bool is_jsonl_run(const PrepareOptions& opt, const std::vector<std::string>& files) {
    if (!opt.format.empty()) {
        return opt.format != "text";
    }
    const size_t jsonl = static_cast<size_t>(std::count_if(files.begin(), files.end(), ends_with_jsonl));
    ZT_INPUT_CHECK(jsonl == 0 || jsonl == files.size(), "--input: ", jsonl, " of ", files.size(),
                   " input files are named *.jsonl: give --format jsonl (all are JSON Lines) or "
                   "--format text (all are text documents)");
    return jsonl > 0;
}

/// The options that only the JSON Lines run reads.
void check_jsonl_options(const PrepareOptions& opt) {
    ZT_INPUT_CHECK(opt.format.empty() || opt.format == "text" || opt.format == "jsonl" ||
                       opt.format == "jsonl:text" || opt.format == "jsonl:prompt" || opt.format == "jsonl:chat",
                   "--format: '", opt.format, "' is not text, jsonl, jsonl:text, jsonl:prompt or jsonl:chat");
    if (!opt.chat_template.empty()) {
        parse_chat_template(opt.chat_template, "--chat-template");
    }
    ZT_INPUT_CHECK(opt.max_tokens >= 0, "--max-tokens: ", opt.max_tokens, " is negative (0: no limit)");
}

}  // namespace

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs, SkippedInputs& skipped) {
    std::vector<std::string> files;
    for (const std::string& input : inputs) {
        std::error_code ec;
        const fs::file_status st = fs::status(input, ec);
        if (!fs::exists(st)) {
            throw InputError(str("--input: '", input, "': no such file or directory"));
        }
        if (!fs::is_directory(st)) {
            files.push_back(input);
            continue;
        }
        const std::vector<std::string> found = collect_folder(input, skipped);
        files.insert(files.end(), found.begin(), found.end());
    }
    return files;
}

size_t validation_count(double val_fraction, size_t n) {
    if (val_fraction <= 0.0 || n < 2) {
        return 0;
    }
    const auto n_val = static_cast<size_t>(std::floor(val_fraction * static_cast<double>(n)));
    return std::clamp<size_t>(n_val, 1, n - 1);
}

/// (Hand-written rather than std::regex, whose libstdc++ code trips GCC 12's
/// maybe-uninitialized warning under the sanitizer build with -Werror.)
bool is_prepared_shard_name(const std::string& name) {
    for (const std::string prefix : {"train_", "val_"}) {
        if (name.size() == prefix.size() + 10 && name.compare(0, prefix.size(), prefix) == 0 &&
            name.compare(name.size() - 4, 4, ".bin") == 0 &&
            std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end() - 4,
                        [](char c) { return c >= '0' && c <= '9'; })) {
            return true;
        }
    }
    return false;
}

size_t remove_stale_shards(const std::string& dir, const std::set<std::string>& written) {
    size_t removed = 0;
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (is_prepared_shard_name(name) && written.count(entry.path().string()) == 0) {
            fs::remove(entry.path(), ec);
            ++removed;
        }
    }
    return removed;
}

void check_prepare_options(const PrepareOptions& opt) {
    ZT_INPUT_CHECK(!opt.inputs.empty(), "--input is required (text files or folders)");
    ZT_INPUT_CHECK(!opt.output.empty(), "--output is required (the folder for the shards)");
    if (detail::is_hf_tokenizer(opt)) {
        std::error_code ec;
        ZT_INPUT_CHECK(fs::is_regular_file(opt.tokenizer, ec), "--tokenizer: '", opt.tokenizer,
                       "' is not byte, gpt2 or an existing tokenizer.json file");
    }
    if (opt.tokenizer == "gpt2") {
        ZT_INPUT_CHECK(!opt.vocab.empty() && !opt.merges.empty(),
                       "--tokenizer gpt2 needs --vocab FILE and --merges FILE");
    } else {
        ZT_INPUT_CHECK(opt.vocab.empty() && opt.merges.empty(), "--vocab and --merges only apply to --tokenizer gpt2");
    }
    ZT_INPUT_CHECK(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0, "--val-fraction: ", opt.val_fraction,
                   " is outside [0, 1)");
    ZT_INPUT_CHECK(opt.shard_tokens >= 1 && opt.shard_tokens <= std::numeric_limits<int32_t>::max(),
                   "--shard-tokens: ", opt.shard_tokens, " is outside [1, ", std::numeric_limits<int32_t>::max(),
                   "] (the shard header stores an int32 count)");
    check_jsonl_options(opt);
    std::error_code ec;
    if (fs::exists(opt.output, ec) && !fs::is_directory(opt.output, ec)) {
        throw InputError(str("--output: '", opt.output, "' exists and is not a folder"));
    }
}

std::unique_ptr<Tokenizer> make_prepare_tokenizer(const PrepareOptions& opt) {
    return detail::is_hf_tokenizer(opt) ? make_hf_tokenizer(opt.tokenizer)
           : opt.tokenizer == "gpt2"    ? make_gpt2_tokenizer(opt.vocab, opt.merges)
                                        : make_byte_tokenizer();
}

void prepare_corpus(const PrepareOptions& opt, std::ostream& out, std::ostream& err) {
    check_prepare_options(opt);
    const std::unique_ptr<Tokenizer> tok = make_prepare_tokenizer(opt);
    SkippedInputs skipped;
    const std::vector<std::string> files = collect_input_files(opt.inputs, skipped);
    if (is_jsonl_run(opt, files)) {
        detail::prepare_examples(opt, *tok, files, out, err);
        return;
    }
    ZT_INPUT_CHECK(opt.chat_template.empty() && !opt.skip_bad && opt.max_tokens == 0,
                   "--chat-template, --skip-bad and --max-tokens apply to JSON Lines input only "
                   "(--format jsonl, or files named *.jsonl)");
    detail::prepare_documents(opt, *tok, files, skipped, out);
}

}  // namespace zt
