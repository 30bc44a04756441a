// Corpus preparation (prepare.hpp), the run: the work folder beside the output (kept for
// a resume when its inputs and options match), the phases every rank passes together
// (parts into segments, segments into shards), and the result moved into the output.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "prepare_detail.hpp"
#include "shard_file.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/threads.hpp"
#include "ztrain/data/prepare.hpp"

namespace fs = std::filesystem;

namespace zt {

namespace {

/// OUTPUT.zt-prepare-partial: where the run writes until it is done.
std::string work_folder(const std::string& output) {
    std::string out = output;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    return out + ".zt-prepare-partial";
}

/// A file's size and modification time, to notice a changed input on resume.
nlohmann::json file_stamp(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return nlohmann::json::array({path});
    return nlohmann::json::array({path, static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                                  static_cast<long long>(st.st_mtim.tv_nsec)});
}

/// What the work folder's parts and shards depend on: the inputs, the tokenizer files and
/// the options that change the tokens (not --threads, --skip-bad or the rank count).
std::string fingerprint(const PrepareOptions& opt, const std::vector<std::string>& files, bool jsonl) {
    nlohmann::json j;
    j["version"] = 1;
    j["jsonl"] = jsonl;
    j["tokenizer"] = {opt.tokenizer, opt.vocab, opt.merges};
    for (const std::string& f : {opt.tokenizer, opt.vocab, opt.merges}) {
        if (!f.empty() && f != "byte" && f != "gpt2") j["tokenizer_files"].push_back(file_stamp(f));
    }
    j["val_fraction"] = opt.val_fraction;
    j["doc_separator"] = opt.doc_separator ? nlohmann::json(*opt.doc_separator) : nlohmann::json();
    j["shard_tokens"] = opt.shard_tokens;
    j["format"] = opt.format;
    j["chat_template"] = opt.chat_template;
    j["max_tokens"] = opt.max_tokens;
    j["part_bytes"] = opt.part_bytes;
    for (const std::string& f : files) j["files"].push_back(file_stamp(f));
    return j.dump();
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// Rank 0: keeps a work folder whose fingerprint matches (a resume), else starts a fresh one.
void prepare_work_folder(const std::string& work, const std::string& print, bool resumable, std::ostream& out) {
    const std::string stamp = (fs::path(work) / "fingerprint.json").string();
    if (resumable && fs::exists(stamp) && read_text(stamp) == print) {
        out << "zt-prepare: resuming the interrupted run in " << work << "\n";
        fs::create_directories(fs::path(work) / "shards");
        return;
    }
    std::error_code ec;
    fs::remove_all(work, ec);
    fs::create_directories(fs::path(work) / "shards", ec);
    ZT_INPUT_CHECK(!ec, "--output: cannot create the work folder '", work, "' (", ec.message(), ")");
    detail::write_atomically(stamp, [&](std::ofstream& f) { f << print; });
}

/// Runs `phase`, then waits for every rank: rethrows this rank's failure, or throws
/// OtherRankFailed when another rank failed.
template <typename Phase>
void on_every_rank(const PrepareRanks& ranks, Phase&& phase) {
    std::exception_ptr failure;
    try {
        phase();
    } catch (...) {
        failure = std::current_exception();
    }
    const bool all_ok = ranks.all_ok(failure == nullptr);
    if (failure) std::rethrow_exception(failure);
    if (!all_ok) throw OtherRankFailed();
}

/// The test hook ZT_DEBUG_PREPARE_STOP_AFTER=N: the process dies (as if killed) after
/// finishing N parts, leaving the work folder for a resume.
void maybe_stop(size_t parts_done) {
    const char* env = std::getenv("ZT_DEBUG_PREPARE_STOP_AFTER");
    if (env != nullptr && parts_done == static_cast<size_t>(std::atoll(env))) std::_Exit(137);
}

/// Tokenizes this rank's unfinished parts (standard input is rank 0's).
void tokenize_parts(const std::vector<detail::InputPart>& parts, const std::vector<std::string>& files,
                    const detail::RecordContext& ctx, const PrepareRanks& ranks, const std::string& work,
                    std::ostream& err) {
    const int threads = threads_per_rank(ctx.opt->threads, ranks.ranks_on_node);
    std::vector<size_t> mine;
    uint64_t bytes = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
        const int owner = detail::is_stdin(files[parts[p].file]) ? 0 : static_cast<int>(p % ranks.size);
        if (owner == ranks.rank && !detail::read_part_done(work, p)) {
            mine.push_back(p);
            bytes += parts[p].raw_bytes;
        }
    }
    detail::PrepareProgress progress(bytes, ctx.opt->progress_seconds, ranks.rank == 0 ? &err : nullptr);
    for (size_t i = 0; i < mine.size(); ++i) {
        detail::process_part(mine[i], parts[mine[i]], files, ctx, threads, work, progress);
        maybe_stop(i + 1);
    }
}

std::vector<detail::PartSummary> read_parts(const std::string& work, size_t n) {
    std::vector<detail::PartSummary> done;
    for (size_t p = 0; p < n; ++p) {
        std::optional<detail::PartSummary> s = detail::read_part_done(work, p);
        ZT_REQUIRE(s.has_value(), "part ", p, " has no done record in ", work, " after every rank finished");
        done.push_back(std::move(*s));
    }
    return done;
}

/// Moves the finished shards and tokenizer files into the output; returns the number of
/// stale shards removed.
size_t move_into_place(const std::string& from, const std::string& output) {
    std::error_code ec;
    if (!fs::exists(output, ec)) {
        const fs::path parent = fs::path(output).parent_path();
        if (!parent.empty()) fs::create_directories(parent, ec);
        fs::rename(from, output, ec);
        ZT_INPUT_CHECK(!ec, "--output: cannot create '", output, "' (", ec.message(), ")");
        return 0;
    }
    std::set<std::string> written;
    for (const fs::directory_entry& e : fs::directory_iterator(from)) {
        const fs::path to = fs::path(output) / e.path().filename();
        fs::rename(e.path(), to, ec);
        ZT_INPUT_CHECK(!ec, "--output: cannot move ", e.path().string(), " to ", to.string(), " (", ec.message(), ")");
        written.insert(to.string());
    }
    return remove_stale_shards(output, written);
}

}  // namespace

void prepare_corpus(const PrepareOptions& opt, std::ostream& out, std::ostream& err, const PrepareRanks& ranks) {
    check_prepare_options(opt);
    const std::unique_ptr<Tokenizer> tok = make_prepare_tokenizer(opt);
    SkippedInputs skipped;
    const std::vector<std::string> files = collect_input_files(opt.inputs, skipped);
    const bool jsonl = detail::is_jsonl_run(opt, files);
    if (!jsonl) {
        ZT_INPUT_CHECK(opt.chat_template.empty() && !opt.skip_bad && opt.max_tokens == 0,
                       "--chat-template, --skip-bad and --max-tokens apply to JSON Lines input only "
                       "(--format jsonl, or files named *.jsonl)");
    }
    detail::ExampleRenderers renderers;
    if (jsonl) renderers = detail::make_example_renderers(opt, *tok);
    detail::RecordContext ctx;
    ctx.opt = &opt;
    ctx.tok = tok.get();
    ctx.jsonl = jsonl;
    ctx.renderer = renderers.plain.get();
    ctx.chat_renderer = renderers.chat.get();
    ctx.chat_error = renderers.chat_error;

    const std::string work = work_folder(opt.output);
    const bool resumable = std::none_of(files.begin(), files.end(), detail::is_stdin);
    const std::string print = fingerprint(opt, files, jsonl);
    std::ostringstream quiet;
    std::ostream& rank_out = ranks.rank == 0 ? out : quiet;
    std::ostream& rank_err = ranks.rank == 0 ? err : quiet;
    on_every_rank(ranks, [&] {
        if (ranks.rank == 0) prepare_work_folder(work, print, resumable, rank_out);
    });
    const std::vector<detail::InputPart> parts =
        detail::plan_parts(files, opt, jsonl, static_cast<uint64_t>(opt.part_bytes));
    const bool force_u32 = tok->vocab_size() > 65536;
    std::vector<detail::SplitShards> shards;
    detail::PartSummary total;
    try {
        on_every_rank(ranks, [&] { tokenize_parts(parts, files, ctx, ranks, work, err); });
        const std::vector<detail::PartSummary> done = read_parts(work, parts.size());
        total = detail::total_of(done);
        if (jsonl) detail::report_bad_lines(opt, files, parts, done, rank_err);
        ZT_INPUT_CHECK(total.records[0] + total.records[1] > 0, "--input: the ", files.size(), " input file(s) hold ",
                       jsonl ? "no usable example" : "no documents (all empty or whitespace)");
        on_every_rank(ranks, [&] {
            shards = detail::write_shards(done, work, (fs::path(work) / "shards").string(), opt, jsonl, force_u32,
                                          ranks.rank, ranks.size);
        });
    } catch (const InputError&) {
        // Bad input: nothing to resume; the output is untouched.
        if (ranks.rank == 0) fs::remove_all(work);
        throw;
    }
    if (ranks.rank != 0) return;
    for (detail::SplitShards& split : shards) {
        for (std::string& f : split.files) f = (fs::path(opt.output) / fs::path(f).filename()).string();
    }
    tok->save((fs::path(work) / "shards").string());
    const size_t stale = move_into_place((fs::path(work) / "shards").string(), opt.output);
    fs::remove_all(work);
    if (jsonl) {
        detail::print_example_summary(out, opt, *tok, total, shards);
        detail::print_tokenizer_written(out, opt);
        detail::print_stale_shards(out, stale);
    } else {
        detail::print_document_summary(out, opt, *tok, force_u32, files.size(), skipped, total, shards);
        detail::print_stale_shards(out, stale);
        detail::print_tokenizer_written(out, opt);
    }
}

}  // namespace zt
