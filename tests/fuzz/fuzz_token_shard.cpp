// libFuzzer target: llm.c token shards (zt::read_token_shard) and the dataset built on them
// (zt::TokenDataset, zt::BatchSampler).
//
// The input is the whole shard file. Expected rejections are zt::Error / zt::InputError;
// anything else is a finding: a crash, a sanitizer report, another exception type, an
// allocation beyond -malloc_limit_mb, or a violated property checked below (tokens agree
// with the file bytes, the vocab_size check is exact, the window count and window contents
// follow token_data.hpp).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"

namespace {

[[noreturn]] void violated(const char* what) {
    std::fprintf(stderr, "fuzz_token_shard: property violated: %s\n", what);
    std::abort();
}

#define FUZZ_CHECK(cond) \
    do {                 \
        if (!(cond)) violated(#cond); \
    } while (0)

uint32_t token_at(const uint8_t* data, int32_t version, size_t i) {
    const size_t off = zt::kShardHeaderInts * 4;
    if (version == zt::kShardVersionU16) {
        uint16_t v;
        std::memcpy(&v, data + off + 2 * i, 2);
        return v;
    }
    uint32_t v;
    std::memcpy(&v, data + off + 4 * i, 4);
    return v;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::scratch_dir();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = zt::fuzz::scratch_file("shard.bin");
    zt::fuzz::write_file(path, data, size);

    std::vector<uint32_t> tokens;
    try {
        tokens = zt::read_token_shard(path, 0);
    } catch (const zt::Error&) {
        return 0;  // rejected: fine
    }

    // Accepted: the file must be exactly header + count tokens, and the tokens its bytes.
    FUZZ_CHECK(size >= zt::kShardHeaderInts * 4);
    int32_t header[3];
    std::memcpy(header, data, sizeof header);
    FUZZ_CHECK(header[0] == zt::kShardMagic);
    FUZZ_CHECK(header[1] == zt::kShardVersionU16 || header[1] == zt::kShardVersionU32);
    FUZZ_CHECK(header[2] >= 0 && static_cast<size_t>(header[2]) == tokens.size());
    const size_t width = header[1] == zt::kShardVersionU16 ? 2 : 4;
    FUZZ_CHECK(size == zt::kShardHeaderInts * 4 + width * tokens.size());
    uint32_t max_token = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        FUZZ_CHECK(tokens[i] == token_at(data, header[1], i));
        max_token = std::max(max_token, tokens[i]);
    }

    // The vocab_size check is exact: max_token + 1 passes, max_token fails.
    if (!tokens.empty() && max_token < 0x7FFFFFFFu) {
        try {
            const auto again = zt::read_token_shard(path, static_cast<int>(max_token + 1));
            FUZZ_CHECK(again == tokens);
        } catch (const zt::Error&) {
            violated("a shard whose tokens are all < vocab_size was rejected");
        }
        if (max_token > 0) {
            bool rejected = false;
            try {
                zt::read_token_shard(path, static_cast<int>(max_token));
            } catch (const zt::InputError&) {
                rejected = true;
            }
            FUZZ_CHECK(rejected);
        }
    }

    // The dataset over this one shard: (n - 1) / seq_len windows, each a slice of the tokens.
    const int seq_len = 1 + static_cast<int>(size % 7);
    try {
        zt::TokenDataset ds(path, "fuzz", 0, seq_len);
        FUZZ_CHECK(!tokens.empty());
        FUZZ_CHECK(ds.num_windows() == (tokens.size() - 1) / static_cast<size_t>(seq_len));
        FUZZ_CHECK(ds.num_tokens() == tokens.size());
        std::vector<int32_t> in(static_cast<size_t>(seq_len)), tg(static_cast<size_t>(seq_len));
        for (size_t w = 0; w < ds.num_windows(); ++w) {
            ds.window(w, in.data(), tg.data());
            const size_t s = w * static_cast<size_t>(seq_len);
            for (int t = 0; t < seq_len; ++t) {
                FUZZ_CHECK(in[static_cast<size_t>(t)] == static_cast<int32_t>(tokens[s + static_cast<size_t>(t)]));
                FUZZ_CHECK(tg[static_cast<size_t>(t)] == static_cast<int32_t>(tokens[s + static_cast<size_t>(t) + 1]));
            }
        }
        // A shuffled sampler over two epochs visits every window once per epoch.
        zt::BatchSampler sampler(ds, size, true);
        const size_t n = ds.num_windows();
        if (n <= 4096) {
            std::vector<int> seen(n, 0);
            for (uint64_t g = 0; g < 2 * n; ++g) seen[sampler.window_of(g)] += 1;
            for (int c : seen) FUZZ_CHECK(c == 2);
            std::vector<int32_t> bi(3 * static_cast<size_t>(seq_len)), bt(3 * static_cast<size_t>(seq_len));
            sampler.fill(n > 1 ? n - 1 : 0, 3, bi.data(), bt.data());
        }
    } catch (const zt::Error&) {
        // Too few tokens for one window of seq_len + 1: the only legitimate rejection here.
        FUZZ_CHECK(tokens.size() < static_cast<size_t>(seq_len) + 1);
    }
    return 0;
}
