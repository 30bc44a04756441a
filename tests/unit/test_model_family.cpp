// Unit tests for the model family registry (ztrain/model/family.hpp): every model.arch the
// deck accepts has a registered family that answers every family question consistently with
// its own tensor manifest, and reads its own config.json back; an arch without a family is
// refused naming the value. The families' key rules are tested through validate() in
// test_config.cpp, their Hugging Face names by the export and import tests.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/model_layout.hpp"

namespace zt {
namespace {

/// Every model.arch value a deck is validated with, read from validation's refusal of another
/// ("expected one of gpt2 | llama"), so a new family is tested without editing this list.
std::vector<std::string> deck_arch_names() {
    Config c;
    std::string msg;
    try {
        set_config_value(c, "model.arch", "no-such-family");
        validate(c);
    } catch (const InputError& e) {
        msg = e.what();
    }
    const std::string lead = "expected one of ";
    const size_t at = msg.find(lead);
    EXPECT_NE(at, std::string::npos) << msg;
    std::vector<std::string> names;
    std::string rest = at == std::string::npos ? "" : msg.substr(at + lead.size());
    for (size_t bar; (bar = rest.find(" | ")) != std::string::npos; rest = rest.substr(bar + 3)) {
        names.push_back(rest.substr(0, bar));
    }
    names.push_back(rest.substr(0, rest.find_first_of(" ,;:)")));
    return names;
}

/// A small model of `arch`'s family that passes its key checks.
ModelConfig small_model(ModelArch arch) {
    ModelConfig m = test::model_config(2, 4, 32, 16, 50, 16);
    const bool llama_block = arch == ModelArch("llama") || arch == ModelArch("mistral") ||
                             arch == ModelArch("qwen2") || arch == ModelArch("qwen3");
    if (llama_block) m = test::small_llama(2, false, false);
    if (arch == ModelArch("mistral")) m.sliding_window = m.seq_len / 2;
    m.arch = arch;
    m.qkv_bias = arch == ModelArch("qwen2");
    if (arch == ModelArch("qwen3")) {
        m.qk_norm = true;
        m.head_dim = 6;  // q spans 24 channels of the 16-wide model
    }
    return m;
}

TEST(ModelFamily, EveryDeckArchHasAFamilyThatAnswers) {
    const std::vector<std::string> names = deck_arch_names();
    ASSERT_GE(names.size(), 2u);
    EXPECT_EQ(names.size(), model_families().size()) << "a family registered without a deck name, or the reverse";
    for (const std::string& name : names) {
        SCOPED_TRACE(name);
        Config c;
        set_config_value(c, "model.arch", name);
        const Family& f = model_family(c.model.arch);
        EXPECT_EQ(f.arch(), c.model.arch);
        EXPECT_EQ(std::string(f.name()), name);

        const ModelConfig m = small_model(f.arch());
        const ModelLayout layout = make_model_layout(m);
        double manifest = 0;
        for (const ParamSpec& p : layout.params) manifest += static_cast<double>(p.numel);
        EXPECT_EQ(f.parameter_count(m), manifest) << "the closed form differs from the manifest";
        // Attention's term: the keys a query reads (a sliding window's, when shorter) times
        // the width of q.
        const double keys = m.sliding_window > 0 ? std::min(m.sliding_window, m.seq_len) : m.seq_len;
        EXPECT_EQ(f.flops_per_token(m), 6 * manifest + 12.0 * m.n_layer * keys * (m.n_head * m.head_size()));
        EXPECT_GT(f.block_product_weights(m), 0);
        const std::string banner = f.banner(m, manifest);
        EXPECT_EQ(banner.rfind("ztrain: ", 0), 0u) << banner;
        EXPECT_NE(banner.find("M parameters"), std::string::npos) << banner;
        EXPECT_EQ(banner.find('\n'), std::string::npos) << banner;

        const nlohmann::json hf = f.hf_config(m, DType::kF32);
        EXPECT_EQ(hf.at("model_type"), name);
        EXPECT_EQ(hf.at("architectures").at(0), f.hf_naming().architecture);
        EXPECT_FALSE(f.hf_metadata(m).empty());
        EXPECT_EQ(f.missing_hf_key(m), nullptr);
        // Every tensor has a Hugging Face name that maps back to it.
        for (const ParamSpec& p : layout.params) {
            EXPECT_EQ(f.hf_naming().ztrain_name(f.hf_naming().hf_name(p.name)), p.name);
        }
    }
}

TEST(ModelFamily, ConfigJsonReadsBackAsTheSameModel) {
    for (const Family* f : model_families()) {
        SCOPED_TRACE(f->name());
        const ModelConfig m = small_model(f->arch());
        Config back;
        for (const HfSetting& s : hf_model_settings(f->hf_config(m, DType::kF32), "config.json")) {
            set_config_value(back, s.key, s.text);
        }
        for (const char* key : {"model.arch", "model.n_layer", "model.n_head", "model.n_embd", "model.vocab_size",
                                "model.n_kv_head", "model.ffn_dim", "model.tie_embeddings", "model.sliding_window",
                                "model.head_dim", "model.qkv_bias", "model.qk_norm"}) {
            Config original;
            original.model = m;
            EXPECT_EQ(config_value_text(back, key), config_value_text(original, key)) << key;
        }
    }
}

TEST(ModelFamily, BannersAreTheRunLogLines) {
    ModelConfig gpt2 = test::model_config(2, 4, 32, 16, 50, 16);
    EXPECT_EQ(model_family(gpt2).banner(gpt2, 1234567),
              "ztrain: 2 layers, 4 heads, 32 wide, seq 16, vocab 50 (padded 64): 1.23M parameters");
    const ModelConfig llama = test::small_llama(2, false, false);
    EXPECT_EQ(model_family(llama).banner(llama, 2500000),
              "ztrain: llama, 2 layers, 4 heads (2 key/value), 16 wide, ffn 24, seq 8, vocab 37 (padded 40), "
              "untied head: 2.50M parameters");
    ModelConfig mistral = llama;
    mistral.arch = ModelArch("mistral");
    mistral.sliding_window = 4;
    EXPECT_EQ(model_family(mistral).banner(mistral, 2500000),
              "ztrain: mistral, 2 layers, 4 heads (2 key/value), 16 wide, ffn 24, seq 8, vocab 37 (padded 40), "
              "untied head: 2.50M parameters, sliding window 4");
}

TEST(ModelFamily, OnlyTheFamilysOwnKeysAreAccepted) {
    // GPT-2 reads no Llama key: a Llama key set under gpt2 is refused naming the family that reads it.
    Config c;
    c.data.train = "train.bin";
    c.model.ffn_dim = 64;
    try {
        validate(c);
        ADD_FAILURE() << "model.ffn_dim under gpt2 was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("model.ffn_dim = 64 applies only to model.arch = llama (model.arch is "
                                             "gpt2): remove it, or set model.arch = llama"),
                  std::string::npos)
            << e.what();
    }
    c.model.arch = ModelArch("llama");
    EXPECT_NO_THROW(validate(c));
}

TEST(ModelFamily, AnArchWithoutAFamilyIsRefused) {
    const ModelArch unknown("mamba");
    try {
        model_family(unknown);
        ADD_FAILURE() << "model_family accepted an arch with no family";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.arch 'mamba' has no model family: none is registered for it"),
                  std::string::npos)
            << e.what();
    }
    // A deck naming it is refused by validation, with the registered names (bad input: exit 2).
    Config c;
    c.model.arch = unknown;
    try {
        validate(c);
        ADD_FAILURE() << "validate accepted model.arch = mamba";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("model.arch = 'mamba': expected one of gpt2 | llama | mistral"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace zt
