// Corpus preparation (prepare.hpp): the options, the input files, the choice between the
// text and JSON Lines runs, the work folder (resume), the run's phases across ranks, and
// moving the result into the output folder.
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
#include "ztrain/core/output_paths.hpp"

namespace fs = std::filesystem;

namespace zt {

namespace detail {

bool is_binary(std::string_view content) { return content.find('\0') != std::string_view::npos; }

bool is_hf_tokenizer(const PrepareOptions& opt) { return opt.tokenizer != "byte" && opt.tokenizer != "gpt2"; }

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

PartSummary total_of(const std::vector<PartSummary>& parts) {
    PartSummary t;
    for (const PartSummary& p : parts) {
        for (int s = 0; s < 2; ++s) {
            t.records[s] += p.records[s];
            t.tokens[s] += p.tokens[s];
            t.targets[s] += p.targets[s];
        }
        t.blank += p.blank;
        t.lines += p.lines;
        for (int l = 0; l < 4; ++l) t.by_layout[l] += p.by_layout[l];
        t.bad_count += p.bad_count;
    }
    return t;
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

/// Whether a file's first 64 KiB (decompressed) hold a NUL byte.
bool starts_binary(const std::string& path) {
    detail::InputReader in(path, 0);
    std::string head(64 << 10, '\0');
    size_t n = 0;
    while (n < head.size()) {
        const size_t got = in.read(head.data() + n, head.size() - n);
        if (got == 0) break;
        n += got;
    }
    return detail::is_binary(std::string_view(head).substr(0, n));
}

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
        if (starts_binary(f)) {
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

bool ends_with(const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

/// Named *.jsonl, *.jsonl.gz or *.jsonl.zst.
bool ends_with_jsonl(const std::string& path) {
    return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz") || ends_with(path, ".jsonl.zst");
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
    ZT_INPUT_CHECK(opt.threads >= 0, "--threads: ", opt.threads, " is negative (0: cores / ranks on the node)");
    ZT_INPUT_CHECK(opt.part_bytes >= 1 && opt.batch_bytes >= 1, "part and batch sizes must be positive: ",
                   opt.part_bytes, ", ", opt.batch_bytes);
}

}  // namespace

/// Whether the files are JSON Lines: --format says so, or (without --format) every file is
/// named *.jsonl. A mix without --format is an error: it is unclear what was meant.
bool detail::is_jsonl_run(const PrepareOptions& opt, const std::vector<std::string>& files) {
    if (!opt.format.empty()) {
        return opt.format != "text";
    }
    const size_t jsonl = static_cast<size_t>(std::count_if(files.begin(), files.end(), ends_with_jsonl));
    ZT_INPUT_CHECK(jsonl == 0 || jsonl == files.size(), "--input: ", jsonl, " of ", files.size(),
                   " input files are named *.jsonl: give --format jsonl (all are JSON Lines) or "
                   "--format text (all are text documents)");
    return jsonl > 0;
}

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs, SkippedInputs& skipped) {
    std::vector<std::string> files;
    for (const std::string& input : inputs) {
        if (detail::is_stdin(input)) {
            ZT_INPUT_CHECK(std::count(inputs.begin(), inputs.end(), input) == 1,
                           "--input: '-' (standard input) is given more than once");
            files.push_back(input);
            continue;
        }
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

namespace {

/// A folder input contributes its text files: written into that same folder, the
/// tokenizer.json would be read back as a document by the next run (and a tokenizer.json of
/// the user's there replaced).
void refuse_output_in_input_folder(const PrepareOptions& opt) {
    std::error_code ec;
    for (const std::string& in : opt.inputs) {
        if (in == "-" || !fs::is_directory(in, ec)) continue;
        ZT_INPUT_CHECK(!same_path(in, opt.output), "--output ", opt.output, " is the --input folder ", in,
                       ": the tokenizer.json written there would be read as a document by the next run over "
                       "that folder (and a tokenizer.json already there replaced); write to another folder, such as ",
                       (fs::path(in) / "tokens").string());
    }
}

}  // namespace

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
    refuse_output_in_input_folder(opt);
}

std::unique_ptr<Tokenizer> make_prepare_tokenizer(const PrepareOptions& opt) {
    return detail::is_hf_tokenizer(opt) ? make_hf_tokenizer(opt.tokenizer)
           : opt.tokenizer == "gpt2"    ? make_gpt2_tokenizer(opt.vocab, opt.merges)
                                        : make_byte_tokenizer();
}


}  // namespace zt
