// Writes the seed corpora of the fuzz targets with ztrain's own writers:
//   zt_fuzz_seeds SOURCE_DIR OUT_DIR   ->  OUT_DIR/<target>/<seed files>
// (tests/fuzz/corpus is this program's output, committed; rerun it after a format change).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../src/ckpt/safetensors.hpp"
#include "fuzz_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
    fs::create_directories(dir);
    zt::fuzz::write_file((dir / name).string(), bytes);
    std::printf("  %s (%zu bytes)\n", (dir / name).string().c_str(), bytes.size());
}

/// save_checkpoint of a one-rank model of `mc` (seed 7, step 3) under `dir`; returns the step directory.
std::string save_tiny_checkpoint(const zt::ModelConfig& mc, const std::string& dir) {
    const zt::ModelLayout layout = zt::make_model_layout(mc);
    const auto backend = zt::make_cpu_backend(1);
    zt::ModelState state(layout, *backend, 7);
    zt::Config cfg;
    cfg.model = mc;
    zt::CheckpointRecord record;
    record.progress.step = 3;
    record.progress.applied_steps = 3;
    record.progress.samples_seen = 24;
    record.progress.tokens_seen = 96;
    record.dtype = "fp32";
    record.seed = 7;
    record.config_ini = zt::to_ini(cfg);
    return zt::save_checkpoint(dir, state, zt::self_communicator(), record, 1);
}

/// A fuzz_hf_dir seed: the Hugging Face directory zt-consolidate writes for the checkpoint,
/// its model.safetensors kept whole (shards = 0) or split into `shards` files (tensors dealt
/// out in name order, each shard written by SafetensorsWriter) with the index
/// transformers writes: {"metadata": {"total_size"}, "weight_map"}, sorted, indent 2.
std::string hf_dir_seed(const std::string& step_dir, zt::DType dtype, size_t shards, const std::string& dir) {
    zt::consolidate(step_dir, dir + "/", dtype, false);
    const std::string weights_file = dir + "/model.safetensors";
    const std::string weights = slurp(weights_file);
    const std::string& sep = zt::fuzz::kHfDirSeparator;
    std::string seed = slurp(dir + "/config.json") + sep;
    if (shards == 0) return seed + sep + weights;

    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(weights[static_cast<size_t>(i)]);
    const char* data = weights.data() + 8 + header;
    const zt::SafetensorsReader reader(weights_file);
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total = 0;
    std::vector<std::string> shard_bytes;
    for (size_t s = 0; s < shards; ++s) {
        std::vector<zt::SafetensorsWriter::Tensor> tensors;
        std::vector<const zt::SafetensorsEntry*> entries;
        size_t i = 0;
        for (const auto& [name, entry] : reader.entries()) {
            if (i++ % shards != s) continue;
            tensors.push_back({name, entry.shape});
            entries.push_back(&entry);
            weight_map[name] = zt::fuzz::hf_shard_name(s + 1, shards);
        }
        const std::string file = dir + "/" + zt::fuzz::hf_shard_name(s + 1, shards);
        zt::SafetensorsWriter writer(file, tensors, dtype, nlohmann::ordered_json{{"format", "pt"}});
        for (const zt::SafetensorsEntry* e : entries) {
            writer.write(data + e->begin, e->end - e->begin);
            total += e->end - e->begin;
        }
        writer.close();
        shard_bytes.push_back(slurp(file));
    }
    seed += nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
    for (const std::string& bytes : shard_bytes) seed += sep + bytes;
    return seed;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s SOURCE_DIR OUT_DIR\n", argv[0]);
        return 2;
    }
    const fs::path src = argv[1];
    const fs::path out = argv[2];
    zt::fuzz::quiet_hdf5();
    const std::string tmp = zt::fuzz::scratch_dir();

    // ---- token shards: uint16, uint32, one token, empty ----
    {
        const fs::path d = out / "fuzz_token_shard";
        const auto shard = [&](const std::string& name, const std::vector<uint32_t>& tokens, bool u32) {
            const std::string f = tmp + "/" + name;
            zt::write_token_shard(f, tokens, u32);
            put(d, name, slurp(f));
        };
        std::vector<uint32_t> t;
        for (uint32_t i = 0; i < 40; ++i) t.push_back((i * 7919u) % 300u);
        shard("u16_40.bin", t, false);
        shard("u32_12.bin", {0, 1, 70000, 5, 256, 65535, 65536, 3, 2, 1, 0, 99}, true);
        shard("u16_1.bin", {42}, false);
        shard("empty.bin", {}, false);
    }

    // ---- tokenizer: vocab \0 merges \0 tokenizer.json ----
    {
        const fs::path d = out / "fuzz_tokenizer";
        const std::string vocab = slurp((src / "tests/data/bpe_tiny/vocab.json").string());
        const std::string merges = slurp((src / "tests/data/bpe_tiny/merges.txt").string());
        const std::string gpt2 =
            nlohmann::json{{"type", "gpt2"}, {"vocab_size", 40}, {"eot", 39}, {"vocab", "vocab.json"},
                           {"merges", "merges.txt"}}
                .dump(2);
        const std::string byte = nlohmann::json{{"type", "byte"}, {"vocab_size", 257}, {"eot", 256}}.dump(2);
        const std::string nul(1, '\0');
        put(d, "gpt2_full", vocab + nul + merges + nul + gpt2);
        put(d, "gpt2_versioned", vocab + nul + "#version: 0.2\r\n" + merges + nul + gpt2);
        put(d, "gpt2_no_desc", vocab + nul + merges);
        put(d, "byte_desc", byte);
        put(d, "byte_desc_with_text", vocab + nul + "hello world, caf\xc3\xa9 123!\n  \t\xff\xfe" + nul + byte);

        // Hugging Face tokenizer.json files over the tiny vocabulary (first part), with a
        // description of type "hf" naming it.
        nlohmann::json merges_list = nlohmann::json::array();
        {
            std::istringstream in(merges);
            std::string line;
            while (std::getline(in, line)) {
                if (!line.empty() && line[0] != '#') merges_list.push_back(line);
            }
        }
        const auto hf_file = [&](const nlohmann::json& pre, bool ignore_merges) {
            nlohmann::json j;
            j["added_tokens"] = nlohmann::json::array(
                {{{"id", 39}, {"content", "<|endoftext|>"}, {"special", true}}});
            j["normalizer"] = nullptr;
            j["pre_tokenizer"] = pre;
            j["post_processor"] = {{"type", "ByteLevel"}};
            j["decoder"] = {{"type", "ByteLevel"}};
            j["model"] = {{"type", "BPE"}, {"ignore_merges", ignore_merges},
                          {"vocab", nlohmann::json::parse(vocab)}, {"merges", merges_list}};
            return j.dump(1);
        };
        const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
        const nlohmann::json llama3_split = {
            {"type", "Split"},
            {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                   "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                   "\\s+(?!\\S)|\\s+"}}},
            {"behavior", "Isolated"}};
        const nlohmann::json no_regex = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                         {"use_regex", false}};
        const nlohmann::json digits = {{"type", "Digits"}, {"individual_digits", true}};
        const std::string hf =
            nlohmann::json{{"type", "hf"}, {"vocab_size", 40}, {"eot", 39}, {"file", "vocab.json"}}
                .dump(2);
        put(d, "hf_gpt2", hf_file(byte_level, false) + nul + "hello world<|endoftext|>" + nul + hf);
        put(d, "hf_llama3",
            hf_file({{"type", "Sequence"}, {"pretokenizers", {llama3_split, no_regex}}}, true) +
                nul + "HE'LL 1234 don't\r\n\n  x" + nul + hf);
        put(d, "hf_digits",
            hf_file({{"type", "Sequence"}, {"pretokenizers", {digits, byte_level}}}, false) + nul +
                "123 hello" + nul + hf);
    }

    // ---- a real checkpoint of the tiny model: meta.h5 and its JSON; safetensors exports ----
    {
        const std::string step_dir = save_tiny_checkpoint(zt::fuzz::tiny_model(), tmp + "/ckpt");
        const fs::path d = out / "fuzz_checkpoint_meta";
        put(d, "meta.h5", slurp(step_dir + "/meta.h5"));
        put(d, "meta_json.json", zt::read_checkpoint_meta(step_dir).dump(1));

        const fs::path s = out / "fuzz_safetensors";
        for (const auto& [name, dtype] : {std::pair<const char*, zt::DType>{"f32", zt::DType::kF32},
                                          {"bf16", zt::DType::kBF16}, {"f16", zt::DType::kF16}}) {
            const std::string f = tmp + "/w_" + name + ".safetensors";
            zt::consolidate(step_dir, f, dtype, false);
            put(s, std::string(name) + ".safetensors", slurp(f));
        }

        // ---- Hugging Face model directories (fuzz_hf_dir): GPT-2 and Llama, one file or shards ----
        const fs::path h = out / "fuzz_hf_dir";
        put(h, "gpt2_f32", hf_dir_seed(step_dir, zt::DType::kF32, 0, tmp + "/hf_gpt2_f32"));
        put(h, "gpt2_bf16_2_shards", hf_dir_seed(step_dir, zt::DType::kBF16, 2, tmp + "/hf_gpt2_bf16"));
        const std::string llama = save_tiny_checkpoint(zt::fuzz::tiny_llama_model(), tmp + "/ckpt_llama");
        put(h, "llama_f16", hf_dir_seed(llama, zt::DType::kF16, 0, tmp + "/hf_llama_f16"));
        put(h, "llama_f32_3_shards", hf_dir_seed(llama, zt::DType::kF32, 3, tmp + "/hf_llama_f32"));
    }
    // ---- JSON Lines fine-tuning examples (fuzz_jsonl): each layout, and bad lines ----
    {
        const fs::path d = out / "fuzz_jsonl";
        put(d, "text.jsonl", "{\"text\": \"hello world\"}\n{\"text\": \"caf\\u00e9 <|eot_id|>\", \"id\": 3}\n");
        put(d, "prompt.jsonl", "{\"prompt\": \"2+2=\", \"completion\": \" 4\"}\n{\"prompt\": \"\", \"completion\": \"x\"}\n");
        put(d, "chat.jsonl",
            "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
            "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \" Hello! \"}]}\n");
        put(d, "bad.jsonl",
            "{\"text\": 1}\n\n{\"prompt\": \"p\"}\n[1]\n{\"messages\": [{\"role\": \"tool\", \"content\": \"\"}]}\n{\"text\"\n");
    }
    return 0;
}
