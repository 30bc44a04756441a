// Corpus preparation (prepare.hpp), parts: a part's records read in batches, tokenized on
// worker threads and appended in batch order to the part's segment files, so the segments
// are the same whatever the thread count; the part's done record; progress.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <utility>

#include <nlohmann/json.hpp>

#include "prepare_detail.hpp"
#include "shard_file.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt::detail {

namespace {

constexpr size_t kKeptBadLines = 20;

/// Cuts a part into records (documents or lines) and batches of about batch_bytes.
class RecordReader {
  public:
    RecordReader(const std::string& path, const InputPart& part, const PrepareOptions& opt, bool jsonl)
        : m_lines(path, part.begin, part.end, !jsonl), m_opt(opt), m_jsonl(jsonl),
          m_to_file_end(part.end == UINT64_MAX), m_doc_start(part.begin) {}

    bool next_batch(std::vector<InputRecord>& batch) {
        batch.clear();
        size_t bytes = 0;
        InputRecord r;
        while (bytes < static_cast<size_t>(m_opt.batch_bytes) && next_record(r)) {
            bytes += r.text.size() + 64;
            batch.push_back(std::move(r));
            r = InputRecord();
        }
        return !batch.empty();
    }

    uint64_t lines() const { return m_line_no; }
    uint64_t raw_bytes() const { return m_lines.raw_bytes(); }

  private:
    bool next_record(InputRecord& r) {
        if (m_done) return false;
        InputLine line;
        if (m_jsonl) {
            if (!m_lines.next(line)) return m_done = true, false;
            r.text.assign(line.text);
            r.offset = line.offset;
            r.line = ++m_line_no;
            return true;
        }
        // A document: the lines up to a separator line (without one: the whole file).
        r.offset = m_doc_start;
        while (m_lines.next(line)) {
            ++m_line_no;
            if (m_opt.doc_separator && is_separator(line.text)) {
                m_doc_start = line.offset + line.text.size();
                return true;
            }
            r.text.append(line.text);
        }
        m_done = true;
        // The run after the last separator line is a document at the end of the file; a
        // part that ends earlier ends right after a separator line.
        return m_to_file_end;
    }

    bool is_separator(std::string_view text) const {
        if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
        if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
        return text == *m_opt.doc_separator;
    }

    LineReader m_lines;
    const PrepareOptions& m_opt;
    bool m_jsonl;
    bool m_to_file_end;
    uint64_t m_doc_start;
    uint64_t m_line_no = 0;
    bool m_done = false;
};

BatchResult tokenize_batch(const std::vector<InputRecord>& batch, const RecordContext& ctx) {
    BatchResult r;
    if (ctx.jsonl) {
        tokenize_examples(batch, ctx, r);
    } else {
        tokenize_documents(batch, ctx, r);
    }
    return r;
}

/// The segment files of one part: per split the tokens (in the shards' width), the record
/// lengths (uint64) and, for examples, the target flags.
class SegmentWriter {
  public:
    SegmentWriter(const std::string& work, size_t part, bool examples, bool u16)
        : m_u16(u16), m_work(work), m_part(part) {
        for (int s = 0; s < 2; ++s) {
            open(m_tokens[s], segment_path(work, part, s, "tokens"));
            open(m_lengths[s], segment_path(work, part, s, "lengths"));
            if (examples) open(m_target[s], segment_path(work, part, s, "target"));
        }
    }

    void append(const BatchResult& r) {
        for (int s = 0; s < 2; ++s) {
            const SplitTokens& t = r.split[s];
            write_tokens(m_tokens[s], t.tokens, m_u16);
            m_lengths[s].write(reinterpret_cast<const char*>(t.lengths.data()),
                               static_cast<std::streamsize>(t.lengths.size() * sizeof(uint64_t)));
            if (m_target[s].is_open()) {
                m_target[s].write(reinterpret_cast<const char*>(t.target.data()),
                                  static_cast<std::streamsize>(t.target.size()));
            }
        }
    }

    void close() {
        for (int s = 0; s < 2; ++s) {
            for (std::ofstream* f : {&m_tokens[s], &m_lengths[s], &m_target[s]}) {
                if (!f->is_open()) continue;
                errno = 0;
                f->close();
                // The file system's refusal (a full disk, a quota), not a defect: the parts
                // finished so far stay in the work folder for the next run.
                if (f->fail()) {
                    throw Error(str(m_work, ": writing part ", m_part, " failed",
                                    errno != 0 ? str(": ", std::strerror(errno)) : std::string(" (disk full?)"),
                                    "; the parts finished so far are kept there: run the same command again to go "
                                    "on once there is room"));
                }
            }
        }
    }

  private:
    static void open(std::ofstream& f, const std::string& path) {
        f.open(path, std::ios::binary | std::ios::trunc);
        ZT_REQUIRE(f.good(), "cannot write '", path, "'");
    }

    bool m_u16;
    std::string m_work;
    size_t m_part;
    std::ofstream m_tokens[2], m_lengths[2], m_target[2];
};

void add_to_summary(const BatchResult& r, PartSummary& sum) {
    for (int s = 0; s < 2; ++s) {
        sum.records[s] += r.split[s].lengths.size();
        sum.tokens[s] += r.split[s].tokens.size();
        for (uint8_t t : r.split[s].target) sum.targets[s] += t;
    }
    sum.blank += r.blank;
    for (int l = 0; l < 4; ++l) sum.by_layout[l] += r.by_layout[l];
    sum.bad_count += r.bad.size();
    for (const auto& b : r.bad) {
        if (sum.bad.size() < kKeptBadLines) sum.bad.push_back(b);
    }
}

void write_part_done(const std::string& work, size_t part, const PartSummary& sum) {
    nlohmann::json j;
    j["records"] = {sum.records[0], sum.records[1]};
    j["tokens"] = {sum.tokens[0], sum.tokens[1]};
    j["targets"] = {sum.targets[0], sum.targets[1]};
    j["blank"] = sum.blank;
    j["lines"] = sum.lines;
    j["by_layout"] = {sum.by_layout[0], sum.by_layout[1], sum.by_layout[2], sum.by_layout[3]};
    j["bad_count"] = sum.bad_count;
    j["bad"] = sum.bad;
    const std::string text = j.dump();
    write_atomically(part_done_path(work, part), [&](std::ofstream& out) { out << text; });
}

}  // namespace

std::string segment_path(const std::string& work, size_t part, int split, const char* kind) {
    char name[96];
    std::snprintf(name, sizeof(name), "part_%06zu.%s.%s", part, split == 0 ? "train" : "val", kind);
    return (fs::path(work) / name).string();
}

std::string part_done_path(const std::string& work, size_t part) {
    char name[64];
    std::snprintf(name, sizeof(name), "part_%06zu.done.json", part);
    return (fs::path(work) / name).string();
}

std::optional<PartSummary> read_part_done(const std::string& work, size_t part) {
    std::ifstream in(part_done_path(work, part));
    if (!in) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    PartSummary sum;
    for (int s = 0; s < 2; ++s) {
        sum.records[s] = j.at("records").at(s).get<uint64_t>();
        sum.tokens[s] = j.at("tokens").at(s).get<uint64_t>();
        sum.targets[s] = j.at("targets").at(s).get<uint64_t>();
    }
    sum.blank = j.at("blank").get<uint64_t>();
    sum.lines = j.at("lines").get<uint64_t>();
    for (int l = 0; l < 4; ++l) sum.by_layout[l] = j.at("by_layout").at(l).get<uint64_t>();
    sum.bad_count = j.at("bad_count").get<uint64_t>();
    sum.bad = j.at("bad").get<std::vector<std::pair<uint64_t, std::string>>>();
    return sum;
}

PrepareProgress::PrepareProgress(uint64_t total_raw_bytes, double every_seconds, std::ostream* out)
    : m_total(total_raw_bytes), m_every(every_seconds), m_out(out), m_start(std::chrono::steady_clock::now()) {}

void PrepareProgress::add(uint64_t raw_bytes, uint64_t records, uint64_t tokens) {
    m_bytes += raw_bytes;
    m_records += records;
    m_tokens += tokens;
    const double now = seconds_since(m_start);
    if (m_out == nullptr || now - m_last < m_every) return;
    m_last = now;
    const double mb = static_cast<double>(m_bytes) / 1e6;
    const double rate = mb / std::max(now, 1e-9);
    char line[200];
    std::snprintf(line, sizeof(line), "zt-prepare: %.1f of %.1f MB, %llu records, %llu tokens, %.1f MB/s, ETA ", mb,
                  static_cast<double>(m_total) / 1e6, static_cast<unsigned long long>(m_records),
                  static_cast<unsigned long long>(m_tokens), rate);
    *m_out << line;
    if (m_total > m_bytes && rate > 0) {
        *m_out << static_cast<long long>(static_cast<double>(m_total - m_bytes) / 1e6 / rate) << " s\n";
    } else {
        *m_out << "?\n";
    }
    m_out->flush();
}

void process_part(size_t index, const InputPart& part, const std::vector<std::string>& files,
                  const RecordContext& base, int threads, const std::string& work, PrepareProgress& progress) {
    RecordContext ctx = base;
    ctx.file = part.file;
    ctx.layout = forced_layout(*ctx.opt);
    bool layout_known = !ctx.jsonl || ctx.layout != JsonlLayout::kAuto;
    ctx.layout_from = layout_known ? 0 : UINT64_MAX;
    if (!layout_known && part.begin > 0) {
        find_file_layout(files[part.file], ctx);
        layout_known = true;
    }
    SegmentWriter segments(work, index, ctx.jsonl, ctx.tok->vocab_size() <= 65536);
    RecordReader reader(files[part.file], part, *ctx.opt, ctx.jsonl);
    PartSummary sum;
    uint64_t raw_seen = 0;
    const auto consume = [&](const BatchResult& r) {
        add_to_summary(r, sum);
        segments.append(r);
        const uint64_t raw = reader.raw_bytes();
        progress.add(raw - raw_seen, r.split[0].lengths.size() + r.split[1].lengths.size(),
                     r.split[0].tokens.size() + r.split[1].tokens.size());
        raw_seen = raw;
    };
    // Batches are tokenized concurrently and written in the order they were read.
    std::deque<std::future<BatchResult>> running;
    std::vector<InputRecord> batch;
    while (reader.next_batch(batch)) {
        for (size_t i = 0; i < batch.size() && !layout_known; ++i) {
            layout_known = take_layout_from(batch[i].text, batch[i].offset, ctx);
        }
        if (threads <= 1) {
            consume(tokenize_batch(batch, ctx));
            continue;
        }
        running.push_back(std::async(std::launch::async, [ctx, b = std::move(batch)] { return tokenize_batch(b, ctx); }));
        batch = std::vector<InputRecord>();
        if (running.size() >= static_cast<size_t>(threads)) {
            consume(running.front().get());
            running.pop_front();
        }
    }
    while (!running.empty()) {
        consume(running.front().get());
        running.pop_front();
    }
    sum.lines = reader.lines();
    segments.close();
    write_part_done(work, index, sum);
}

}  // namespace zt::detail
