// Example shards (version 3, layout in examples.hpp): the ExampleSet container, the writer
// and the validating reader.
//
// The reader checks every size against the file size before allocating, so a hostile header
// cannot make it allocate more than the file holds, and checks every invariant the trainer
// relies on (masks are 0/1, examples are non-empty and in order, the first token of an
// example is not a target) so a damaged file is an InputError here, not a wrong loss later.
// Deliberately does not: memory-map or stream (like token shards, the data is held in
// memory).
#include <algorithm>
#include <cstring>
#include <limits>

#include "shard_file.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"

namespace zt {

void ExampleSet::append(const std::vector<uint32_t>& example_tokens,
                        const std::vector<uint8_t>& example_target) {
    ZT_REQUIRE(!example_tokens.empty() && example_tokens.size() == example_target.size(),
               "an example needs tokens and one target flag per token: ", example_tokens.size(),
               " tokens, ", example_target.size(), " flags");
    tokens.insert(tokens.end(), example_tokens.begin(), example_tokens.end());
    target.insert(target.end(), example_target.begin(), example_target.end());
    starts.push_back(tokens.size());
}

void ExampleSet::append_from(const ExampleSet& other, size_t e) {
    const auto begin = static_cast<std::ptrdiff_t>(other.starts[e]);
    const auto end = static_cast<std::ptrdiff_t>(other.starts[e + 1]);
    tokens.insert(tokens.end(), other.tokens.begin() + begin, other.tokens.begin() + end);
    target.insert(target.end(), other.target.begin() + begin, other.target.begin() + end);
    starts.push_back(tokens.size());
}

size_t ExampleSet::num_targets() const {
    return static_cast<size_t>(std::count(target.begin(), target.end(), uint8_t{1}));
}

void write_example_shard(const std::string& path, const ExampleSet& examples, bool force_u32) {
    const size_t n = examples.tokens.size();
    // The header stores counts as int32, like llm.c's token count.
    constexpr auto kMax = static_cast<size_t>(std::numeric_limits<int32_t>::max());
    ZT_REQUIRE(n <= kMax && examples.num_examples() <= kMax, path, ": ", n, " tokens in ",
               examples.num_examples(), " examples do not fit one shard (int32 counts)");
    ZT_REQUIRE(examples.target.size() == n && examples.starts.back() == n,
               path, ": inconsistent example set");
    const bool u16 = !force_u32 && std::all_of(examples.tokens.begin(), examples.tokens.end(),
                                               [](uint32_t t) { return t < 65536u; });
    std::vector<int32_t> header(kShardHeaderInts, 0);
    header[0] = kShardMagic;
    header[1] = kShardVersionExamples;
    header[2] = static_cast<int32_t>(n);
    header[3] = static_cast<int32_t>(examples.num_examples());
    header[4] = u16 ? 2 : 4;
    std::vector<uint32_t> starts(examples.starts.begin(), examples.starts.end());
    detail::write_atomically(path, [&](std::ofstream& out) {
        out.write(reinterpret_cast<const char*>(header.data()),
                  static_cast<std::streamsize>(detail::kShardHeaderBytes));
        detail::write_tokens(out, examples.tokens, u16);
        out.write(reinterpret_cast<const char*>(examples.target.data()), static_cast<std::streamsize>(n));
        out.write(reinterpret_cast<const char*>(starts.data()),
                  static_cast<std::streamsize>(starts.size() * sizeof(uint32_t)));
    });
}

namespace {

/// The counts of a version-3 header, checked against each other and the file size.
struct ExampleHeader {
    size_t tokens = 0;
    size_t examples = 0;
    uint64_t token_bytes = 0;
};

ExampleHeader check_example_header(const std::string& path, const detail::ShardFile& f) {
    const std::vector<int32_t>& h = f.header;
    ZT_INPUT_CHECK(h[1] == kShardVersionExamples, path, ": version ", h[1],
                   " is a token stream, not an example shard (expected version ",
                   kShardVersionExamples, ", written by zt-prepare --format jsonl)");
    ZT_INPUT_CHECK(h[2] >= 0 && h[3] >= 1, path, ": bad counts in the header: ", h[2],
                   " tokens, ", h[3], " examples (expected >= 0 and >= 1)");
    ZT_INPUT_CHECK(h[4] == 2 || h[4] == 4, path, ": bad token width ", h[4],
                   " in the header (expected 2 or 4 bytes)");
    ExampleHeader eh{static_cast<size_t>(h[2]), static_cast<size_t>(h[3]), static_cast<uint64_t>(h[4])};
    const uint64_t expected = detail::kShardHeaderBytes + eh.tokens * (eh.token_bytes + 1) +
                              (eh.examples + 1) * sizeof(uint32_t);
    ZT_INPUT_CHECK(f.file_bytes == expected, path, ": ", f.file_bytes,
                   " bytes, but the header says ", eh.tokens, " tokens of ", eh.token_bytes,
                   " bytes and ", eh.examples, " examples (", expected,
                   " bytes with the header, targets and starts); truncated or trailing bytes?");
    return eh;
}

/// Checks starts, targets and tokens of a set read from `path`.
void check_examples(const std::string& path, const ExampleSet& set, int vocab_size) {
    ZT_INPUT_CHECK(set.starts.front() == 0 && set.starts.back() == set.tokens.size(), path,
                   ": example starts run from ", set.starts.front(), " to ", set.starts.back(),
                   " (expected 0 to the token count ", set.tokens.size(), ")");
    for (size_t e = 0; e < set.num_examples(); ++e) {
        ZT_INPUT_CHECK(set.starts[e] < set.starts[e + 1], path, ": example ", e, " starts at ",
                       set.starts[e], " and ends at ", set.starts[e + 1],
                       " (expected a non-empty example)");
        ZT_INPUT_CHECK(set.target[set.starts[e]] == 0, path, ": the first token of example ", e,
                       " is marked as a target (nothing precedes it to predict it from)");
    }
    for (size_t i = 0; i < set.target.size(); ++i) {
        ZT_INPUT_CHECK(set.target[i] <= 1, path, ": target flag ", int{set.target[i]},
                       " at position ", i, " (expected 0 or 1)");
    }
    if (vocab_size > 0) {
        const auto limit = static_cast<uint32_t>(vocab_size);
        for (size_t i = 0; i < set.tokens.size(); ++i) {
            ZT_INPUT_CHECK(set.tokens[i] < limit, path, ": token ", set.tokens[i], " at position ",
                           i, " is out of range (expected < vocab_size ", vocab_size,
                           "; was the shard made with another tokenizer?)");
        }
    }
}

}  // namespace

ExampleShardSizes read_example_shard_sizes(const std::string& path) {
    const detail::ShardFile f = detail::open_shard(path);
    const ExampleHeader eh = check_example_header(path, f);
    return ExampleShardSizes{eh.tokens, eh.examples};
}

ExampleShardSizes example_shard_sizes(const std::string& pattern, const std::string& key) {
    return example_shard_sizes(expand_shard_glob(pattern, key), key);
}

ExampleShardSizes example_shard_sizes(const std::vector<std::string>& files, const std::string& key) {
    ExampleShardSizes sum;
    for (const std::string& file : files) {
        ExampleShardSizes one;
        try {
            one = read_example_shard_sizes(file);
        } catch (const InputError& e) {
            throw InputError(str(key, ": ", e.what()));
        }
        sum.tokens += one.tokens;
        sum.examples += one.examples;
    }
    return sum;
}

ExampleSet read_example_shard(const std::string& path, int vocab_size) {
    detail::ShardFile f = detail::open_shard(path);
    const ExampleHeader eh = check_example_header(path, f);
    ExampleSet set;
    detail::read_tokens(f.in, eh.tokens, eh.token_bytes, set.tokens);
    set.target.resize(eh.tokens);
    f.in.read(reinterpret_cast<char*>(set.target.data()), static_cast<std::streamsize>(eh.tokens));
    std::vector<uint32_t> starts(eh.examples + 1);
    f.in.read(reinterpret_cast<char*>(starts.data()),
              static_cast<std::streamsize>(starts.size() * sizeof(uint32_t)));
    ZT_INPUT_CHECK(static_cast<bool>(f.in), path,
                   ": read failed after the header (file changed while reading?)");
    set.starts.assign(starts.begin(), starts.end());
    check_examples(path, set, vocab_size);
    return set;
}

}  // namespace zt
