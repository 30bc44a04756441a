// libFuzzer target: a Hugging Face model directory as model.init_from = DIR and
// --model.from_hf=DIR read it: zt::read_hf_config (config.json), zt::read_safetensors_index
// (model.safetensors.index.json) and zt::import_weights of the directory (config.json checked
// against the model, then model.safetensors, or the index and its shards tensor for tensor)
// into a one-rank model.
//
// Input: the directory's files, separated by kHfDirSeparator ("\0ZTFUZZ-FILE\0"; a lone NUL
// cannot separate binary shards, which are full of them):
//
//   config.json SEP model.safetensors.index.json SEP weights-1 SEP weights-2 ...
//
// written into a fresh scratch directory. An empty part is an absent file. With an index,
// weights-k is model-0000k-of-0000n.safetensors (n: the number of weight parts, at most
// kMaxShards; later parts are dropped); without one, weights-1 is model.safetensors (and
// the other weight parts are dropped).
// The model is built as --model.from_hf builds it: config.json's settings applied over the
// tiny GPT-2 (fuzz_support.hpp; vocab_pad_to 16) and validated, when read_hf_config accepts
// config.json and the model stays tiny (kMax*); otherwise the tiny GPT-2 itself, whose
// config check then refuses most directories.
//
// Expected rejections are zt::Error / zt::InputError. Findings, besides crashes, sanitizer
// reports and other exception types:
// * read_safetensors_index accepts a shard name that is not a plain file name in the
//   directory (empty, ".", "..", a '/' or '\', a NUL);
// * the import into the model built from config.json fails its config check (ztrain
//   --model.from_hf=DIR would refuse the DIR it was configured from);
// * an accepted import of a directory whose config.json read_hf_config refuses, or whose
//   index read_safetensors_index refuses;
// * an accepted import that does not write every element: the directory is imported twice,
//   over two different poison values, and the two results must be bit-identical, with the
//   padded vocabulary rows zero.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../src/ckpt/safetensors.hpp"
#include "fuzz_support.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"

namespace fs = std::filesystem;

namespace {

using zt::fuzz::kHfDirSeparator;
constexpr size_t kMaxShards = 8;
// The largest model built from a fuzzed config.json (a few thousand parameters).
constexpr int kMaxLayers = 2;
constexpr int kMaxWidth = 32;
constexpr int kMaxFfn = 64;
constexpr int kMaxVocab = 64;
constexpr int kMaxPositions = 32;

[[noreturn]] void finding(const std::string& what) {
    std::fprintf(stderr, "fuzz_hf_dir: %s\n", what.c_str());
    std::abort();
}

std::vector<std::string> split_parts(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> parts;
    size_t at = 0;
    while (parts.size() < 2 + kMaxShards) {
        const size_t next = input.find(kHfDirSeparator, at);
        parts.push_back(input.substr(at, next == std::string::npos ? next : next - at));
        if (next == std::string::npos) break;
        at = next + kHfDirSeparator.size();
    }
    parts.resize(std::max<size_t>(parts.size(), 2));
    return parts;
}

/// Writes the parts into a fresh `dir`; returns whether it holds an index.
bool write_directory(const std::string& dir, const std::vector<std::string>& parts) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directory(dir, ec);
    if (ec) finding("harness: cannot create " + dir + ": " + ec.message());
    const auto put = [&](const std::string& name, const std::string& bytes) {
        if (!bytes.empty()) zt::fuzz::write_file(dir + "/" + name, bytes);
    };
    put("config.json", parts[0]);
    put("model.safetensors.index.json", parts[1]);
    const size_t n = parts.size() - 2;
    if (parts[1].empty()) {
        if (n > 0) put("model.safetensors", parts[2]);
        return false;
    }
    for (size_t k = 1; k <= n; ++k) put(zt::fuzz::hf_shard_name(k, n), parts[1 + k]);
    return true;
}

bool plain_file_name(const std::string& s) {
    return !s.empty() && s != "." && s != ".." && s.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

bool tiny_enough(const zt::ModelConfig& m) {
    return m.n_layer <= kMaxLayers && m.n_embd <= kMaxWidth && m.ffn_dim <= kMaxFfn && m.vocab_size <= kMaxVocab &&
           m.seq_len <= kMaxPositions;
}

/// The model --model.from_hf would configure from `settings` (over the tiny GPT-2), or
/// nullptr when ztrain would refuse it or it is not tiny. Built models are cached by deck.
zt::fuzz::TinyState* model_from(const std::vector<zt::HfSetting>& settings) {
    static std::map<std::string, std::unique_ptr<zt::fuzz::TinyState>> cache;
    zt::Config c;
    c.model = zt::fuzz::tiny_model();
    c.data.train = "train.bin";  // validate() requires one; nothing reads it
    try {
        for (const zt::HfSetting& s : settings) zt::set_config_value(c, s.key, s.text);
        zt::validate(c);
    } catch (const zt::InputError&) {
        return nullptr;
    }
    if (!tiny_enough(c.model)) return nullptr;
    const std::string key = zt::to_ini(c);
    auto it = cache.find(key);
    if (it == cache.end()) {
        if (cache.size() >= 64) cache.clear();
        it = cache.emplace(key, std::make_unique<zt::fuzz::TinyState>(c.model)).first;
    }
    return it->second.get();
}

std::vector<float> master_copy(zt::fuzz::TinyState& m) {
    std::vector<float> out;
    for (int u = 0; u < m.layout.num_units(); ++u) {
        const float* w = m.state.shards().master_base(u);
        out.insert(out.end(), w + m.state.shards().owned_begin(u), w + m.state.shards().owned_end(u));
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::scratch_dir();
    zt::fuzz::tiny_state();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string dir = zt::fuzz::scratch_file("hf");
    const bool sharded = write_directory(dir, split_parts(data, size));

    bool config_ok = false;
    std::vector<zt::HfSetting> settings;
    try {
        settings = zt::read_hf_config(dir);
        config_ok = true;
    } catch (const zt::Error&) {
    }
    bool index_ok = false;
    if (sharded) {
        try {
            for (const auto& [tensor, shard] : zt::read_safetensors_index(dir + "/model.safetensors.index.json")) {
                if (!plain_file_name(shard)) {
                    finding("read_safetensors_index accepted weight_map[" + nlohmann::json(tensor).dump() +
                            "] = " + nlohmann::json(shard).dump() + ", not a plain file name");
                }
            }
            index_ok = true;
        } catch (const zt::Error&) {
        }
    }

    zt::fuzz::TinyState* built = config_ok ? model_from(settings) : nullptr;
    zt::fuzz::TinyState& m = built ? *built : zt::fuzz::tiny_state();
    const auto import = [&](float poison) {
        zt::fuzz::fill_master(m, poison);
        zt::import_weights(dir, m.layout, m.cfg, m.state);
    };
    // check_hf_config's refusal; the prefix is the harness's, not the input's.
    static const std::string config_refusal = "model.init_from = " + dir + ": " + dir + "/config.json: ";
    try {
        import(1234.5f);
    } catch (const zt::Error& e) {
        if (built && std::string(e.what()).rfind(config_refusal, 0) == 0) {
            finding(std::string("the model configured from config.json fails its config check: ") + e.what());
        }
        return 0;
    }
    if (!config_ok) finding("import accepted a directory whose config.json read_hf_config refuses");
    if (sharded && !index_ok) finding("import accepted a directory whose index read_safetensors_index refuses");
    zt::fuzz::require_zero_padding(m, "fuzz_hf_dir");
    const std::vector<float> first = master_copy(m);
    try {
        import(-7.25f);
    } catch (const zt::Error& e) {
        finding(std::string("the second import of an accepted directory failed: ") + e.what());
    }
    const std::vector<float> second = master_copy(m);
    if (std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) != 0) {
        finding("two imports of one directory over different poison values differ (an element left unwritten)");
    }
    return 0;
}
