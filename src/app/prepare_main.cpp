// zt-prepare: tokenizes text files into llm.c token shards for ztrain.
//
//   zt-prepare --input PATH... --output DIR [--tokenizer byte|gpt2|FILE.json]
//              [--vocab F --merges F] [--val-fraction X] [--doc-separator LINE]
//              [--shard-tokens N] [--format text|jsonl[:text|:prompt|:chat]]
//              [--chat-template llama3|chatml] [--skip-bad] [--max-tokens N] [--threads N]
//   mpirun -np N zt-prepare ...   (the ranks share the work; the same shards)
//
// The options fill zt::PrepareOptions and zt::prepare_corpus does the work: documents,
// JSON Lines examples, the validation split, the shards and the tokenizer files are
// described in ztrain/data/prepare.hpp.
// Outputs: DIR/train_000000.bin..., DIR/val_000000.bin..., DIR/tokenizer.json (plus
// vocab.json and merges.txt for gpt2, hf_tokenizer.json for a tokenizer.json).
// Exit status: 0 success, 2 bad input (options, files), 1 anything else.
// Test hook: ZT_PREPARE_PART_BYTES cuts the inputs into smaller parts (default 64 MiB).
#include <mpi.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "ztrain/core/error.hpp"
#include "ztrain/core/mpi_start.hpp"
#include "ztrain/core/tool_main.hpp"
#include "ztrain/data/prepare.hpp"

namespace po = boost::program_options;

namespace {

void print_usage(std::ostream& os, const po::options_description& desc) {
    os << "Usage: zt-prepare --input PATH... --output DIR [options]\n"
          "Tokenizes text into llm.c token shards (DIR/train_*.bin, DIR/val_*.bin) and writes\n"
          "DIR/tokenizer.json. A folder input contributes its regular text files (sorted,\n"
          "not recursive; binary files and symlinks are skipped).\n\n"
       << desc << "\n";
}

/// The options, bound to the fields of `opt`.
po::options_description describe_options(zt::PrepareOptions& opt) {
    po::options_description desc("Options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("input,i", po::value<std::vector<std::string>>(&opt.inputs)->multitoken(),
         "text files or folders (each file, or each --doc-separator part, is a document); gzip "
         "or zstd content is decompressed; - reads standard input")
        ("output,o", po::value<std::string>(&opt.output), "output folder (created if needed)")
        ("tokenizer", po::value<std::string>(&opt.tokenizer)->default_value("byte"),
         "byte, gpt2, or the path of a Hugging Face tokenizer.json (byte-level BPE)")
        ("vocab", po::value<std::string>(&opt.vocab), "gpt2: vocab.json / encoder.json")
        ("merges", po::value<std::string>(&opt.merges), "gpt2: merges.txt / vocab.bpe")
        ("val-fraction", po::value<double>(&opt.val_fraction)->default_value(0.05, "0.05"),
         "fraction of documents written to val, in [0, 1) (each by a fixed-seed hash of its "
         "position)")
        ("doc-separator", po::value<std::string>(),
         "a line equal to this separates documents within a file (e.g. % for fortunes)")
        ("threads", po::value<int>(&opt.threads)->default_value(0),
         "tokenizing threads per rank (0: the node's cores / ranks on the node); the shards "
         "are the same for any count")
        ("shard-tokens", po::value<long long>(&opt.shard_tokens)->default_value(100'000'000),
         "tokens per shard file (jsonl: at most, examples are never split)")
        ("format", po::value<std::string>(&opt.format),
         "text, or jsonl[:text|:prompt|:chat] for fine-tuning examples (default: jsonl when "
         "every input file is named *.jsonl, text otherwise)")
        ("chat-template", po::value<std::string>(&opt.chat_template),
         "jsonl chat records: llama3 or chatml (default: from tokenizer_config.json beside "
         "the tokenizer.json)")
        ("skip-bad", po::bool_switch(&opt.skip_bad),
         "jsonl: skip and count bad lines instead of stopping before writing anything")
        ("max-tokens", po::value<long long>(&opt.max_tokens)->default_value(0),
         "jsonl: an example longer than this many tokens is a bad line (0: no limit)");
    // clang-format on
    return desc;
}

/// This process's place among the ranks of mpirun (one process without it).
zt::PrepareRanks mpi_ranks() {
    zt::PrepareRanks r;
    ZT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r.rank));
    ZT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &r.size));
    MPI_Comm node = MPI_COMM_NULL;
    ZT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r.rank, MPI_INFO_NULL, &node));
    ZT_MPI_CHECK(MPI_Comm_size(node, &r.ranks_on_node));
    ZT_MPI_CHECK(MPI_Comm_free(&node));
    r.all_ok = [](bool ok) {
        int mine = ok ? 1 : 0;
        int all = 0;
        ZT_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        return all == 1;
    };
    return r;
}

int run(int argc, char** argv) {
    zt::PrepareOptions opt;
    const po::options_description desc = describe_options(opt);

    // No positional arguments: an empty description makes boost reject stray words
    // instead of silently ignoring them.
    const po::positional_options_description no_positionals;
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(no_positionals).run(),
              vm);
    if (vm.count("help") != 0) {
        print_usage(std::cout, desc);
        return zt::kExitOk;
    }
    po::notify(vm);
    if (vm.count("doc-separator") != 0) {
        opt.doc_separator = vm["doc-separator"].as<std::string>();
    }
    if (const char* part = std::getenv("ZT_PREPARE_PART_BYTES")) opt.part_bytes = std::atoll(part);
    zt::prepare_corpus(opt, std::cout, std::cerr, mpi_ranks());
    return zt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
    zt::prefer_isolated_mpi_singleton();
    MPI_Init(&argc, &argv);
    // A rank that stops because another failed exits quietly: that rank says why.
    const int code = zt::run_tool("zt-prepare", [&]() -> int {
        try {
            return run(argc, argv);
        } catch (const zt::OtherRankFailed&) {
            return zt::kExitFailure;
        }
    });
    std::cout.flush();
    MPI_Finalize();
    return code;
}
