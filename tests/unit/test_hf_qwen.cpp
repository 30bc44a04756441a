// Qwen2 / Qwen3 config.json files read by model.from_hf (family.hpp: hf_model_settings): the
// keys each sets (model.arch, head_dim, the block option), Qwen2.5's sliding_window with
// use_sliding_window false taken as full attention, and what ztrain cannot honour refused
// naming the file and the field; the families' deck checks (the option each requires,
// head_dim) and what they write back (hf_config).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/model/family.hpp"

namespace zt {
namespace {

using test::input_error_of;

/// Qwen2.5-0.5B's config.json, as the hub has it (the fields ztrain reads).
nlohmann::json qwen2_5_config() {
    return {{"architectures", {"Qwen2ForCausalLM"}},
            {"model_type", "qwen2"},
            {"hidden_act", "silu"},
            {"hidden_size", 896},
            {"intermediate_size", 4864},
            {"max_position_embeddings", 32768},
            {"max_window_layers", 24},
            {"num_attention_heads", 14},
            {"num_hidden_layers", 24},
            {"num_key_value_heads", 2},
            {"rms_norm_eps", 1e-06},
            {"rope_theta", 1000000.0},
            {"sliding_window", 32768},
            {"tie_word_embeddings", true},
            {"use_sliding_window", false},
            {"vocab_size", 151936}};
}

nlohmann::json qwen3_config() {
    nlohmann::json c = qwen2_5_config();
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["model_type"] = "qwen3";
    c["hidden_size"] = 1024;
    c["num_attention_heads"] = 16;
    c["num_key_value_heads"] = 8;
    c["head_dim"] = 128;
    c["attention_bias"] = false;
    c["sliding_window"] = nullptr;
    return c;
}

std::map<std::string, std::string> settings(const nlohmann::json& c) {
    std::map<std::string, std::string> out;
    for (const HfSetting& s : hf_model_settings(c, "q/config.json")) out[s.key] = s.text;
    return out;
}

TEST(HfQwen, Qwen2_5ConfigSetsQwen2WithBiasesAndFullAttention) {
    const auto s = settings(qwen2_5_config());
    EXPECT_EQ(s.at("model.arch"), "qwen2");
    EXPECT_EQ(s.at("model.qkv_bias"), "true");
    EXPECT_EQ(s.count("model.qk_norm"), 0u);
    EXPECT_EQ(s.count("model.head_dim"), 0u);
    EXPECT_EQ(s.at("model.n_kv_head"), "2");
    EXPECT_EQ(s.at("model.rope_theta"), "1e+06");
    EXPECT_EQ(s.at("model.tie_embeddings"), "true");
}

TEST(HfQwen, Qwen3ConfigSetsHeadDimAndHeadNorms) {
    const auto s = settings(qwen3_config());
    EXPECT_EQ(s.at("model.arch"), "qwen3");
    EXPECT_EQ(s.at("model.qk_norm"), "true");
    EXPECT_EQ(s.at("model.head_dim"), "128");
    EXPECT_EQ(s.count("model.qkv_bias"), 0u);
    nlohmann::json silent = qwen3_config();
    silent.erase("head_dim");  // Qwen3Config's default
    EXPECT_EQ(settings(silent).at("model.head_dim"), "128");
}

TEST(HfQwen, RefusesWhatItCannotHonourNamingTheField) {
    nlohmann::json c = qwen2_5_config();
    c["use_sliding_window"] = true;
    std::string msg = input_error_of([&] { settings(c); });
    EXPECT_NE(msg.find("q/config.json: use_sliding_window = true"), std::string::npos) << msg;
    c = qwen2_5_config();
    c["layer_types"] = {"full_attention", "sliding_attention"};
    msg = input_error_of([&] { settings(c); });
    EXPECT_NE(msg.find("layer_types"), std::string::npos) << msg;
    c = qwen3_config();
    c["attention_bias"] = true;
    msg = input_error_of([&] { settings(c); });
    EXPECT_NE(msg.find("q/config.json: attention_bias = true"), std::string::npos) << msg;
    c = qwen2_5_config();
    c["hidden_act"] = "gelu";
    msg = input_error_of([&] { settings(c); });
    EXPECT_NE(msg.find("hidden_act = \"gelu\""), std::string::npos) << msg;
}

/// A valid small deck of `arch` with the option it requires.
Config qwen_deck(const char* arch) {
    Config c;
    c.data.train = "x.bin";
    c.model.arch = ModelArch(arch);
    c.model.ffn_dim = 64;
    c.model.n_kv_head = 2;
    (std::string(arch) == "qwen2" ? c.model.qkv_bias : c.model.qk_norm) = true;
    return c;
}

TEST(HfQwen, DeckChecksNameTheKey) {
    validate(qwen_deck("qwen2"));
    validate(qwen_deck("qwen3"));
    Config c = qwen_deck("qwen2");
    c.model.qkv_bias = false;
    std::string msg = input_error_of([&] { validate(c); });
    EXPECT_NE(msg.find("model.qkv_bias = false: expected true"), std::string::npos) << msg;
    c = qwen_deck("qwen3");
    c.model.qk_norm = false;
    msg = input_error_of([&] { validate(c); });
    EXPECT_NE(msg.find("model.qk_norm = false: expected true"), std::string::npos) << msg;
    c = qwen_deck("qwen2");
    c.model.qk_norm = true;
    msg = input_error_of([&] { validate(c); });
    EXPECT_NE(msg.find("model.qk_norm = true applies only to model.arch = qwen3"), std::string::npos) << msg;
    c = qwen_deck("qwen3");
    c.model.head_dim = 7;
    msg = input_error_of([&] { validate(c); });
    EXPECT_NE(msg.find("model.head_dim = 7: expected an even integer"), std::string::npos) << msg;
    Config llama;
    llama.data.train = "x.bin";
    llama.model.arch = ModelArch("llama");
    llama.model.ffn_dim = 64;
    llama.model.head_dim = 16;
    msg = input_error_of([&] { validate(llama); });
    EXPECT_NE(msg.find("model.head_dim = 16 applies only to model.arch = qwen2"), std::string::npos) << msg;
}

TEST(HfQwen, ExportConfigsNameTheirClassesAndFullAttention) {
    Config c = qwen_deck("qwen3");
    c.model.head_dim = 12;
    const nlohmann::json j = model_family(c.model).hf_config(c.model, DType::kF32);
    EXPECT_EQ(j.at("architectures"), nlohmann::json({"Qwen3ForCausalLM"}));
    EXPECT_EQ(j.at("model_type"), "qwen3");
    EXPECT_EQ(j.at("head_dim"), 12);
    EXPECT_EQ(j.at("attention_bias"), false);
    EXPECT_EQ(j.at("use_sliding_window"), false);
    EXPECT_FALSE(j.contains("mlp_bias"));
    // Read back: the same keys.
    const auto s = settings(j);
    EXPECT_EQ(s.at("model.head_dim"), "12");
    EXPECT_EQ(s.at("model.qk_norm"), "true");
    const nlohmann::json q2 = model_family(qwen_deck("qwen2").model).hf_config(qwen_deck("qwen2").model, DType::kBF16);
    EXPECT_EQ(q2.at("architectures"), nlohmann::json({"Qwen2ForCausalLM"}));
    EXPECT_FALSE(q2.contains("attention_bias"));
}

}  // namespace
}  // namespace zt
