// Which checkpoint to resume from (resolve_resume, checkpoint.hpp): `latest` in a
// checkpoint directory, with the fallbacks for what an interrupted save can leave behind
// (a `latest` naming a directory moved aside or missing).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "checkpoint_format.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

using namespace ckpt_format;

std::vector<std::string> list_checkpoints(const std::string& ckpt_dir) {
    std::vector<std::string> steps;
    std::error_code ec;
    if (!fs::is_directory(ckpt_dir, ec)) return steps;
    for (const auto& entry : fs::directory_iterator(ckpt_dir, ec)) {
        const std::string n = entry.path().filename().string();
        if (entry.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos) {
            steps.push_back(entry.path().string());
        }
    }
    std::sort(steps.rbegin(), steps.rend());
    return steps;
}

namespace {

/// The step directory that DIR/latest names ("" when there is no `latest` and it is not
/// `required`); see resolve_resume for the fallbacks.
std::string from_latest(const std::string& dir, bool required, std::string* note) {
    const fs::path latest = fs::path(dir) / "latest";
    if (!fs::exists(latest)) {
        if (required) {
            throw InputError(str(dir, ": neither a checkpoint step directory (no meta.h5) nor a checkpoint "
                                      "directory (no 'latest' file)"));
        }
        return "";
    }
    std::ifstream in(latest);
    std::string name;
    std::getline(in, name);
    // `latest` names a directory inside the checkpoint directory, nothing else.
    const bool plain = !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
    if (!plain) {
        throw InputError(str(latest.string(), ": names '", name,
                             "', which is not a step directory inside ", dir));
    }
    const fs::path step = fs::path(dir) / name;
    const fs::path aside = fs::path(dir) / (name + ".replaced");
    if (!fs::is_directory(step) && fs::exists(aside / "meta.h5") && fs::exists(aside / kChecksumFile)) {
        // A re-save without RENAME_EXCHANGE was interrupted between its renames: the
        // previous copy of this step is complete; read it where it is (the next save
        // moves it back).
        if (note) *note = str(latest.string(), " names '", name, "', found at ", aside.string());
        return aside.string();
    }
    if (!fs::is_directory(step)) {
        // resume=auto: a crash between a save's renames, or a removed directory, leaves
        // `latest` dangling; the newest complete checkpoint is the one to continue from.
        const std::vector<std::string> steps = required ? std::vector<std::string>{} : list_checkpoints(dir);
        if (steps.empty()) {
            throw InputError(str(latest.string(), ": names '", name, "', which does not exist in ", dir,
                                 required ? "" : ", and no other complete checkpoint is there"));
        }
        if (note) {
            *note = str(latest.string(), " names '", name, "', which does not exist; resuming from the newest "
                        "complete checkpoint, ", steps.front());
        }
        return steps.front();
    }
    return step.string();
}

}  // namespace

std::string resolve_resume(const std::string& resume, const std::string& ckpt_dir, std::string* note) {
    if (resume == "never") return "";
    if (resume == "auto") return from_latest(ckpt_dir, false, note);
    if (!fs::exists(resume)) throw InputError(str("checkpoint.resume: '", resume, "' does not exist"));
    if (fs::exists(fs::path(resume) / "meta.h5")) return resume;
    return from_latest(resume, true, note);
}

}  // namespace zt
