// Helpers shared by the tests: scratch directories and small file utilities.
#pragma once

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"

namespace zt::test {

/// A model config for tests that need a small GPT (vocab_pad_to: ModelConfig's default, 64).
inline ModelConfig model_config(int n_layer, int n_head, int n_embd, int seq_len, int vocab_size,
                                int vocab_pad_to = ModelConfig{}.vocab_pad_to) {
    ModelConfig m;
    m.n_layer = n_layer;
    m.n_head = n_head;
    m.n_embd = n_embd;
    m.seq_len = seq_len;
    m.vocab_size = vocab_size;
    m.vocab_pad_to = vocab_pad_to;
    return m;
}

/// The message of the InputError f throws; "WRONG EXCEPTION TYPE: ..." for another exception
/// and "NO ERROR" when it throws none, so a test's find() on the message fails either way.
template <typename F>
std::string input_error_of(F&& f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("WRONG EXCEPTION TYPE: ") + e.what();
    }
    return "NO ERROR";
}

/// Removes the fields of a metrics.jsonl record that differ run to run: tokens_per_s and
/// every *_ms (step and phase times, per-op times).
inline void erase_timing_fields(nlohmann::json& j) {
    j.erase("tokens_per_s");
    // Memory measurements (the plan includes the process's measured baseline) vary run to run.
    j.erase("predicted_peak");
    j.erase("measured_peak");
    for (auto it = j.begin(); it != j.end();) {
        const std::string& k = it.key();
        it = k.size() > 3 && k.compare(k.size() - 3, 3, "_ms") == 0 ? j.erase(it) : std::next(it);
    }
}

/// The per-step records of a metrics.jsonl (those with a loss), in order.
inline std::vector<nlohmann::json> step_records(const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) {
        nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("loss")) out.push_back(j);
    }
    return out;
}

/// A fresh, empty directory under the system temp dir, removed when the object dies.
class ScratchDir {
  public:
    explicit ScratchDir(const std::string& tag);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::string& path() const { return m_path; }
    std::string file(const std::string& name) const { return m_path + "/" + name; }

  private:
    std::string m_path;
};

/// Writes `content` to `path` (binary).
void write_file(const std::string& path, const std::string& content);
/// Reads a whole file (binary).
std::string read_file(const std::string& path);

}  // namespace zt::test
