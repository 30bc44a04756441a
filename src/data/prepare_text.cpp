// Corpus preparation (prepare.hpp), text: documents into token shards, in two passes (count
// the documents, so the split is known, then tokenize and write).
#include <utility>

#include "prepare_detail.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/prepare.hpp"
#include "ztrain/data/token_data.hpp"

namespace zt {

std::vector<std::string_view> split_documents(const std::string& content,
                                              const std::optional<std::string>& separator, size_t& blank) {
    std::vector<std::string_view> docs;
    const std::string_view all(content);
    const auto keep = [&](std::string_view doc) {
        if (detail::is_blank(doc)) {
            ++blank;
        } else {
            docs.push_back(doc);
        }
    };
    if (!separator) {
        keep(all);
        return docs;
    }
    size_t doc_start = 0;
    size_t pos = 0;
    while (pos < all.size()) {
        size_t end = all.find('\n', pos);
        const size_t next = end == std::string_view::npos ? all.size() : end + 1;
        if (end == std::string_view::npos) {
            end = all.size();
        }
        std::string_view line = all.substr(pos, end - pos);
        if (!line.empty() && line.back() == '\r') {
            line.remove_suffix(1);  // tolerate CRLF files
        }
        if (line == *separator) {
            keep(all.substr(doc_start, pos - doc_start));
            doc_start = next;
        }
        pos = next;
    }
    keep(all.substr(doc_start));
    return docs;
}

TokenShardWriter::TokenShardWriter(std::string dir, std::string prefix, size_t shard_tokens, bool force_u32)
    : m_dir(std::move(dir)), m_prefix(std::move(prefix)), m_shard_tokens(shard_tokens), m_force_u32(force_u32) {}

void TokenShardWriter::append(uint32_t token) {
    m_buffer.push_back(token);
    ++m_total;
    if (m_buffer.size() == m_shard_tokens) {
        flush();
    }
}

void TokenShardWriter::append(const std::vector<uint32_t>& tokens) {
    for (uint32_t t : tokens) {
        append(t);
    }
}

void TokenShardWriter::finish() {
    if (!m_buffer.empty()) {
        flush();
    }
}

void TokenShardWriter::flush() {
    const std::string path = detail::shard_path(m_dir, m_prefix, m_files.size());
    write_token_shard(path, m_buffer, m_force_u32);
    m_files.push_back(path);
    m_buffer.clear();
}

namespace {

/// How many documents there are and where they go.
struct DocumentCounts {
    size_t docs = 0;
    size_t blank = 0;  ///< blank documents skipped
    size_t train = 0;
    size_t val = 0;
};

/// Pass 1: counts the documents, so the split is known before anything is written.
DocumentCounts count_documents(const std::vector<std::string>& files, const PrepareOptions& opt) {
    DocumentCounts counts;
    for (const std::string& f : files) {
        const std::string content = detail::read_prepare_input(f);
        ZT_INPUT_CHECK(!detail::is_binary(content), "--input: '", f,
                       "' contains NUL bytes (binary?); zt-prepare reads text files only");
        counts.docs += split_documents(content, opt.doc_separator, counts.blank).size();
    }
    ZT_INPUT_CHECK(counts.docs > 0, "--input: the ", files.size(),
                   " input file(s) hold no documents (all empty or whitespace)");
    counts.val = validation_count(opt.val_fraction, counts.docs);
    counts.train = counts.docs - counts.val;
    return counts;
}

/// Pass 2: tokenizes the documents into `train` (the first counts.train) and `val`.
void write_documents(const std::vector<std::string>& files, const PrepareOptions& opt, const Tokenizer& tok,
                     const DocumentCounts& counts, TokenShardWriter& train, TokenShardWriter& val) {
    size_t doc_index = 0;
    size_t ignored = 0;
    for (const std::string& f : files) {
        const std::string content = detail::read_prepare_input(f);
        for (std::string_view doc : split_documents(content, opt.doc_separator, ignored)) {
            TokenShardWriter& out = doc_index < counts.train ? train : val;
            out.append(tok.eot());
            out.append(tok.encode(std::string(doc)));
            ++doc_index;
        }
    }
    ZT_REQUIRE(doc_index == counts.docs, "input files changed between passes: ", doc_index, " documents now, ",
               counts.docs, " before");
    train.finish();
    val.finish();
}

/// The lines printed when the shards are written.
void print_summary(std::ostream& out, const PrepareOptions& opt, const Tokenizer& tok, bool force_u32,
                   size_t num_files, const SkippedInputs& skipped, const DocumentCounts& counts,
                   const TokenShardWriter& train, const TokenShardWriter& val) {
    out << "zt-prepare: tokenizer " << tok.type() << " (vocab_size " << tok.vocab_size() << ", document separator "
        << tok.eot() << " '" << tok.decode({tok.eot()}) << "', shard version "
        << (force_u32 ? kShardVersionU32 : kShardVersionU16) << ")\n";
    out << "zt-prepare: " << num_files << " input file(s)";
    if (skipped.binary + skipped.symlinks + skipped.other > 0) {
        out << "; skipped in folders: " << skipped.binary << " binary, " << skipped.symlinks << " symlink(s), "
            << skipped.other << " other";
    }
    out << "\n";
    out << "zt-prepare: " << counts.docs << " documents (" << counts.train << " train, " << counts.val << " val)";
    if (counts.blank > 0) {
        out << "; " << counts.blank << " blank document(s) skipped";
    }
    out << "\n";
    out << "zt-prepare: train: " << train.total() << " tokens in " << train.files().size()
        << " shard(s): " << detail::describe_files(train.files()) << "\n";
    out << "zt-prepare: val: " << val.total() << " tokens in " << val.files().size()
        << " shard(s): " << detail::describe_files(val.files()) << "\n";
    if (counts.val == 0 && opt.val_fraction > 0) {
        // Documents are whole files unless --doc-separator splits them: one file, one
        // document, which goes to train; the validation loss would silently be missing.
        out << "zt-prepare: note: no validation tokens: --val-fraction " << opt.val_fraction << " of " << counts.docs
            << " document(s) is less than one"
            << (!opt.doc_separator ? " (each input file is one document: split the text with "
                                     "--doc-separator LINE, or give more files)"
                                   : "")
            << "; leave data.val unset for this data\n";
    }
}

}  // namespace

void detail::prepare_documents(const PrepareOptions& opt, const Tokenizer& tok, const std::vector<std::string>& files,
                               const SkippedInputs& skipped, std::ostream& out) {
    const DocumentCounts counts = count_documents(files, opt);
    create_output_folder(opt.output);
    const bool force_u32 = tok.vocab_size() > 65536;
    const auto shard_tokens = static_cast<size_t>(opt.shard_tokens);
    TokenShardWriter train(opt.output, "train", shard_tokens, force_u32);
    TokenShardWriter val(opt.output, "val", shard_tokens, force_u32);
    write_documents(files, opt, tok, counts, train, val);
    const size_t stale = finish_output(opt, tok, train.files(), val.files());
    print_summary(out, opt, tok, force_u32, files.size(), skipped, counts, train, val);
    print_stale_shards(out, stale);
    print_tokenizer_written(out, opt);
}

}  // namespace zt
