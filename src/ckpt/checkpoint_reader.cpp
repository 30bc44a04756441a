// The checkpoint reader: meta.h5 (verified against CHECKSUM, then parsed and checked) and
// the shard files (each verified against the size and hash meta_json records before its
// first use). The one reader: load_checkpoint (resume) and zt-consolidate both read
// through CheckpointReader. Format: checkpoint.hpp.
#include "ztrain/ckpt/checkpoint.hpp"

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "checkpoint_format.hpp"
#include "hdf5_util.hpp"
#include "model_record.hpp"
#include "weights_file.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt {

using h5::H5Handle;
using h5::h5_require;
using h5::read_u64_attr;
using h5::require_plain_storage;
using h5::silence_hdf5;
using namespace ckpt_format;

namespace {

/// Reads elements [first, first + n) of a 1-D float dataset (the file's hash was verified).
void read_float_range(hid_t group, const char* name, size_t first, size_t n, float* out, const std::string& file) {
    H5Handle ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
    h5_require(ds.ok(), true, file, str("missing dataset ", name));
    H5Handle space(H5Dget_space(ds.get()), H5Sclose);
    hsize_t dims[1] = {0};
    h5_require(space.ok() && H5Sget_simple_extent_ndims(space.get()) == 1 &&
                   H5Sget_simple_extent_dims(space.get(), dims, nullptr) == 1,
               true, file, str("dataset ", name, " is not one-dimensional"));
    h5_require(first + n <= dims[0], true, file,
               str("dataset ", name, " has ", dims[0], " elements, need [", first, ", ", first + n, ")"));
    require_plain_storage(ds.get(), file, name);
    const hsize_t start[1] = {static_cast<hsize_t>(first)};
    const hsize_t count[1] = {static_cast<hsize_t>(n)};
    H5Handle mem(H5Screate_simple(1, count, nullptr), H5Sclose);
    h5_require(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0, true, file,
               str("cannot select a range of ", name));
    h5_require(H5Dread(ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, out) >= 0, true, file,
               str("dataset ", name, " failed its checksum or could not be read (damaged file?)"));
    // A whole-dataset read also checks the dataset's own hash (the common case: loading at
    // the world size and stage that wrote it). Partial reads rely on the file hash.
    if (first == 0 && n == dims[0] && H5Aexists(ds.get(), "hash64") > 0) {
        h5_require(read_u64_attr(ds.get(), "hash64", file) == hash64(out, n * sizeof(float)), true, file,
                   str("dataset ", name, " does not match its hash64 attribute (damaged)"));
    }
}

}  // namespace

nlohmann::json read_checkpoint_meta(const std::string& step_dir) {
    silence_hdf5();
    const std::string file = (fs::path(step_dir) / kMetaFile).string();
    if (!fs::exists(file)) throw InputError(str(file, ": missing (incomplete or not a checkpoint)"));
    {
        const std::string sum_path = (fs::path(step_dir) / kChecksumFile).string();
        std::ifstream in(sum_path, std::ios::binary);
        if (!in) throw InputError(str(sum_path, ": missing (incomplete or damaged checkpoint)"));
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (text != checksum_line(file_hash64(file))) {
            throw InputError(str(file, ": does not match ", sum_path, " (meta.h5 or its checksum is damaged)"));
        }
    }
    H5Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    h5_require(f.ok(), true, file, "cannot open as HDF5 (damaged or truncated?)");
    H5Handle ds(H5Dopen2(f.get(), kMetaDataset, H5P_DEFAULT), H5Dclose);
    h5_require(ds.ok(), true, file, "no meta_json dataset (not a ztrain checkpoint?)");
    H5Handle space(H5Dget_space(ds.get()), H5Sclose);
    hsize_t dims[1] = {0};
    h5_require(space.ok() && H5Sget_simple_extent_ndims(space.get()) == 1 &&
                   H5Sget_simple_extent_dims(space.get(), dims, nullptr) == 1 && dims[0] <= (hsize_t{1} << 28),
               true, file, "meta_json has an unexpected shape");
    require_plain_storage(ds.get(), file, "meta_json");
    {
        H5Handle type(H5Dget_type(ds.get()), H5Tclose);
        h5_require(type.ok() && H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1, true, file,
                   "meta_json is not a byte array");
    }
    // meta_json is checked by Fletcher32 (in HDF5) and, with the whole file, by CHECKSUM. No
    // attribute of meta.h5 is opened: libhdf5 1.10's attribute-message decoder overflows on
    // crafted messages (tests/fuzz/README.md, finding 5), and a third hash adds nothing.
    std::string text(static_cast<size_t>(dims[0]), '\0');
    h5_require(H5Dread(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0, true, file,
               "meta_json failed its checksum or could not be read (damaged file?)");
    nlohmann::json meta;
    try {
        meta = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        throw InputError(str(file, ": meta_json is not valid JSON: ", e.what()));
    }
    // value() throws json::type_error for a non-object or a mistyped field: still bad input.
    try {
        h5_require(meta.is_object() && meta.value("format", "") == kFormatName, true, file, "not a ztrain checkpoint");
        // Every number of the manifest is an integer except scaler.scale, the Llama model
        // record's real-valued fields and a blend's corpus weights (read as double only). A float anywhere else
        // (1e30 where a unit index belongs) would reach json::get<int> / get<size_t>, whose
        // float-to-integer conversion is undefined behaviour out of range: refuse it here, once,
        // for every reader of the manifest. Iterative: the nesting depth is the file's choice.
        const nlohmann::json* scale = nullptr;
        if (meta.contains("scaler") && meta.at("scaler").is_object() && meta.at("scaler").contains("scale")) {
            scale = &meta.at("scaler").at("scale");
        }
        std::vector<const nlohmann::json*> reals;
        if (scale != nullptr) reals.push_back(scale);
        if (meta.contains("model") && meta.at("model").is_object()) {
            const nlohmann::json& model = meta.at("model");
            for (const char* key :
                 {"rope_theta", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor", "norm_eps"}) {
                if (model.contains(key)) reals.push_back(&model.at(key));
            }
        }
        if (meta.contains("blend") && meta.at("blend").is_object() && meta.at("blend").contains("corpora") &&
            meta.at("blend").at("corpora").is_array()) {
            for (const nlohmann::json& c : meta.at("blend").at("corpora")) {
                if (c.is_object() && c.contains("weight")) reals.push_back(&c.at("weight"));
            }
        }
        std::vector<const nlohmann::json*> todo{&meta};
        while (!todo.empty()) {
            const nlohmann::json* j = todo.back();
            todo.pop_back();
            if (j->is_number_float() && std::find(reals.begin(), reals.end(), j) == reals.end()) {
                throw InputError(str(file, ": meta_json holds the non-integer number ", j->dump(),
                                     " where an integer belongs"));
            }
            if (j->is_structured()) {
                for (const nlohmann::json& v : *j) todo.push_back(&v);
            }
        }
        const int version = meta.value("version", 0);
        h5_require(version >= kOldestReadableVersion && version <= kFormatVersion, true, file,
                   str("format version ", version, ", this ztrain reads versions ", kOldestReadableVersion, " to ",
                       kFormatVersion));
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(file, ": malformed meta_json: ", e.what()));
    }
    for (const char* key : {"step", "applied_steps", "samples_seen", "units", "tensors", "shards", "scaler"}) {
        h5_require(meta.contains(key), true, file, str("meta_json lacks '", key, "'"));
    }
    // Version 2 records the model as data (version 1 may lack it: model_record.cpp).
    h5_require(meta.at("version") == 1 || meta.contains("model"), true, file, "meta_json lacks 'model'");
    return meta;
}

namespace {
/// The path of a shard named in the manifest: a plain file name inside the step directory,
/// never a path that leads elsewhere.
std::string shard_path(const std::string& step_dir, const nlohmann::json& shard) {
    const std::string name = shard.at("file").get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw InputError(str((fs::path(step_dir) / kMetaFile).string(), ": shard file name '", name,
                             "' is not a plain file name inside the checkpoint"));
    }
    return (fs::path(step_dir) / name).string();
}

/// Size and hash check of one shard file against its meta record.
void verify_shard_file(const std::string& file, const nlohmann::json& shard) {
    if (!fs::exists(file)) throw InputError(str(file, ": missing shard file"));
    const uint64_t bytes = static_cast<uint64_t>(fs::file_size(file));
    if (bytes != shard.at("bytes").get<uint64_t>()) {
        throw InputError(str(file, ": ", bytes, " bytes, the checkpoint recorded ", shard.at("bytes").get<uint64_t>(),
                             " (truncated or damaged)"));
    }
    if (file_hash64(file) != shard.at("hash64").get<uint64_t>()) {
        throw InputError(str(file, ": checksum mismatch (the file was damaged after it was written)"));
    }
}
}  // namespace

std::string verify_checkpoint_files(const std::string& step_dir) {
    try {
        const nlohmann::json meta = read_checkpoint_meta(step_dir);
        for (const auto& shard : meta.at("shards")) verify_shard_file(shard_path(step_dir, shard), shard);
    } catch (const InputError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return str(step_dir, ": ", e.what());
    }
    return "";
}

std::string newest_complete_checkpoint(const std::string& path) {
    std::error_code ec;
    const bool step_dir = fs::exists(fs::path(path) / kMetaFile, ec);
    fs::path given = fs::path(path).lexically_normal();
    if (!given.has_filename()) given = given.parent_path();  // "step_00000010/"
    const fs::path dir = step_dir ? given.parent_path() : given;
    for (const std::string& candidate : list_checkpoints(dir.empty() ? "." : dir.string())) {
        if (verify_checkpoint_files(candidate).empty()) return candidate;
    }
    return "";
}

CheckpointReader::CheckpointReader(const std::string& step_dir, std::string base)
    : m_dir(step_dir), m_meta(read_checkpoint_meta(step_dir)) {
    // Every range names a unit of the model: read() and the callers index unit tables with it;
    // every file a tensor rank of the split.
    try {
        m_tensor = m_meta.value("tensor", 1);
        if (m_tensor < 1 || m_tensor > (1 << 16)) throw InputError(str(meta_file(), ": tensor ", m_tensor));
        const int stages = m_meta.value("pipeline", 1);
        if (stages < 1 || stages > (1 << 16)) throw InputError(str(meta_file(), ": pipeline ", stages));
        m_parts.resize(static_cast<size_t>(m_tensor));
        const size_t num_units = m_meta.at("units").size();
        for (const auto& shard : m_meta.at("shards")) {
            const std::string file = shard_path(m_dir, shard);
            const int t = shard.value("tensor_rank", 0);
            if (t < 0 || t >= m_tensor) throw InputError(str(file, ": tensor rank ", t, " of ", m_tensor));
            for (const auto& r : shard.at("units")) {
                const int u = r.at("unit").get<int>();
                if (u < 0 || static_cast<size_t>(u) >= num_units) throw InputError(str(file, ": unit ", u, " out of range"));
            }
        }
        m_base_elsewhere = m_meta.contains("lora_base");
        ZT_INPUT_CHECK(m_base_elsewhere || base.empty(), meta_file(), ": a LoRA base was given (", base,
                       "), but this checkpoint holds every weight itself (it is not a LoRA run's, or predates "
                       "checkpoints without their base)");
        if (m_base_elsewhere) m_base_path = base.empty() ? m_meta.at("lora_base").at("path").get<std::string>() : base;
        ZT_INPUT_CHECK(!m_base_elsewhere || !m_base_path.empty() || m_meta.contains("seed"), meta_file(),
                       ": lora_base names no weights and the manifest records no seed to regenerate the base from");
    } catch (const nlohmann::json::exception& e) {
        throw InputError(str(meta_file(), ": malformed manifest: ", e.what()));
    }
}

CheckpointReader::~CheckpointReader() = default;

size_t CheckpointReader::saved_begin(const ModelLayout& layout, int unit) const {
    return m_base_elsewhere ? trainable_begins(layout)[static_cast<size_t>(unit)] : 0;
}

void CheckpointReader::read_base(int unit, size_t begin, size_t end, const char* which, float* out) {
    if (std::string(which) != "master") {
        std::fill(out, out + (end - begin), 0.f);  // a frozen weight has no moments
        return;
    }
    if (m_base_path.empty()) {
        init_unit_range(whole(), unit, m_meta.at("seed").get<uint64_t>(), begin, end, out);
        return;
    }
    if (!m_base) {
        try {
            m_base = std::make_unique<WeightsRanges>(m_base_path, whole(), whole().model);
        } catch (const InputError& e) {
            throw InputError(str(m_dir, ": the LoRA checkpoint does not hold its frozen base; reading it from ",
                                 m_base_path, " failed: ", e.what(),
                                 " (zt-consolidate, zt-generate and zt-eval take --base DIR: where the base is now)"));
        }
    }
    m_base->read(unit, begin, end, out);
}

const ModelLayout& CheckpointReader::whole() {
    if (!m_whole) {
        m_whole = std::make_unique<ModelLayout>(make_model_layout(recorded_model(m_meta, meta_file())));
        ZT_INPUT_CHECK(m_whole->unit_numel == m_meta.at("units").get<std::vector<size_t>>(), meta_file(),
                       ": the recorded model's layout differs from the manifest's units");
    }
    return *m_whole;
}

const ModelLayout& CheckpointReader::written_part(int r) {
    std::unique_ptr<ModelLayout>& p = m_parts[static_cast<size_t>(r)];
    if (!p) p = std::make_unique<ModelLayout>(make_model_layout(whole().model, TensorSplit{m_tensor, r}));
    return *p;
}

namespace {

/// Reads the span of `runs`' sources with `read_span` (begin, end, buffer) and copies each
/// run to out (indexed from `out_begin`): from its whole coordinates to its local ones when
/// `into_local`, else the other way.
template <typename ReadSpan>
void gather_runs(const std::vector<SliceRun>& runs, bool into_local, size_t out_begin, float* out,
                 ReadSpan read_span) {
    if (runs.empty()) return;
    const auto from = [&](const SliceRun& r) { return into_local ? r.whole : r.local; };
    const auto to = [&](const SliceRun& r) { return into_local ? r.local : r.whole; };
    size_t lo = SIZE_MAX;
    size_t hi = 0;
    for (const SliceRun& r : runs) {
        lo = std::min(lo, from(r));
        hi = std::max(hi, from(r) + r.length);
    }
    std::vector<float> span(hi - lo);
    read_span(lo, hi, span.data());
    for (const SliceRun& r : runs) std::copy_n(span.data() + (from(r) - lo), r.length, out + (to(r) - out_begin));
}

}  // namespace

void CheckpointReader::read(int unit, size_t begin, size_t end, const char* which, float* out) {
    if (!m_base_elsewhere) {
        read_saved(unit, begin, end, which, out);
        return;
    }
    const size_t saved = std::clamp(saved_begin(whole(), unit), begin, end);
    if (saved > begin) read_base(unit, begin, saved, which, out);
    if (end > saved) read_saved(unit, saved, end, which, out + (saved - begin));
}

void CheckpointReader::read_saved(int unit, size_t begin, size_t end, const char* which, float* out) {
    if (m_tensor == 1) {
        read_written(0, unit, begin, end, which, out);
        return;
    }
    // Each tensor rank's slices, mapped into the unsplit unit; alignment gaps are zero.
    std::fill(out, out + (end - begin), 0.f);
    for (int r = 0; r < m_tensor; ++r) {
        gather_runs(runs_within(slice_runs(written_part(r), whole(), unit), begin, end, false), false, begin, out,
                    [&](size_t lo, size_t hi, float* buf) { read_written(r, unit, lo, hi, which, buf); });
    }
}

void CheckpointReader::read(const ModelLayout& part, int unit, size_t begin, size_t end, const char* which,
                            float* out) {
    if (part.split.size == m_tensor) {
        // The saved part straight from the files; a frozen base through the unsplit layout.
        const size_t saved = std::clamp(saved_begin(part, unit), begin, end);
        if (end > saved) read_written(part.split.rank, unit, saved, end, which, out + (saved - begin));
        end = saved;
        if (end == begin) return;
    }
    std::fill(out, out + (end - begin), 0.f);
    gather_runs(runs_within(slice_runs(part, whole(), unit), begin, end, true), true, begin, out,
                [&](size_t lo, size_t hi, float* buf) { read(unit, lo, hi, which, buf); });
}

std::string CheckpointReader::meta_file() const { return (fs::path(m_dir) / kMetaFile).string(); }

void CheckpointReader::read_written(int tensor_rank, int unit, size_t begin, size_t end, const char* which,
                                    float* out) {
    size_t covered = 0;
    for (const auto& shard : m_meta["shards"]) {
        if (shard.value("tensor_rank", 0) != tensor_rank) continue;
        const std::string file = shard_path(m_dir, shard);
        for (const auto& r : shard.at("units")) {
            if (r.at("unit").get<int>() != unit) continue;
            const size_t sb = r.at("begin").get<size_t>();
            const size_t b = std::max(sb, begin);
            const size_t e = std::min(r.at("end").get<size_t>(), end);
            if (e <= b) continue;
            if (std::find(m_verified.begin(), m_verified.end(), file) == m_verified.end()) {
                verify_shard_file(file, shard);
                m_verified.push_back(file);
            }
            H5Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
            h5_require(f.ok(), true, file, "cannot open as HDF5 (damaged?)");
            H5Handle g(H5Gopen2(f.get(), unit_group_name(unit).c_str(), H5P_DEFAULT), H5Gclose);
            h5_require(g.ok(), true, file, str("missing group ", unit_group_name(unit)));
            h5_require(read_u64_attr(g.get(), "begin", file) == sb, true, file,
                       str(unit_group_name(unit), ": begin differs from meta.h5"));
            read_float_range(g.get(), which, b - sb, e - b, out + (b - begin), file);
            covered += e - b;
        }
    }
    if (covered != end - begin) {
        throw InputError(str(m_dir, ": the shards", m_tensor > 1 ? str(" of tensor rank ", tensor_rank) : "",
                             " cover ", covered, " of elements [", begin, ", ", end, ") of unit ", unit,
                             " (shard files missing from the list?)"));
    }
}

}  // namespace zt
