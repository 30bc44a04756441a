#include "ztrain/train/input_fingerprint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace {

constexpr size_t kHeaderBytes = 1024;    // a token shard's header: 256 int32
constexpr size_t kEndBytes = 1u << 20;   // first and last MiB

std::string hex64(uint64_t h) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
    return buf;
}

/// hash64 of bytes [at, at + n) of an open file.
uint64_t hash_range(int fd, uint64_t at, size_t n, const std::string& path) {
    std::vector<char> buf(n);
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(fd, buf.data() + got, n - got, static_cast<off_t>(at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw InputError(str(path, ": cannot read it to fingerprint the run's inputs: ",
                                          r < 0 ? std::strerror(errno) : "file shrank while read"));
        got += static_cast<size_t>(r);
    }
    return hash64(buf.data(), n);
}

nlohmann::json file_fingerprint(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(str(path, ": cannot open it to fingerprint the run's inputs: ", std::strerror(errno)));
    nlohmann::json f;
    try {
        struct stat st {};
        if (fstat(fd, &st) != 0) throw InputError(str(path, ": cannot stat: ", std::strerror(errno)));
        const uint64_t size = static_cast<uint64_t>(st.st_size);
        const size_t end = static_cast<size_t>(std::min<uint64_t>(size, kEndBytes));
        f["file"] = std::filesystem::path(path).filename().string();
        f["bytes"] = size;
        f["header"] = hex64(hash_range(fd, 0, static_cast<size_t>(std::min<uint64_t>(size, kHeaderBytes)), path));
        f["head"] = hex64(hash_range(fd, 0, end, path));
        f["tail"] = hex64(hash_range(fd, size - end, end, path));
    } catch (...) {
        close(fd);
        throw;
    }
    close(fd);
    return f;
}

/// One file's differences: size, header, then the ends (the most telling first).
std::string file_change(const nlohmann::json& was, const nlohmann::json& now) {
    if (was.value("bytes", uint64_t{0}) != now.value("bytes", uint64_t{0})) {
        return str(was.value("bytes", uint64_t{0}), " -> ", now.value("bytes", uint64_t{0}), " bytes");
    }
    if (was.value("header", "") != now.value("header", "")) return "its header differs";
    if (was.value("head", "") != now.value("head", "") || was.value("tail", "") != now.value("tail", "")) {
        return "same size, other content (its first or last MiB differs)";
    }
    return "";
}

/// The changes in one list of files, matched by name.
void list_changes(const char* key, const nlohmann::json& was, const nlohmann::json& now,
                  std::vector<std::string>& out) {
    std::map<std::string, nlohmann::json> before;
    std::map<std::string, nlohmann::json> after;
    // A blend's files are named with their corpus: two corpora may hold files of one name.
    const auto name_of = [](const nlohmann::json& f) {
        const std::string corpus = f.value("corpus", "");
        return corpus.empty() ? f.value("file", "") : str(corpus, ": ", f.value("file", ""));
    };
    for (const auto& f : was) before[name_of(f)] = f;
    for (const auto& f : now) after[name_of(f)] = f;
    for (const auto& [name, f] : before) {
        const auto it = after.find(name);
        if (it == after.end()) {
            out.push_back(str(key, ": ", name, " is no longer among its files"));
        } else if (const std::string c = file_change(f, it->second); !c.empty()) {
            out.push_back(str(key, ": ", name, ": ", c));
        }
    }
    for (const auto& [name, f] : after) {
        if (before.count(name) == 0) out.push_back(str(key, ": ", name, " is a new file (", f.value("bytes", 0), " bytes)"));
    }
}

/// The fingerprints of `files`, each with its corpus when `corpora` names them.
nlohmann::json files_fingerprint(const std::vector<std::string>& files, const std::vector<std::string>& corpora) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < files.size(); ++i) {
        out.push_back(file_fingerprint(files[i]));
        if (i < corpora.size()) out.back()["corpus"] = corpora[i];
    }
    return out;
}

}  // namespace

nlohmann::json input_fingerprint(const std::vector<std::string>& train_files,
                                 const std::vector<std::string>& val_files, const std::string& tokenizer_file,
                                 const std::vector<std::string>& train_corpora,
                                 const std::vector<std::string>& val_corpora,
                                 const std::vector<std::string>& base_files) {
    nlohmann::json j;
    j["train"] = files_fingerprint(train_files, train_corpora);
    j["val"] = files_fingerprint(val_files, val_corpora);
    j["tokenizer"] = tokenizer_file.empty() ? nlohmann::json() : file_fingerprint(tokenizer_file);
    if (!base_files.empty()) j["base"] = files_fingerprint(base_files, {});
    return j;
}

std::vector<std::string> lora_base_files(const std::string& init_from) {
    namespace fs = std::filesystem;
    if (init_from.empty()) return {};
    if (!fs::is_directory(init_from)) return {init_from};
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(init_from)) {
        const std::string name = e.path().filename().string();
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file() && (name == "config.json" || ext == ".safetensors" || ext == ".bin" ||
                                    name == "model.safetensors.index.json")) {
            files.push_back(e.path().string());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<std::string> base_changes(const nlohmann::json& saved, const nlohmann::json& now) {
    std::vector<std::string> out;
    if (!saved.is_object() || !saved.contains("base") || !now.is_object() || !now.contains("base")) return out;
    list_changes("model.init_from", saved["base"], now["base"], out);
    return out;
}

void check_lora_base_unchanged(const std::string& step_dir, const std::string& base) {
    const nlohmann::json meta = read_checkpoint_meta(step_dir);
    if (!meta.contains("lora_base") || !meta.contains("inputs")) return;
    const std::string path = base.empty() ? meta["lora_base"].value("path", std::string()) : base;
    // Regenerated from the recorded seed: nothing on disk to change; a base that is not
    // there: the reader says so, with the --base to give.
    if (path.empty() || !std::filesystem::exists(path)) return;
    const std::vector<std::string> changes =
        base_changes(meta["inputs"], input_fingerprint({}, {}, "", {}, {}, lora_base_files(path)));
    if (changes.empty()) return;
    std::string list;
    for (const std::string& c : changes) list += (list.empty() ? "" : "; ") + c;
    throw InputError(str(step_dir, ": the LoRA run's base at ", path,
                         " is not the one its adapters were trained on (", list,
                         "): give --base with that base (a merge written into it changes it)"));
}

std::vector<std::string> input_changes(const nlohmann::json& saved, const nlohmann::json& now) {
    std::vector<std::string> out;
    if (!saved.is_object()) return out;
    list_changes("data.train", saved.value("train", nlohmann::json::array()),
                 now.value("train", nlohmann::json::array()), out);
    list_changes("data.val", saved.value("val", nlohmann::json::array()), now.value("val", nlohmann::json::array()),
                 out);
    const nlohmann::json was_tok = saved.value("tokenizer", nlohmann::json());
    const nlohmann::json now_tok = now.value("tokenizer", nlohmann::json());
    if (was_tok.is_object() != now_tok.is_object()) {
        out.push_back(was_tok.is_object() ? str("tokenizer: the checkpoint's run used ", was_tok.value("file", ""),
                                                ", this run finds none")
                                          : str("tokenizer: this run uses ", now_tok.value("file", ""),
                                                ", the checkpoint's run had none"));
    } else if (was_tok.is_object()) {
        const std::string c = file_change(was_tok, now_tok);
        if (!c.empty()) {
            out.push_back(str("tokenizer: ", was_tok.value("file", ""), " -> ", now_tok.value("file", ""), ": ", c));
        }
    }
    return out;
}

}  // namespace zt
