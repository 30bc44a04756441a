// HDF5 helpers shared by the checkpoint reader/writer and the exporter (private to ckpt/).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>

#include "ztrain/core/error.hpp"

namespace zt::h5 {

/// HDF5 prints its own error stack by default; ztrain reports errors itself, with the file.
inline void silence_hdf5() {
    static bool done = false;
    if (!done) {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        done = true;
    }
}

/// An HDF5 identifier closed on scope exit.
class H5Handle {
  public:
    H5Handle(hid_t id, herr_t (*close)(hid_t)) : m_id(id), m_close(close) {}
    ~H5Handle() {
        if (m_id >= 0) m_close(m_id);
    }
    H5Handle(const H5Handle&) = delete;
    H5Handle& operator=(const H5Handle&) = delete;
    hid_t get() const { return m_id; }
    bool ok() const { return m_id >= 0; }

  private:
    hid_t m_id;
    herr_t (*m_close)(hid_t);
};

/// A dataset or group creation property list (`cls` H5P_DATASET_CREATE or H5P_GROUP_CREATE)
/// that stores no modification time: HDF5 stamps one into every object header by default,
/// so the same state saved a second later would give a different file (and hash64).
/// Without it, equal state gives byte-identical checkpoint and consolidated files.
inline hid_t untimed_create_plist(hid_t cls) {
    const hid_t plist = H5Pcreate(cls);
    if (plist >= 0 && H5Pset_obj_track_times(plist, false) < 0) {
        H5Pclose(plist);
        return -1;
    }
    return plist;
}

/// Throws Error (or InputError for reads of user-supplied files) naming the file.
inline void h5_require(bool ok, bool input, const std::string& file, const std::string& what) {
    if (ok) return;
    if (input) throw InputError(str(file, ": ", what));
    throw Error(str(file, ": ", what));
}

/// Scalar uint64 attributes (shard groups' begin/end, shard datasets' hash64); the reader
/// throws InputError naming the file when the attribute is missing or unreadable.
void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file);
uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file);

/// libhdf5 1.10 trusts a dataset's storage description: a chunk stored shorter than its
/// declared size (or compact data shorter than the dataspace) makes H5Dread copy past the
/// end of its own buffer. Every dataset ztrain reads must be stored the way ztrain writes
/// datasets: contiguous or compact, or 1-D chunks with at most the Fletcher32 filter, holding
/// exactly the bytes its shape and type need. Anything else is refused before H5Dread.
inline void require_plain_storage(hid_t ds, const std::string& file, const std::string& name) {
    const auto refuse = [&](const std::string& why) { h5_require(false, true, file, str("dataset ", name, ": ", why)); };
    H5Handle space(H5Dget_space(ds), H5Sclose);
    H5Handle type(H5Dget_type(ds), H5Tclose);
    H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
    if (!space.ok() || !type.ok() || !dcpl.ok()) refuse("unreadable shape, type or storage properties");
    const hssize_t points = H5Sget_simple_extent_npoints(space.get());
    const size_t type_bytes = H5Tget_size(type.get());
    if (points < 0 || type_bytes == 0 || type_bytes > 16 ||
        static_cast<hsize_t>(points) > (hsize_t{1} << 58) / type_bytes) {
        refuse("implausible size");
    }
    const hsize_t data_bytes = static_cast<hsize_t>(points) * type_bytes;
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
        const hsize_t stored = H5Dget_storage_size(ds);
        if (stored != data_bytes) refuse(str("stores ", stored, " bytes, its shape needs ", data_bytes));
        return;
    }
    if (layout != H5D_CHUNKED) refuse("unsupported storage layout");
    bool fletcher32 = false;
    const int filters = H5Pget_nfilters(dcpl.get());
    if (filters < 0) refuse("unreadable filter pipeline");
    for (int i = 0; i < filters; ++i) {
        unsigned flags = 0;
        size_t cd_nelmts = 0;
        const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &cd_nelmts, nullptr, 0,
                                               nullptr, nullptr);
        if (id != H5Z_FILTER_FLETCHER32) {
            refuse(str("uses HDF5 filter ", id, "; ztrain reads uncompressed datasets (Fletcher32 allowed)"));
        }
        fletcher32 = true;
    }
    hsize_t chunk[1] = {0};
    if (H5Sget_simple_extent_ndims(space.get()) != 1 || H5Pget_chunk(dcpl.get(), 1, chunk) != 1 || chunk[0] == 0 ||
        chunk[0] > (hsize_t{1} << 40)) {
        refuse("chunked storage that is not one-dimensional");
    }
    const hsize_t expected_chunks = (static_cast<hsize_t>(points) + chunk[0] - 1) / chunk[0];
    hsize_t chunks = 0;
    if (H5Dget_num_chunks(ds, space.get(), &chunks) < 0 || chunks != expected_chunks) {
        refuse(str("has ", chunks, " stored chunks, its shape needs ", expected_chunks));
    }
    // A stored chunk is the full chunk (edge chunks too), plus 4 bytes when Fletcher32 ran.
    const hsize_t chunk_bytes = chunk[0] * type_bytes + (fletcher32 ? 4 : 0);
    for (hsize_t i = 0; i < chunks; ++i) {
        hsize_t offset[1] = {0};
        unsigned filter_mask = 0;
        haddr_t addr = 0;
        hsize_t size = 0;
        if (H5Dget_chunk_info(ds, space.get(), i, offset, &filter_mask, &addr, &size) < 0 || filter_mask != 0 ||
            size != chunk_bytes) {
            refuse(str("chunk ", i, " stores ", size, " bytes (filter mask ", filter_mask, "), expected ", chunk_bytes));
        }
    }
}

}  // namespace zt::h5
