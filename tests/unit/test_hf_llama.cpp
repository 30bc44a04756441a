// Llama checkpoints in and out of Hugging Face form (issue 16): zt-consolidate's directory
// and .safetensors exports (LlamaConfig, HF names, (out, in), lm_head only when untied,
// vocabulary rows cut) import back bit-exactly in fp32, from one file or from shards with an
// index; model.from_hf fills the model keys from config.json; bad directories, configs,
// indexes and tensors are refused naming the file and the field or tensor; and the numpy
// reference (tests/reference/llama_reference.py --hf), reading the exported directory on
// its own, computes the loss ztrain computes from the same checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
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
#include "ztrain/core/random.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace fs = std::filesystem;

namespace zt {
namespace {

using test::input_error_of;
using test::parse_safetensors;
using test::SafeTensors;
using test::write_safetensors;

struct Case {
    const char* name;
    int n_kv_head;
    bool tied;
    bool llama3;
};

const Case kCases[] = {{"gqa_tied", 2, true, false},
                       {"mha_untied", 4, false, false},
                       {"gqa_untied_llama3", 1, false, true},
                       {"mha_tied_llama3", 4, true, true}};

ModelConfig llama_model(const Case& c) { return test::small_llama(c.n_kv_head, c.tied, c.llama3); }

/// A saved Llama checkpoint whose every live element is distinct (weights well away from
/// the init, so the loss check exercises every nonlinearity) and whose padded vocabulary
/// rows hold garbage that export must cut and import must zero.
struct LlamaCkpt {
    explicit LlamaCkpt(const Case& c) : mc(llama_model(c)), layout(make_model_layout(mc)) {
        for (const ParamSpec& p : layout.params) {
            float* w = state.shards().master_base(p.unit) + p.offset;
            for (size_t i = 0; i < p.numel; ++i) {
                w[i] = i < p.init_numel ? w[i] + static_cast<float>(0.2 * random_normal(9, 3, p.global_index + i))
                                        : 1234.5f;
            }
        }
        Config cfg;
        cfg.model = mc;
        CheckpointRecord record;
        record.progress.step = 7;
        record.dtype = "fp32";
        record.seed = 5;
        record.config_ini = to_ini(cfg);
        step_dir = save_checkpoint(dir.file("ckpt"), state, self_communicator(), record, 2);
    }
    /// What an import must produce: live values (rounded to `t`), zero elsewhere.
    std::vector<std::vector<float>> expected(DType t = DType::kF32) {
        std::vector<std::vector<float>> out;
        for (size_t n : layout.unit_numel) out.emplace_back(n, 0.f);
        for (const ParamSpec& p : layout.params) {
            std::vector<float> v(state.shards().master_base(p.unit) + p.offset, state.shards().master_base(p.unit) + p.offset + p.init_numel);
            round_to_dtype(v.data(), v.size(), t);
            std::copy(v.begin(), v.end(), out[static_cast<size_t>(p.unit)].begin() + static_cast<long>(p.offset));
        }
        return out;
    }
    /// Imports `path` into a fresh state and checks it holds exactly expected(t).
    void expect_imports_exactly(const std::string& path, DType t = DType::kF32) {
        ModelState b(layout, *backend, 99);
        import_weights(path, layout, mc, b);
        const auto want = expected(t);
        for (int u = 0; u < layout.num_units(); ++u) {
            ASSERT_EQ(std::memcmp(b.shards().master_base(u), want[static_cast<size_t>(u)].data(),
                                  want[static_cast<size_t>(u)].size() * sizeof(float)),
                      0)
                << path << " unit " << u;
        }
    }

    ModelConfig mc;
    ModelLayout layout;
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    test::ScratchDir dir{"hf-llama"};
    ModelState state{layout, *backend, 5};
    std::string step_dir;
};

class HfLlama : public ::testing::TestWithParam<Case> {};

TEST_P(HfLlama, DirectoryAndFileExportsImportBackBitExactly) {
    LlamaCkpt f(GetParam());
    const ModelConfig& mc = f.mc;
    const std::string hf = f.dir.file("hf") + "/";
    consolidate(f.step_dir, hf, DType::kF32, false);
    const nlohmann::json c = nlohmann::json::parse(test::read_file(hf + "config.json"));
    EXPECT_EQ(c["architectures"], nlohmann::json({"LlamaForCausalLM"}));
    EXPECT_EQ(c["model_type"], "llama");
    EXPECT_EQ(c["hidden_size"], 16);
    EXPECT_EQ(c["intermediate_size"], 24);
    EXPECT_EQ(c["num_attention_heads"], 4);
    EXPECT_EQ(c["num_key_value_heads"], mc.kv_heads());
    EXPECT_EQ(c["num_hidden_layers"], 2);
    EXPECT_EQ(c["rms_norm_eps"], 1e-5);
    EXPECT_EQ(c["rope_theta"], 100.0);
    EXPECT_EQ(c["tie_word_embeddings"], mc.tie_embeddings);
    EXPECT_EQ(c["vocab_size"], 37);  // unpadded
    EXPECT_EQ(c["max_position_embeddings"], 8);
    EXPECT_EQ(c["torch_dtype"], "float32");
    EXPECT_EQ(c["hidden_act"], "silu");
    if (GetParam().llama3) {
        EXPECT_EQ(c["rope_scaling"], nlohmann::json({{"rope_type", "llama3"},
                                                     {"factor", 2.0},
                                                     {"low_freq_factor", 1.0},
                                                     {"high_freq_factor", 4.0},
                                                     {"original_max_position_embeddings", 16}}));
    } else {
        EXPECT_TRUE(c["rope_scaling"].is_null());
    }
    // HF names and (out, in) shapes; a tied model has no lm_head.weight, as HF saves it.
    const SafeTensors st = parse_safetensors(hf + "model.safetensors");
    EXPECT_EQ(st.header.size(), f.layout.params.size() + 1);  // + __metadata__
    EXPECT_EQ(st.header.contains("lm_head.weight"), !mc.tie_embeddings);
    EXPECT_EQ(st.header["model.embed_tokens.weight"]["shape"], nlohmann::json({37, 16}));
    EXPECT_EQ(st.header["model.layers.1.self_attn.k_proj.weight"]["shape"],
              nlohmann::json({static_cast<size_t>(mc.kv_heads()) * 4, 16}));
    EXPECT_EQ(st.header["model.layers.0.mlp.down_proj.weight"]["shape"], nlohmann::json({16, 24}));
    const ParamSpec& q = f.layout.find("model.layers.1.self_attn.q_proj.weight");
    const auto& qe = st.header[q.name]["data_offsets"];
    EXPECT_EQ(std::memcmp(st.data.data() + qe[0].get<size_t>(), f.state.shards().master_base(q.unit) + q.offset, q.numel * 4),
              0);

    f.expect_imports_exactly(hf);
    f.expect_imports_exactly(f.dir.file("hf"));  // without the slash
    const std::string file = f.dir.file("w.safetensors");
    consolidate(f.step_dir, file, DType::kF32, false);
    EXPECT_EQ(test::read_file(file), test::read_file(hf + "model.safetensors"));
    f.expect_imports_exactly(file);
    // 16-bit exports hold exactly the rounded values.
    consolidate(f.step_dir, f.dir.file("bf16") + "/", DType::kBF16, false);
    EXPECT_EQ(nlohmann::json::parse(test::read_file(f.dir.file("bf16/config.json")))["torch_dtype"], "bfloat16");
    f.expect_imports_exactly(f.dir.file("bf16"), DType::kBF16);

    // from_hf reads back the model the export describes.
    Config back;
    for (const HfSetting& s : read_hf_config(hf)) set_config_value(back, s.key, s.text);
    back.model.vocab_pad_to = mc.vocab_pad_to;
    EXPECT_EQ(to_ini(back), [&] {
        Config want;
        want.model = mc;
        return to_ini(want);
    }());
}

// The exported directory, read by the numpy reference alone (its own safetensors parser,
// LlamaConfig's fields), gives the loss ztrain computes from the checkpoint.
TEST_P(HfLlama, NumpyReferenceReadsTheExportAndAgreesOnTheLoss) {
    const std::string python = test::numpy_python();
    if (python.empty()) GTEST_SKIP() << "no python3 with numpy ($ZT_PYTHON, python3, /usr/bin/python3)";
    LlamaCkpt f(GetParam());
    const std::string hf = f.dir.file("hf") + "/";
    consolidate(f.step_dir, hf, DType::kF32, false);
    const int B = 2;
    const int T = f.mc.seq_len;
    std::vector<int32_t> inputs(static_cast<size_t>(B * T)), targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>(random_bits(4, 1, i) % static_cast<uint64_t>(f.mc.vocab_size));
        targets[i] = static_cast<int32_t>(random_bits(4, 2, i) % static_cast<uint64_t>(f.mc.vocab_size));
    }
    const std::vector<size_t> shape{static_cast<size_t>(B), static_cast<size_t>(T)};
    test::write_npy(f.dir.file("tokens.npy"), inputs.data(), "<i4", 4, shape);
    test::write_npy(f.dir.file("targets.npy"), targets.data(), "<i4", 4, shape);
    const std::string cmd =
        str(python, " ", ZT_SOURCE_DIR, "/tests/reference/llama_reference.py --hf ", hf, " ", f.dir.path());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(f.dir.file("hf_reference.json"));
    const double ref = nlohmann::json::parse(in).at("loss").get<double>();

    Transformer model(f.mc, *f.backend, B);
    ModelState s(model.layout(), *f.backend, 1);
    load_checkpoint(f.step_dir, s, self_communicator());
    const float loss = model.forward(s, inputs.data(), targets.data(), B, T, 1.0f / static_cast<float>(B * T));
    EXPECT_LT(std::fabs(loss - ref) / ref, 1e-5) << loss << " vs numpy " << ref;
    std::printf("[%s] ztrain loss %.9g, numpy on the HF export %.9g\n", GetParam().name, loss, ref);
}

INSTANTIATE_TEST_SUITE_P(Llama, HfLlama, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

/// Splits DIR/model.safetensors into two shards (tensors alternating) plus an index, and
/// removes model.safetensors. Returns the two shards' headers for further tampering.
void shard(const std::string& dir, const SafeTensors& st) {
    nlohmann::json h[2];
    std::string data[2];
    nlohmann::json weight_map;
    int k = 0;
    for (const auto& kv : st.header.items()) {
        if (kv.key() == "__metadata__") continue;
        const size_t b = kv.value()["data_offsets"][0].get<size_t>();
        const size_t e = kv.value()["data_offsets"][1].get<size_t>();
        nlohmann::json entry = kv.value();
        entry["data_offsets"] = {data[k].size(), data[k].size() + e - b};
        data[k] += st.data.substr(b, e - b);
        h[k][kv.key()] = entry;
        weight_map[kv.key()] = str("model-0000", k + 1, "-of-00002.safetensors");
        k = 1 - k;
    }
    for (int i = 0; i < 2; ++i) write_safetensors(str(dir, "/model-0000", i + 1, "-of-00002.safetensors"), h[i], data[i]);
    test::write_file(dir + "/model.safetensors.index.json",
                     nlohmann::json({{"metadata", {{"total_size", st.data.size()}}}, {"weight_map", weight_map}}).dump(1));
    fs::remove(dir + "/model.safetensors");
}

TEST(HfLlamaImport, ShardedDirectoriesImportAndBadIndexesAreRefused) {
    LlamaCkpt f(kCases[1]);
    const std::string hf = f.dir.file("hf");
    consolidate(f.step_dir, hf + "/", DType::kF32, false);
    const SafeTensors st = parse_safetensors(hf + "/model.safetensors");
    shard(hf, st);
    f.expect_imports_exactly(hf);

    const std::string index_file = hf + "/model.safetensors.index.json";
    const std::string index = test::read_file(index_file);
    ModelState s(f.layout, *f.backend, 1);
    const auto refused = [&](const std::string& what, std::initializer_list<std::string> needles) {
        const std::string msg = input_error_of([&] { import_weights(hf, f.layout, f.mc, s); });
        for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << what << ": " << msg;
    };
    nlohmann::json j = nlohmann::json::parse(index);
    j["weight_map"]["model.norm.weight"] = "model-00003-of-00003.safetensors";
    test::write_file(index_file, j.dump());
    refused("missing shard", {index_file, "model-00003-of-00003.safetensors", "does not exist"});

    j = nlohmann::json::parse(index);
    j["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
    test::write_file(index_file, j.dump());
    refused("shard outside the directory", {index_file, "no directories"});

    // A NUL ends the name the file system sees: every shard renamed "NAME\0" used to open
    // NAME and import (fuzz_hf_dir).
    j = nlohmann::json::parse(index);
    for (auto& kv : j["weight_map"].items()) kv.value() = kv.value().get<std::string>() + std::string(1, '\0');
    test::write_file(index_file, j.dump());
    refused("NUL in a shard name", {index_file, "weight_map[", "-of-00002.safetensors\\u0000\"", "NUL character"});

    // A name longer than NAME_MAX: the file system's refusal used to escape as a
    // std::filesystem::filesystem_error (fuzz_hf_dir).
    j = nlohmann::json::parse(index);
    j["weight_map"]["model.norm.weight"] = std::string(300, 'x') + ".safetensors";
    test::write_file(index_file, j.dump());
    refused("shard name too long", {index_file, "model.norm.weight", "cannot be opened", "File name too long"});

    // The index says shard 1, the tensor sits in shard 2.
    j = nlohmann::json::parse(index);
    const std::string norm_shard = j["weight_map"]["model.norm.weight"];
    const std::string other = norm_shard == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                                              : "model-00001-of-00002.safetensors";
    j["weight_map"]["model.norm.weight"] = other;
    test::write_file(index_file, j.dump());
    refused("wrong shard", {index_file, "model.norm.weight", "lists it in " + other});

    // The same tensor in both shards.
    test::write_file(index_file, index);
    const std::string other_file = hf + "/" + other;
    SafeTensors o = parse_safetensors(other_file);
    nlohmann::json oh = o.header;
    oh["model.norm.weight"] = {{"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {o.data.size(), o.data.size() + 64}}};
    const std::string pristine = test::read_file(other_file);
    write_safetensors(other_file, oh, o.data + std::string(64, '\0'));
    refused("tensor in two shards", {index_file, "model.norm.weight", "two shards"});
    test::write_file(other_file, pristine);

    // A tensor listed twice (JSON keeps only the last, so the text is built by hand).
    std::string twice = index;
    const size_t at = twice.find("\"weight_map\": {") + std::strlen("\"weight_map\": {");
    twice.insert(at, "\"model.norm.weight\": \"" + other + "\",");
    test::write_file(index_file, twice);
    refused("listed twice", {index_file, "model.norm.weight", "twice"});

    test::write_file(index_file, "{\"weight_map\": {\"model.norm.weight\": ");
    refused("not JSON", {index_file, "JSON"});
    test::write_file(index_file, "{\"weight_map\": [1, 2]}");
    refused("weight_map not an object", {index_file, "weight_map"});
    fs::remove(index_file);
    refused("no weights", {hf, "neither model.safetensors nor model.safetensors.index.json"});
}

TEST(HfLlamaImport, BadDirectoriesAndTensorsAreRefusedNamingFileAndField) {
    LlamaCkpt f(kCases[0]);
    const std::string hf = f.dir.file("hf");
    consolidate(f.step_dir, hf + "/", DType::kF32, false);
    const std::string config_file = hf + "/config.json";
    const std::string config = test::read_file(config_file);
    const std::string weights = hf + "/model.safetensors";
    const SafeTensors st = parse_safetensors(weights);
    ModelState s(f.layout, *f.backend, 1);
    const auto refused = [&](const std::string& what, std::initializer_list<std::string> needles) {
        const std::string msg = input_error_of([&] { import_weights(hf, f.layout, f.mc, s); });
        for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << what << ": " << msg;
    };
    const auto with_config = [&](const std::function<void(nlohmann::json&)>& edit) {
        nlohmann::json c = nlohmann::json::parse(config);
        edit(c);
        test::write_file(config_file, c.dump(1));
    };

    test::write_file(config_file, "{\"model_type\": \"llama\",");
    refused("config.json not JSON", {config_file, "not valid JSON"});
    with_config([](nlohmann::json& c) { c["num_hidden_layers"] = 3; });
    refused("deck differs", {config_file, "num_hidden_layers = 3", "model.n_layer = 2"});
    with_config([](nlohmann::json& c) { c["rms_norm_eps"] = 1e-6; });
    refused("deck differs", {config_file, "rms_norm_eps = 1e-06", "model.norm_eps = 1e-05"});
    with_config([](nlohmann::json& c) { c["num_key_value_heads"] = 3; });
    refused("GQA split", {config_file, "num_key_value_heads = 3 does not divide num_attention_heads = 4"});
    with_config([](nlohmann::json& c) { c["head_dim"] = 8; });
    refused("head_dim", {config_file, "head_dim = 8"});
    with_config([](nlohmann::json& c) { c["attention_bias"] = true; });
    refused("attention_bias", {config_file, "attention_bias = true"});
    with_config([](nlohmann::json& c) { c["mlp_bias"] = true; });
    refused("mlp_bias", {config_file, "mlp_bias = true"});
    with_config([](nlohmann::json& c) { c["hidden_act"] = "gelu"; });
    refused("hidden_act", {config_file, "hidden_act = \"gelu\""});
    with_config([](nlohmann::json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
    refused("rope_type", {config_file, "rope_type = 'yarn'"});
    with_config([](nlohmann::json& c) { c["architectures"] = {"LlamaForSequenceClassification"}; });
    refused("a classifier", {config_file, "architectures = [\"LlamaForSequenceClassification\"]", "causal"});
    with_config([](nlohmann::json& c) { c["model_type"] = "gemma"; });
    refused("gemma", {config_file, "model_type = 'gemma'", "expected one of", "qwen2 (qwen2)"});
    with_config([](nlohmann::json& c) { c["hidden_size"] = "16"; });
    refused("a string", {config_file, "hidden_size = \"16\""});
    fs::remove(config_file);
    refused("no config.json", {config_file, "no such file"});
    test::write_file(config_file, config);

    // Tensors: unknown, missing, wrong shape, unsupported dtype; each names the file.
    nlohmann::json h = st.header;
    h["model.layers.2.input_layernorm.weight"] = {
        {"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {st.data.size(), st.data.size() + 64}}};
    write_safetensors(weights, h, st.data + std::string(64, '\0'));
    refused("unknown tensor", {weights, "unexpected tensor model.layers.2.input_layernorm.weight"});
    h = st.header;
    h.erase("model.norm.weight");
    write_safetensors(weights, h, st.data);
    refused("missing tensor", {weights, "missing tensor model.norm.weight"});
    h = st.header;
    h["model.layers.0.self_attn.k_proj.weight"]["shape"] = {16, 8};
    write_safetensors(weights, h, st.data);
    refused("wrong shape", {weights, "model.layers.0.self_attn.k_proj.weight has shape [16, 8], expected [8, 16]"});
    h = st.header;
    h["model.norm.weight"]["dtype"] = "I32";
    write_safetensors(weights, h, st.data);
    refused("dtype", {weights, "model.norm.weight has dtype I32"});
    // A GQA split that does not match the checkpoint's: k_proj rows for 4 kv heads, not 2.
    ModelConfig mha = f.mc;
    mha.n_kv_head = 4;
    const ModelLayout ml = make_model_layout(mha);
    ModelState ms(ml, *f.backend, 1);
    write_safetensors(weights, st.header, st.data);
    const std::string msg = input_error_of([&] { import_weights(weights, ml, mha, ms); });
    EXPECT_NE(msg.find("model.layers.0.self_attn.k_proj.weight has shape [8, 16], expected [16, 16]"),
              std::string::npos)
        << msg;
}

// Paths the file system refuses (a symlink loop, a name over NAME_MAX) are input errors
// naming the key and the path, for model.init_from and model.from_hf alike, not a
// std::filesystem::filesystem_error (which would exit 1).
TEST(HfLlamaImport, PathsTheFileSystemRefusesAreInputErrors) {
    LlamaCkpt f(kCases[0]);
    ModelState s(f.layout, *f.backend, 1);
    const std::string loop = f.dir.file("loop");
    fs::create_symlink("loop", loop);
    const std::string too_long = f.dir.file(std::string(300, 'x'));
    for (const std::string& path : {loop, too_long, loop + "/model.safetensors"}) {
        std::string msg = input_error_of([&] { import_weights(path, f.layout, f.mc, s); });
        EXPECT_NE(msg.find("model.init_from = " + path), std::string::npos) << msg;
        msg = input_error_of([&] { read_hf_config(path); });
        EXPECT_NE(msg.find("model.from_hf = " + path), std::string::npos) << msg;
    }
}

/// parse_command_line on {"ztrain", args...} with ztrain's config.json reader.
Config parse(std::vector<std::string> args) {
    std::vector<const char*> argv{"ztrain"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    return parse_command_line(static_cast<int>(argv.size()), argv.data(), family_key_rules, read_hf_config).config;
}

TEST(HfLlamaFromHf, FillsTheModelKeysAndRefusesConflicts) {
    LlamaCkpt f(kCases[2]);
    const std::string hf = f.dir.file("hf");
    consolidate(f.step_dir, hf + "/", DType::kF32, false);
    const std::string train = "--data.train=x.bin";
    Config c = parse({"--model.from_hf=" + hf, train});
    EXPECT_EQ(c.model.init_from, hf);
    EXPECT_EQ(c.model.arch, ModelArch("llama"));
    EXPECT_EQ(c.model.n_layer, 2);
    EXPECT_EQ(c.model.kv_heads(), 1);
    EXPECT_EQ(c.model.ffn_dim, 24);
    EXPECT_EQ(c.model.vocab_size, 37);
    EXPECT_EQ(c.model.seq_len, 8);
    EXPECT_FALSE(c.model.tie_embeddings);
    EXPECT_EQ(c.model.rope_scaling, RopeScaling::kLlama3);
    EXPECT_EQ(c.model.rope_original_context, 16);
    EXPECT_EQ(c.model.rope_theta, 100);
    // The same value given explicitly is fine; a shorter training context wins.
    EXPECT_EQ(parse({"--model.from_hf=" + hf, train, "--model.n_layer=2"}).model.n_layer, 2);
    EXPECT_EQ(parse({"--model.from_hf=" + hf, train, "--model.seq_len=4"}).model.seq_len, 4);
    // A different one is refused naming both values and the field.
    std::string msg = input_error_of([&] { parse({"--model.from_hf=" + hf, train, "--model.n_layer=3"}); });
    for (const std::string& n : {std::string("command line: model.n_layer = 3"), std::string("says 2"),
                                 hf + "/config.json: num_hidden_layers"}) {
        EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
    const std::string deck = f.dir.file("deck.ini");
    test::write_file(deck, "[model]\nfrom_hf = " + hf + "\nrope_scaling = none\n[data]\ntrain = x.bin\n");
    msg = input_error_of([&] { parse({"--config", deck}); });
    EXPECT_NE(msg.find(deck + ": model.rope_scaling = none"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rope_scaling.rope_type"), std::string::npos) << msg;
    msg = input_error_of([&] { parse({"--model.from_hf=" + hf, train, "--model.init_from=other.h5"}); });
    EXPECT_NE(msg.find("model.init_from = other.h5"), std::string::npos) << msg;
    // Without a reader (a program that does not read Hugging Face files) it is refused.
    std::vector<const char*> argv{"ztrain", "--model.from_hf=x", "--data.train=x.bin"};
    msg = input_error_of([&] { parse_command_line(3, argv.data(), family_key_rules); });
    EXPECT_NE(msg.find("model.from_hf"), std::string::npos) << msg;
    msg = input_error_of([&] { parse({"--model.from_hf=" + f.dir.file("nope"), train}); });
    EXPECT_NE(msg.find("nope"), std::string::npos) << msg;

    // GPT-2's config.json (as zt-consolidate writes it) fills GPT-2's keys.
    const std::string g = f.dir.file("gpt2");
    fs::create_directories(g);
    test::write_file(g + "/config.json", hf_gpt2_config(3, 2, 16, 32, 50, DType::kF32).dump());
    c = parse({"--model.from_hf=" + g, train});
    EXPECT_EQ(c.model.arch, ModelArch("gpt2"));
    EXPECT_EQ(c.model.n_layer, 3);
    EXPECT_EQ(c.model.n_head, 2);
    EXPECT_EQ(c.model.seq_len, 32);
    EXPECT_EQ(c.model.vocab_size, 50);
    msg = input_error_of([&] { parse({"--model.from_hf=" + g, train, "--model.seq_len=16"}); });
    EXPECT_NE(msg.find("n_positions"), std::string::npos) << msg;
}

// transformers 5 writes RoPE as rope_parameters (rope_theta inside, no rope_scaling); older
// files' rope_scaling, when present, wins, as in transformers.
TEST(HfLlamaFromHf, ReadsRopeParametersAsTransformers5WritesThem) {
    LlamaCkpt f(kCases[2]);
    const std::string hf = f.dir.file("hf");
    consolidate(f.step_dir, hf + "/", DType::kF32, false);
    const std::string file = hf + "/config.json";
    nlohmann::json legacy = nlohmann::json::parse(test::read_file(file));
    nlohmann::json v5 = legacy;
    v5["rope_parameters"] = legacy["rope_scaling"];
    v5["rope_parameters"]["rope_theta"] = 250.0;
    v5.erase("rope_scaling");
    v5.erase("rope_theta");
    test::write_file(file, v5.dump());
    Config c = parse({"--model.from_hf=" + hf, "--data.train=x.bin"});
    EXPECT_EQ(c.model.rope_theta, 250);
    EXPECT_EQ(c.model.rope_scaling, RopeScaling::kLlama3);
    EXPECT_EQ(c.model.rope_original_context, 16);
    std::string msg =
        input_error_of([&] { parse({"--model.from_hf=" + hf, "--data.train=x.bin", "--model.rope_theta=100"}); });
    EXPECT_NE(msg.find("config.json: rope_parameters.rope_theta"), std::string::npos) << msg;

    v5["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 10000.0}};
    test::write_file(file, v5.dump());
    msg = input_error_of([&] { parse({"--model.from_hf=" + hf, "--data.train=x.bin"}); });
    EXPECT_NE(msg.find(file + ": rope_parameters.rope_type = 'yarn'"), std::string::npos) << msg;

    v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
    test::write_file(file, v5.dump());
    c = parse({"--model.from_hf=" + hf, "--data.train=x.bin"});
    EXPECT_EQ(c.model.rope_theta, 500000);
    EXPECT_EQ(c.model.rope_scaling, RopeScaling::kNone);

    legacy["rope_parameters"] = v5["rope_parameters"];  // rope_scaling (llama3) and theta 100 win
    test::write_file(file, legacy.dump());
    c = parse({"--model.from_hf=" + hf, "--data.train=x.bin"});
    EXPECT_EQ(c.model.rope_theta, 100);
    EXPECT_EQ(c.model.rope_scaling, RopeScaling::kLlama3);
}

}  // namespace
}  // namespace zt
