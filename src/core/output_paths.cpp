#include "ztrain/core/output_paths.hpp"

#include <filesystem>
#include <system_error>

#include "ztrain/core/error.hpp"

namespace zt {
namespace {

namespace fs = std::filesystem;

/// The absolute path with symbolic links of its existing part resolved; the lexical
/// absolute path where that fails.
fs::path resolved(const std::string& path) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (ec) p = fs::absolute(path, ec).lexically_normal();
    // "dir/" and "dir" name the same directory.
    if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
    return p;
}

/// Whether `inner` is `outer` or lies below it, component by component.
bool within(const fs::path& inner, const fs::path& outer) {
    auto i = inner.begin();
    for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
        if (i == inner.end() || *i != *o) return false;
    }
    return true;
}

}  // namespace

bool same_path(const std::string& a, const std::string& b) { return resolved(a) == resolved(b); }

void refuse_output_over_inputs(const std::string& flag, const std::string& output, const std::vector<ReadPath>& inputs) {
    if (output.empty()) return;
    const fs::path out = resolved(output);
    for (const ReadPath& in : inputs) {
        if (in.path.empty()) continue;
        const fs::path p = resolved(in.path);
        ZT_INPUT_CHECK(out != p, flag, " ", output, " is ", in.what, " (", in.path,
                       "), which this run reads: it would be overwritten; name another path");
        std::error_code ec;
        ZT_INPUT_CHECK(!(fs::is_directory(p, ec) && within(out, p) && fs::exists(out, ec) && !fs::is_directory(out, ec)), flag, " ", output,
                       " is already inside ", in.what, " (", in.path,
                       "), which this run reads: it would be overwritten; name another path");
    }
}

}  // namespace zt
