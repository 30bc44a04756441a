// HDF5 attribute helpers shared by the checkpoint writer, its reader and the exporter
// (hdf5_util.hpp).
#include "hdf5_util.hpp"

namespace zt::h5 {

void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file) {
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    H5Handle attr(H5Acreate2(obj, name, H5T_NATIVE_UINT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    h5_require(attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_UINT64, &v) >= 0, false, file,
               str("cannot write attribute ", name));
}

uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file) {
    H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    uint64_t v = 0;
    h5_require(attr.ok() && H5Aread(attr.get(), H5T_NATIVE_UINT64, &v) >= 0, true, file,
               str("missing or unreadable attribute ", name));
    return v;
}

}  // namespace zt::h5
