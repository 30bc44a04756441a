// Corpus preparation (prepare.hpp), text: documents into tokens (each after the
// tokenizer's document separator), and the validation split by a record's position.
#include "prepare_detail.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/token_data.hpp"

namespace zt::detail {

bool goes_to_val(double val_fraction, size_t file, uint64_t offset) {
    if (val_fraction <= 0.0) return false;
    constexpr uint64_t kSplitSeed = 0x7a2d5b1e9c3f4a60ull;
    const uint64_t file_seed = random_bits(kSplitSeed, static_cast<uint64_t>(RandomStream::kDataVal), file);
    const uint64_t r = random_bits(file_seed, static_cast<uint64_t>(RandomStream::kDataVal), offset);
    return static_cast<double>(r >> 11) * 0x1.0p-53 < val_fraction;
}

void tokenize_documents(const std::vector<InputRecord>& records, const RecordContext& ctx, BatchResult& out) {
    for (const InputRecord& r : records) {
        if (is_blank(r.text)) {
            ++out.blank;
            continue;
        }
        SplitTokens& s = out.split[goes_to_val(ctx.opt->val_fraction, ctx.file, r.offset) ? 1 : 0];
        const size_t before = s.tokens.size();
        s.tokens.push_back(ctx.tok->eot());
        const std::vector<uint32_t> ids = ctx.tok->encode(r.text);
        s.tokens.insert(s.tokens.end(), ids.begin(), ids.end());
        s.lengths.push_back(s.tokens.size() - before);
    }
}

void print_document_summary(std::ostream& out, const PrepareOptions& opt, const Tokenizer& tok, bool force_u32,
                            size_t num_files, const SkippedInputs& skipped, const PartSummary& total,
                            const std::vector<SplitShards>& shards) {
    out << "zt-prepare: tokenizer " << tok.type() << " (vocab_size " << tok.vocab_size() << ", document separator "
        << tok.eot() << " '" << tok.decode({tok.eot()}) << "', shard version "
        << (force_u32 ? kShardVersionU32 : kShardVersionU16) << ")\n";
    out << "zt-prepare: " << num_files << " input file(s)";
    if (skipped.binary + skipped.symlinks + skipped.other > 0) {
        out << "; skipped in folders: " << skipped.binary << " binary, " << skipped.symlinks << " symlink(s), "
            << skipped.other << " other";
    }
    out << "\n";
    const uint64_t docs = shards[0].records + shards[1].records;
    out << "zt-prepare: " << docs << " documents (" << shards[0].records << " train, " << shards[1].records
        << " val)";
    if (total.blank > 0) {
        out << "; " << total.blank << " blank document(s) skipped";
    }
    out << "\n";
    const char* names[2] = {"train", "val"};
    for (int s = 0; s < 2; ++s) {
        out << "zt-prepare: " << names[s] << ": " << shards[s].tokens << " tokens in " << shards[s].files.size()
            << " shard(s): " << describe_files(shards[s].files) << "\n";
    }
    if (shards[1].records == 0 && opt.val_fraction > 0) {
        // Documents are whole files unless --doc-separator splits them: one file, one
        // document, which goes to train; the validation loss would silently be missing.
        out << "zt-prepare: note: no validation tokens: --val-fraction " << opt.val_fraction << " of " << docs
            << " document(s) is less than one"
            << (!opt.doc_separator ? " (each input file is one document: split the text with "
                                     "--doc-separator LINE, or give more files)"
                                   : "")
            << "; leave data.val unset for this data\n";
    }
}

}  // namespace zt::detail
