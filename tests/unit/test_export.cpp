// Checkpoint export and weight import on one rank: the consolidated .h5 holds the master
// weights exactly (padded vocabulary rows dropped); the .safetensors file parses with an
// independent reader written here from the format's definition (header, offsets, Hugging
// Face names and Conv1D orientation); both import back bit-exactly in fp32, and bf16/fp16
// within their rounding; malformed files are refused with an InputError naming the file.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export_readers.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "model_state_access.hpp"

namespace fs = std::filesystem;

namespace zt {
namespace {

using test::h5_read_floats;
using test::input_error_of;
using test::is_hf_conv1d;
using test::parse_safetensors;
using test::SafeTensors;
using test::write_safetensors;

/// Vocabulary 40 padded to 64: 24 rows the export must drop.
ModelConfig small_model() { return test::model_config(2, 2, 16, 8, 40, 64); }

/// A trained-looking model: seed init plus a distinct perturbation of every live element,
/// and garbage in the padded vocabulary rows, which export must drop and import must zero.
struct Fixture {
    ModelConfig mc = small_model();
    ModelLayout layout = make_model_layout(mc);
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    test::ScratchDir dir{"export"};
    ModelState state{layout, *backend, 5};
    std::string step_dir;

    explicit Fixture(ModelConfig m = small_model()) : mc(std::move(m)) {
        for (const ParamSpec& p : layout.params) {
            float* w = state.shards().master_base(p.unit) + p.offset;
            for (size_t i = 0; i < p.numel; ++i) {
                w[i] = i < p.init_numel ? w[i] + 1e-3f * static_cast<float>(i % 97) : 1234.5f;
                state.shards().adam_m_base(p.unit)[p.offset + i] = 0.5f * static_cast<float>(i);
                state.shards().adam_v_base(p.unit)[p.offset + i] = 0.25f + static_cast<float>(i);
            }
        }
        Config cfg;
        cfg.model = mc;
        CheckpointRecord record;
        record.progress.step = 12;
        record.progress.applied_steps = 12;
        record.progress.tokens_seen = 1000;
        record.dtype = "fp32";
        record.seed = 5;
        record.config_ini = to_ini(cfg);
        step_dir = save_checkpoint(dir.file("ckpt"), state, self_communicator(), record, 2);
    }
    /// The tensor's exported values (ztrain orientation, live rows only).
    std::vector<float> live(const ParamSpec& p) const {
        const float* w = const_cast<ModelState&>(state).shards().master_base(p.unit) + p.offset;
        return std::vector<float>(w, w + p.init_numel);
    }
    std::vector<size_t> live_shape(const ParamSpec& p) const {
        std::vector<size_t> s = p.shape;
        if (p.name == "wte.weight") s[0] = static_cast<size_t>(mc.vocab_size);
        return s;
    }
};

// ---- independent readers ----

long long h5_int_attr(hid_t file, const char* name) {
    long long v = -1;
    const hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
    EXPECT_GE(attr, 0) << name;
    H5Aread(attr, H5T_NATIVE_LLONG, &v);
    H5Aclose(attr);
    return v;
}

/// Every master element of a single-rank state, unit by unit.
std::vector<std::vector<float>> all_master(ModelState& s) {
    std::vector<std::vector<float>> out;
    for (int u = 0; u < s.layout().num_units(); ++u) {
        const float* m = s.shards().master_base(u);
        out.emplace_back(m, m + s.layout().unit_numel[static_cast<size_t>(u)]);
    }
    return out;
}

/// What an import must produce: the live values, zero in padded rows and alignment gaps,
/// each value passed through `t`'s rounding.
std::vector<std::vector<float>> expected_master(const Fixture& f, DType t) {
    std::vector<std::vector<float>> out;
    for (size_t n : f.layout.unit_numel) out.emplace_back(n, 0.f);
    for (const ParamSpec& p : f.layout.params) {
        std::vector<float> v = f.live(p);
        round_to_dtype(v.data(), v.size(), t);
        std::copy(v.begin(), v.end(), out[static_cast<size_t>(p.unit)].begin() + static_cast<long>(p.offset));
    }
    return out;
}

TEST(Export, H5HoldsTheMasterWeightsExactlyWithoutPaddedRows) {
    Fixture f;
    const std::string out = f.dir.file("w.h5");
    consolidate(f.dir.file("ckpt"), out, DType::kF32, true);  // via `latest`
    EXPECT_FALSE(fs::exists(out + ".partial"));
    const hid_t file = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    EXPECT_EQ(h5_int_attr(file, "step"), 12);
    EXPECT_EQ(h5_int_attr(file, "vocab_size"), 40);
    EXPECT_EQ(h5_int_attr(file, "n_head"), 2);
    EXPECT_EQ(h5_int_attr(file, "n_layer"), 2);
    for (const ParamSpec& p : f.layout.params) {
        std::vector<hsize_t> dims;
        std::string dt;
        const std::vector<float> got = h5_read_floats(file, p.name, dims, &dt);
        const std::vector<size_t> want_shape = f.live_shape(p);
        EXPECT_EQ(std::vector<size_t>(dims.begin(), dims.end()), want_shape) << p.name;
        EXPECT_EQ(dt, "fp32");
        const std::vector<float> want = f.live(p);
        ASSERT_EQ(got.size(), want.size()) << p.name;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << p.name;
        // Optimizer state, same shape, fp32.
        const std::vector<float> m = h5_read_floats(file, "optimizer/" + p.name + "/adam_m", dims, &dt);
        ASSERT_EQ(m.size(), want.size());
        for (size_t i = 0; i < m.size(); ++i) ASSERT_EQ(m[i], 0.5f * static_cast<float>(i)) << p.name;
    }
    H5Fclose(file);
    EXPECT_EQ(test::h5_objects_with_mtime(out), std::vector<std::string>{}) << "the same checkpoint must give the same file";

    // bf16: uint16 bit patterns tagged dtype = "bf16", each the correctly rounded value.
    consolidate(f.step_dir, f.dir.file("w16.h5"), DType::kBF16, false);
    const hid_t f16 = H5Fopen(f.dir.file("w16.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f16, 0);
    const ParamSpec& qkv = f.layout.find("h.1.attn.c_attn.weight");
    std::vector<hsize_t> dims;
    std::string dt;
    const std::vector<float> raw = h5_read_floats(f16, qkv.name, dims, &dt, H5T_NATIVE_UINT16);
    EXPECT_EQ(dt, "bf16");
    const std::vector<float> want = f.live(qkv);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(float_bits(raw[i]), f32_to_bf16(want[i])) << i;
    EXPECT_LT(H5Gopen2(f16, "optimizer", H5P_DEFAULT), 0);  // not asked for
    H5Fclose(f16);
}

TEST(Export, SafetensorsParsesIndependentlyWithHuggingFaceNamesAndLayout) {
    Fixture f;
    const std::string out = f.dir.file("w.safetensors");
    consolidate(f.step_dir, out, DType::kF32, false);
    const SafeTensors st = parse_safetensors(out);
    ASSERT_TRUE(st.header.is_object());
    EXPECT_EQ(st.header["__metadata__"]["format"], "pt");
    for (const auto& kv : st.header["__metadata__"].items()) EXPECT_TRUE(kv.value().is_string()) << kv.key();
    EXPECT_FALSE(st.header.contains("lm_head.weight"));  // tied to wte in GPT-2
    EXPECT_EQ(st.header.size(), f.layout.params.size() + 1);

    // The byte ranges tile the data section exactly.
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& kv : st.header.items()) {
        if (kv.key() == "__metadata__") continue;
        ranges.emplace_back(kv.value()["data_offsets"][0].get<uint64_t>(), kv.value()["data_offsets"][1].get<uint64_t>());
    }
    std::sort(ranges.begin(), ranges.end());
    uint64_t at = 0;
    for (const auto& r : ranges) {
        EXPECT_EQ(r.first, at);
        at = r.second;
    }
    EXPECT_EQ(at, st.data.size());

    const size_t C = 16;
    for (const ParamSpec& p : f.layout.params) {
        const std::string name = "transformer." + p.name;
        ASSERT_TRUE(st.header.contains(name)) << name;
        const nlohmann::json& e = st.header[name];
        EXPECT_EQ(e["dtype"], "F32");
        std::vector<size_t> want_shape = f.live_shape(p);
        if (is_hf_conv1d(p.name)) std::swap(want_shape[0], want_shape[1]);
        EXPECT_EQ(e["shape"].get<std::vector<size_t>>(), want_shape) << name;
        const uint64_t b = e["data_offsets"][0].get<uint64_t>();
        const uint64_t en = e["data_offsets"][1].get<uint64_t>();
        const std::vector<float> live = f.live(p);
        ASSERT_EQ(en - b, live.size() * 4) << name;
        std::vector<float> got(live.size());
        std::memcpy(got.data(), st.data.data() + b, en - b);
        if (is_hf_conv1d(p.name)) {
            const size_t out_dim = p.shape[0];
            const size_t in_dim = p.shape[1];
            for (size_t o = 0; o < out_dim; ++o) {
                for (size_t i = 0; i < in_dim; ++i) {
                    ASSERT_EQ(got[i * out_dim + o], live[o * in_dim + i]) << name << " " << o << "," << i;
                }
            }
        } else {
            EXPECT_EQ(std::memcmp(got.data(), live.data(), en - b), 0) << name;
        }
    }
    EXPECT_EQ(st.header["transformer.h.0.attn.c_attn.weight"]["shape"], nlohmann::json({C, 3 * C}));
    EXPECT_EQ(st.header["transformer.h.0.mlp.c_proj.weight"]["shape"], nlohmann::json({4 * C, C}));
    EXPECT_EQ(st.header["transformer.wte.weight"]["shape"], nlohmann::json({40, C}));

    // 16-bit: F16/BF16 entries of half the size.
    consolidate(f.step_dir, f.dir.file("h.safetensors"), DType::kF16, false);
    const SafeTensors h = parse_safetensors(f.dir.file("h.safetensors"));
    EXPECT_EQ(h.header["transformer.wpe.weight"]["dtype"], "F16");
    EXPECT_EQ(h.data.size() * 2, st.data.size());
}

// A directory output is a Hugging Face model directory: the same safetensors bytes as a file
// output, plus a GPT2Config whose dims match the checkpoint (from_pretrained reads both).
TEST(Export, DirectoryOutputIsAHuggingFaceModelDirectory) {
    Fixture f;
    const std::string file = f.dir.file("w.safetensors");
    consolidate(f.step_dir, file, DType::kBF16, false);
    const std::string hf = f.dir.file("hf") + "/";
    consolidate(f.step_dir, hf, DType::kBF16, false);
    EXPECT_EQ(test::read_file(hf + "model.safetensors"), test::read_file(file));
    const nlohmann::json c = nlohmann::json::parse(test::read_file(hf + "config.json"));
    EXPECT_EQ(c["model_type"], "gpt2");
    EXPECT_EQ(c["architectures"][0], "GPT2LMHeadModel");
    EXPECT_EQ(c["n_layer"], f.mc.n_layer);
    EXPECT_EQ(c["n_head"], f.mc.n_head);
    EXPECT_EQ(c["n_embd"], f.mc.n_embd);
    EXPECT_EQ(c["n_positions"], f.mc.seq_len);
    EXPECT_EQ(c["vocab_size"], f.mc.vocab_size);  // unpadded: the padded rows are not exported
    EXPECT_EQ(c["activation_function"], "gelu_new");
    EXPECT_EQ(c["layer_norm_epsilon"], 1e-5);
    EXPECT_EQ(c["tie_word_embeddings"], true);
    EXPECT_EQ(c["torch_dtype"], "bfloat16");
    EXPECT_TRUE(c["eos_token_id"].is_null());  // not the GPT-2 vocabulary
    EXPECT_EQ(hf_gpt2_config(12, 12, 768, 1024, 50257, DType::kF32)["eos_token_id"], 50256);
    // An existing directory works too, and a rerun replaces both files.
    consolidate(f.step_dir, f.dir.file("hf"), DType::kBF16, false);
    EXPECT_EQ(test::read_file(hf + "model.safetensors"), test::read_file(file));
    std::string msg = input_error_of([&] { consolidate(f.step_dir, hf, DType::kF32, true); });
    EXPECT_NE(msg.find("--with-optimizer"), std::string::npos) << msg;
    // A checkpoint that is refused leaves no directory behind.
    msg = input_error_of([&] { consolidate(f.dir.file("none"), f.dir.file("hf2") + "/", DType::kF32, false); });
    EXPECT_NE(msg.find("none"), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(f.dir.file("hf2")));
}

TEST(Export, ImportReproducesTheWeightsFromBothFormats) {
    Fixture f;
    const auto want = expected_master(f, DType::kF32);
    for (const char* name : {"w.h5", "w.safetensors"}) {
        const std::string file = f.dir.file(name);
        consolidate(f.step_dir, file, DType::kF32, false);
        ModelState b(f.layout, *f.backend, 99);
        import_weights(file, f.layout, f.mc, b);
        const auto got = all_master(b);
        for (size_t u = 0; u < got.size(); ++u) {
            ASSERT_EQ(std::memcmp(got[u].data(), want[u].data(), got[u].size() * sizeof(float)), 0)
                << name << " unit " << u;
        }
    }
    // 16-bit files: exactly the rounded values (the import widens without further error).
    for (DType t : {DType::kBF16, DType::kF16}) {
        for (const char* ext : {".h5", ".safetensors"}) {
            const std::string file = f.dir.file(std::string("r_") + dtype_name(t) + ext);
            consolidate(f.step_dir, file, t, false);
            ModelState b(f.layout, *f.backend, 99);
            import_weights(file, f.layout, f.mc, b);
            const auto rounded = expected_master(f, t);
            const auto got = all_master(b);
            for (size_t u = 0; u < got.size(); ++u) {
                ASSERT_EQ(std::memcmp(got[u].data(), rounded[u].data(), got[u].size() * sizeof(float)), 0)
                    << file << " unit " << u;
                for (size_t i = 0; i < got[u].size(); ++i) {
                    ASSERT_NEAR(got[u][i], want[u][i], std::fabs(want[u][i]) * (t == DType::kBF16 ? 4e-3 : 5e-4) + 1e-7);
                }
            }
        }
    }
    // A 16-bit working copy is re-derived from the imported master weights.
    ModelState c(f.layout, *f.backend, self_communicator(),
                 StateOptions::zero(0).with_seed(3).in(DType::kBF16, DType::kBF16));
    import_weights(f.dir.file("w.safetensors"), f.layout, f.mc, c);
    const float* w = c.acquire(0);
    EXPECT_EQ(w[f.layout.find("wpe.weight").offset], bf16_to_f32(f32_to_bf16(want[0][f.layout.find("wpe.weight").offset])));
    c.release(0);
}

// A tensor over the import's piece (2^20 floats: a 70000-word embedding, 16 wide) is read a
// piece at a time, not whole: every weight is still reproduced exactly.
TEST(Export, ImportReadsALargeTensorInPiecesExactly) {
    Fixture f(test::model_config(1, 2, 16, 8, 70000, 64));
    ASSERT_GT(f.layout.find("wte.weight").init_numel, size_t{1} << 20);
    const auto want = expected_master(f, DType::kF32);
    const std::string file = f.dir.file("large.safetensors");
    consolidate(f.step_dir, file, DType::kF32, false);
    ModelState b(f.layout, *f.backend, 99);
    import_weights(file, f.layout, f.mc, b);
    const auto got = all_master(b);
    for (size_t u = 0; u < got.size(); ++u) {
        ASSERT_EQ(std::memcmp(got[u].data(), want[u].data(), got[u].size() * sizeof(float)), 0) << "unit " << u;
    }
}

/// save_pretrained's split (huggingface_hub's split_state_dict_into_shards_factory), written
/// again here from its definition: tensors in order, a shard closed when the next tensor would
/// take it over `limit`, a tensor over `limit` alone in a shard listed at once.
std::vector<std::vector<std::string>> hf_split(const std::vector<std::pair<std::string, uint64_t>>& tensors,
                                               uint64_t limit) {
    std::vector<std::vector<std::string>> shards;
    std::vector<std::string> current;
    uint64_t size = 0;
    for (const auto& [name, bytes] : tensors) {
        if (bytes > limit) {
            shards.push_back({name});
            continue;
        }
        if (size + bytes > limit) {
            shards.push_back(current);
            current.clear();
            size = 0;
        }
        current.push_back(name);
        size += bytes;
    }
    if (!current.empty()) shards.push_back(current);
    return shards;
}

// A directory's weights split at max_shard_bytes: the shards and the index save_pretrained
// would write for the same tensors in the same order (names, weight_map, metadata), each
// shard holding its tensors' bytes; they import as the single file does; and each export
// removes the other layout's files, which a loader would otherwise read first.
TEST(Export, ShardedDirectoryIsSplitAsSavePretrainedSplits) {
    Fixture f;
    const std::string single = f.dir.file("single") + "/";
    consolidate(f.step_dir, single, DType::kF32, false);
    const SafeTensors whole = parse_safetensors(single + "model.safetensors");
    std::vector<std::pair<uint64_t, std::string>> by_offset;
    for (const auto& kv : whole.header.items()) {
        if (kv.key() != "__metadata__") by_offset.emplace_back(kv.value()["data_offsets"][0].get<uint64_t>(), kv.key());
    }
    std::sort(by_offset.begin(), by_offset.end());  // the order the tensors were written in
    std::vector<std::pair<std::string, uint64_t>> tensors;
    uint64_t total = 0;
    for (const auto& [offset, name] : by_offset) {
        const auto& off = whole.header[name]["data_offsets"];
        tensors.emplace_back(name, off[1].get<uint64_t>() - off[0].get<uint64_t>());
        total += tensors.back().second;
    }
    const uint64_t limit = 2000;  // under wte (2560 B) and the matrices: those get shards of their own
    const std::string hf = f.dir.file("sharded") + "/";
    const std::vector<std::string> files = consolidate(f.step_dir, hf, DType::kF32, false, limit);
    const std::vector<std::vector<std::string>> want = hf_split(tensors, limit);
    ASSERT_EQ(files.size(), want.size());
    const nlohmann::json index = nlohmann::json::parse(test::read_file(hf + "model.safetensors.index.json"));
    EXPECT_EQ(index["metadata"]["total_size"], total);
    EXPECT_EQ(index["metadata"]["total_parameters"], total / 4);
    EXPECT_EQ(index["weight_map"].size(), tensors.size());
    for (size_t k = 0; k < want.size(); ++k) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, want.size());
        EXPECT_EQ(files[k], hf + name);
        const SafeTensors shard = parse_safetensors(files[k]);
        EXPECT_EQ(shard.header["__metadata__"]["format"], "pt") << name;
        EXPECT_EQ(shard.header.size(), want[k].size() + 1) << name;
        for (const std::string& t : want[k]) {
            EXPECT_EQ(index["weight_map"].value(t, ""), name) << t;
            ASSERT_TRUE(shard.header.contains(t)) << name << " lacks " << t;
            const auto& a = shard.header[t]["data_offsets"];
            const auto& b = whole.header[t]["data_offsets"];
            EXPECT_EQ(shard.data.substr(a[0].get<size_t>(), a[1].get<size_t>() - a[0].get<size_t>()),
                      whole.data.substr(b[0].get<size_t>(), b[1].get<size_t>() - b[0].get<size_t>()))
                << t;
        }
    }
    EXPECT_EQ(test::read_file(hf + "config.json"), test::read_file(single + "config.json"));
    EXPECT_FALSE(fs::exists(hf + "model.safetensors"));
    ModelState b(f.layout, *f.backend, 99);
    import_weights(hf, f.layout, f.mc, b);
    const auto got = all_master(b);
    const auto exact = expected_master(f, DType::kF32);
    for (size_t u = 0; u < got.size(); ++u) {
        ASSERT_EQ(std::memcmp(got[u].data(), exact[u].data(), got[u].size() * sizeof(float)), 0) << "unit " << u;
    }
    // Unsharded into the same directory: the shards and the index go; and back again.
    consolidate(f.step_dir, hf, DType::kF32, false, 1000000);  // everything fits one file
    EXPECT_EQ(test::read_file(hf + "model.safetensors"), test::read_file(single + "model.safetensors"));
    EXPECT_FALSE(fs::exists(hf + "model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(files[0]));
    EXPECT_EQ(consolidate(f.step_dir, hf, DType::kF32, false, limit), files);
    EXPECT_FALSE(fs::exists(hf + "model.safetensors"));
    // Sizes as save_pretrained reads them; a file output cannot be split.
    EXPECT_EQ(parse_max_shard_size("5GB"), 5000000000u);
    EXPECT_EQ(parse_max_shard_size("0.5mb"), 500000u);
    EXPECT_EQ(parse_max_shard_size(" 2 KB "), 2000u);
    EXPECT_EQ(parse_max_shard_size("1234"), 1234u);
    for (const char* bad : {"", "GB", "5XB", "5GiB", "-1MB", "1.2.3KB", "0"}) {
        const std::string msg = input_error_of([&] { parse_max_shard_size(bad); });
        EXPECT_NE(msg.find("--max-shard-size '"), std::string::npos) << bad << ": " << msg;
    }
    const std::string msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("x.safetensors"), DType::kF32, false, limit); });
    EXPECT_NE(msg.find("--max-shard-size"), std::string::npos) << msg;
}

TEST(Export, ImportAcceptsExportsWithoutPrefixAndWithATiedHead) {
    Fixture f;
    const std::string src = f.dir.file("w.safetensors");
    consolidate(f.step_dir, src, DType::kF32, false);
    SafeTensors st = parse_safetensors(src);
    nlohmann::json h;
    for (const auto& kv : st.header.items()) {
        const std::string k = kv.key().rfind("transformer.", 0) == 0 ? kv.key().substr(12) : kv.key();
        h[k] = kv.value();
    }
    // lm_head.weight as a separate copy of wte (what torch.save-style exports hold).
    const auto& wte = h["wte.weight"];
    const uint64_t b = wte["data_offsets"][0].get<uint64_t>();
    const uint64_t e = wte["data_offsets"][1].get<uint64_t>();
    h["lm_head.weight"] = {{"dtype", "F32"}, {"shape", wte["shape"]}, {"data_offsets", {st.data.size(), st.data.size() + e - b}}};
    const std::string data = st.data + st.data.substr(b, e - b);
    const std::string file = f.dir.file("noprefix.safetensors");
    write_safetensors(file, h, data);
    ModelState s(f.layout, *f.backend, 99);
    import_weights(file, f.layout, f.mc, s);
    const auto want = expected_master(f, DType::kF32);
    const auto got = all_master(s);
    for (size_t u = 0; u < got.size(); ++u) EXPECT_EQ(got[u], want[u]) << u;
}

TEST(Export, MalformedFilesAreRefusedNamingTheFile) {
    Fixture f;
    const std::string src = f.dir.file("w.safetensors");
    consolidate(f.step_dir, src, DType::kF32, false);
    const SafeTensors st = parse_safetensors(src);
    ModelState s(f.layout, *f.backend, 99);
    const std::string bad = f.dir.file("bad.safetensors");
    const auto refused = [&](const std::string& what, const std::string& needle) {
        const std::string msg = input_error_of([&] { import_weights(bad, f.layout, f.mc, s); });
        EXPECT_NE(msg.find(bad), std::string::npos) << what << ": " << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
    };

    write_safetensors(bad, st.header, st.data, uint64_t{1} << 40);
    refused("header length larger than the file", "header length");
    write_safetensors(bad, st.header, st.data, st.header_len + st.data.size() + 1);  // one byte too many
    refused("header length larger than the file", "exceeds the file size");

    nlohmann::json h = st.header;
    h["transformer.ln_f.bias"]["data_offsets"][1] = st.data.size() + 64;
    write_safetensors(bad, h, st.data);
    refused("offsets out of range", "transformer.ln_f.bias");

    h = st.header;
    h["transformer.h.0.attn.c_attn.weight"]["shape"] = {48, 16};  // ztrain's orientation: wrong here
    write_safetensors(bad, h, st.data);
    refused("wrong shape", "expected [16, 48]");

    h = st.header;
    h["transformer.wte.weight"]["dtype"] = "BF16";  // half the bytes the range holds
    write_safetensors(bad, h, st.data);
    refused("offsets inconsistent with the dtype", "transformer.wte.weight");

    h = st.header;
    h.erase("transformer.ln_f.bias");
    write_safetensors(bad, h, st.data);
    refused("missing tensor", "missing tensor transformer.ln_f.bias");

    h = st.header;
    h["transformer.h.2.ln_1.weight"] = h["transformer.h.1.ln_1.weight"];
    h["transformer.h.2.ln_1.weight"]["data_offsets"] = {st.data.size(), st.data.size() + 64};
    write_safetensors(bad, h, st.data + std::string(64, '\0'));
    refused("tensor of a deeper model", "unexpected tensor h.2.ln_1.weight");

    h = st.header;
    h["transformer.wpe.weight"]["data_offsets"] = h["transformer.wte.weight"]["data_offsets"];
    h["transformer.wpe.weight"]["shape"] = h["transformer.wte.weight"]["shape"];
    write_safetensors(bad, h, st.data);
    refused("overlapping ranges", "overlap");

    h = st.header;
    h["transformer.wpe.weight"]["shape"] = {-8, -16};
    write_safetensors(bad, h, st.data);
    refused("negative sizes", "transformer.wpe.weight");

    std::string not_json = "{\"transformer.wte.weight\": {\"dtype\": \"F32\", \"shape\": [4";
    not_json.append((8 - not_json.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(not_json.size());
    test::write_file(bad, bytes + not_json);
    refused("not JSON", "JSON");

    test::write_file(bad, "abc");
    refused("too short", "too short");

    // .h5 written for another model: the tensor and both shapes are named.
    const std::string h5 = f.dir.file("w.h5");
    consolidate(f.step_dir, h5, DType::kF32, false);
    ModelConfig wider = f.mc;
    wider.n_embd = 32;
    const ModelLayout wl = make_model_layout(wider);
    ModelState ws(wl, *f.backend, 1);
    std::string msg = input_error_of([&] { import_weights(h5, wl, wider, ws); });
    EXPECT_NE(msg.find(h5), std::string::npos) << msg;
    EXPECT_NE(msg.find("wte.weight has shape [40, 16], expected [40, 32]"), std::string::npos) << msg;
    // ...and a deeper one (a tensor missing), and a garbage file.
    ModelConfig deeper = f.mc;
    deeper.n_layer = 3;
    const ModelLayout dl = make_model_layout(deeper);
    ModelState ds(dl, *f.backend, 1);
    msg = input_error_of([&] { import_weights(h5, dl, deeper, ds); });
    EXPECT_NE(msg.find("missing tensor h.2.ln_1.weight"), std::string::npos) << msg;
    test::write_file(f.dir.file("junk.h5"), "not hdf5 at all");
    msg = input_error_of([&] { import_weights(f.dir.file("junk.h5"), f.layout, f.mc, s); });
    EXPECT_NE(msg.find("junk.h5"), std::string::npos) << msg;

    // Names the wrong kind of file or a missing one.
    msg = input_error_of([&] { import_weights(f.dir.file("w.bin"), f.layout, f.mc, s); });
    EXPECT_NE(msg.find("w.bin"), std::string::npos) << msg;
    msg = input_error_of([&] { import_weights(f.dir.file("nope.safetensors"), f.layout, f.mc, s); });
    EXPECT_NE(msg.find("nope.safetensors"), std::string::npos) << msg;
}

TEST(Export, ConsolidateRefusesBadInputAndDescribesCheckpoints) {
    Fixture f;
    std::string msg = input_error_of([&] { consolidate(f.dir.file("none"), f.dir.file("x.h5"), DType::kF32, false); });
    EXPECT_NE(msg.find("none"), std::string::npos) << msg;
    msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("x.pt"), DType::kF32, false); });
    EXPECT_NE(msg.find("x.pt"), std::string::npos) << msg;
    msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("x.safetensors"), DType::kF32, true); });
    EXPECT_NE(msg.find("--with-optimizer"), std::string::npos) << msg;
    msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("no/such/dir/x.h5"), DType::kF32, false); });
    EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;

    // A damaged shard is caught by the checkpoint reader; no output file is left behind.
    const std::string shard = f.step_dir + "/shard_00000_of_00001.h5";
    const std::string pristine = test::read_file(shard);
    std::string damaged = pristine;
    damaged[damaged.size() / 2] ^= 0x20;
    test::write_file(shard, damaged);
    msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("d.h5"), DType::kF32, false); });
    EXPECT_NE(msg.find(shard), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(f.dir.file("d.h5")));
    EXPECT_FALSE(fs::exists(f.dir.file("d.h5.partial")));
    test::write_file(shard, pristine);

    const std::string info = checkpoint_info(f.dir.file("ckpt"));
    for (const char* want : {"step 12", "1 rank(s)", "ZeRO stage 0", "h.1.mlp.c_fc.weight", "[64, 16]", "[40, 16]",
                             "shard_00000_of_00001.h5", "vocab 40 (padded 64)"}) {
        EXPECT_NE(info.find(want), std::string::npos) << want << "\n" << info;
    }
}

/// Rewrites a checkpoint's meta.h5 (and CHECKSUM) as ztrain up to b08fcb7 wrote it: format
/// version 1, a model record without vocab_pad_to and init_from (or, with `record` false,
/// none: the oldest checkpoints), and the deck `config_ini`. meta_json is stored as
/// save_checkpoint stores it: uint8, chunked, Fletcher32.
void rewrite_as_version_1(const std::string& step_dir, bool record, const std::string& config_ini) {
    nlohmann::json meta = read_checkpoint_meta(step_dir);
    meta["version"] = 1;
    meta["config_ini"] = config_ini;
    if (record) {
        meta["model"].erase("vocab_pad_to");
        meta["model"].erase("init_from");
    } else {
        meta.erase("model");
    }
    const std::string text = meta.dump(1);
    const std::string file = step_dir + "/meta.h5";
    const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hsize_t dims[1] = {text.size()};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_chunk(dcpl, 1, dims), 0);
    ASSERT_GE(H5Pset_fletcher32(dcpl), 0);
    const hid_t ds = H5Dcreate2(f, "meta_json", H5T_NATIVE_UINT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
    write_checksum_file(step_dir, file);
}

// Checkpoints of format version 1 (ztrain up to b08fcb7) still resume and consolidate: their
// model comes from the stored deck, read by the config parser, under the partial record.
TEST(Export, Version1CheckpointsStillLoadAndConsolidate) {
    Fixture f;
    EXPECT_EQ(read_checkpoint_meta(f.step_dir)["version"], 2);
    const nlohmann::json v2_model = read_checkpoint_meta(f.step_dir)["model"];
    EXPECT_EQ(v2_model["vocab_pad_to"], f.mc.vocab_pad_to) << v2_model.dump();
    EXPECT_EQ(v2_model["n_head"], f.mc.n_head) << v2_model.dump();

    // The deck says vocab_pad_to = 32 (the record does not hold it): the .h5 reports the deck's.
    Config cfg;
    cfg.model = f.mc;
    cfg.model.vocab_pad_to = 32;
    rewrite_as_version_1(f.step_dir, true, to_ini(cfg));
    ModelState b(f.layout, *f.backend, 99);
    const CheckpointRecord loaded = load_checkpoint(f.step_dir, b, self_communicator());
    EXPECT_EQ(loaded.progress.step, 12);
    EXPECT_EQ(loaded.seed, 5u);
    EXPECT_EQ(ModelStateTestAccess::owned_optimizer_state(b), ModelStateTestAccess::owned_optimizer_state(f.state));
    consolidate(f.step_dir, f.dir.file("v1.h5"), DType::kF32, false);
    const hid_t h5 = H5Fopen(f.dir.file("v1.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(h5, 0);
    EXPECT_EQ(h5_int_attr(h5, "vocab_pad_to"), 32);
    EXPECT_EQ(h5_int_attr(h5, "vocab_size"), f.mc.vocab_size);
    H5Fclose(h5);

    // No model record at all: every dimension comes from the deck.
    cfg.model.n_head = 4;  // differs from the record it replaces, so the deck is what is read
    rewrite_as_version_1(f.step_dir, false, to_ini(cfg));
    consolidate(f.step_dir, f.dir.file("hf") + "/", DType::kF32, false);
    const nlohmann::json c = nlohmann::json::parse(test::read_file(f.dir.file("hf") + "/config.json"));
    EXPECT_EQ(c["n_head"], 4);
    EXPECT_EQ(c["vocab_size"], f.mc.vocab_size);
    const std::string info = checkpoint_info(f.step_dir);
    EXPECT_NE(info.find("4 heads"), std::string::npos) << info;

    // Neither a record nor a deck: the padded rows cannot be told apart, so it is refused.
    rewrite_as_version_1(f.step_dir, false, "");
    std::string msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("x.h5"), DType::kF32, false); });
    EXPECT_NE(msg.find("does not record model.vocab_size"), std::string::npos) << msg;
    // A deck the config parser rejects is named as the checkpoint's.
    rewrite_as_version_1(f.step_dir, false, "[model]\nno_such_key = 1\n");
    msg = input_error_of([&] { consolidate(f.step_dir, f.dir.file("x.h5"), DType::kF32, false); });
    EXPECT_NE(msg.find("config_ini"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no_such_key"), std::string::npos) << msg;
    // Resume never needed the model record: it still loads.
    EXPECT_NO_THROW(load_checkpoint(f.step_dir, b, self_communicator()));
}

}  // namespace
}  // namespace zt
