// Independent readers for the files zt-consolidate writes, shared by the export tests (one
// rank) and the sharded-consolidation test (several ranks): plain HDF5 calls for .h5 and a
// safetensors parser written from the format's definition, so a bug in the exporter's own
// reader code cannot hide one in its writer.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt::test {

/// Hugging Face GPT-2 stores these weights as Conv1D, [in, out]: ztrain's (out, in) transposed.
inline bool is_hf_conv1d(const std::string& name) {
    for (const char* s : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}) {
        const size_t n = std::strlen(s);
        if (name.size() > n && name.compare(name.size() - n, n, s) == 0) return true;
    }
    return false;
}

/// The objects (groups, datasets) of HDF5 file `path` that carry a modification time, by
/// name. ztrain writes none, so equal contents give byte-identical files.
inline std::vector<std::string> h5_objects_with_mtime(const std::string& path) {
    std::vector<std::string> timed;
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    EXPECT_GE(file, 0) << path;
    if (file < 0) return {"(cannot open " + path + ")"};
#if H5_VERSION_GE(1, 12, 0)
    using ObjectInfo = H5O_info2_t;
#define ZT_H5OVISIT H5Ovisit3
#else
    using ObjectInfo = H5O_info_t;
#define ZT_H5OVISIT H5Ovisit2
#endif
    const auto visit = [](hid_t, const char* name, const ObjectInfo* info, void* out) -> herr_t {
        if (info->ctime != 0 || info->mtime != 0 || info->atime != 0 || info->btime != 0) {
            static_cast<std::vector<std::string>*>(out)->push_back(name);
        }
        return 0;
    };
    EXPECT_GE(ZT_H5OVISIT(file, H5_INDEX_NAME, H5_ITER_INC, visit, &timed, H5O_INFO_TIME), 0) << path;
#undef ZT_H5OVISIT
    H5Fclose(file);
    return timed;
}

/// Dataset `name` of an open .h5 file as floats, its shape in `dims`. With mem_type
/// H5T_NATIVE_UINT16 (16-bit exports) each element's raw bits land in the float's low half,
/// for the caller to check. `dtype_attr`, when given, receives the dataset's "dtype" attribute.
inline std::vector<float> h5_read_floats(hid_t file, const std::string& name, std::vector<hsize_t>& dims,
                                         std::string* dtype_attr = nullptr, hid_t mem_type = H5T_NATIVE_FLOAT) {
    const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    EXPECT_GE(ds, 0) << name;
    if (ds < 0) return {};
    const hid_t space = H5Dget_space(ds);
    dims.assign(static_cast<size_t>(H5Sget_simple_extent_ndims(space)), 0);
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    size_t n = 1;
    for (hsize_t d : dims) n *= d;
    std::vector<float> out(n);
    if (mem_type == H5T_NATIVE_FLOAT) {
        EXPECT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0) << name;
    } else {
        std::vector<uint16_t> h(n);
        EXPECT_GE(H5Dread(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, h.data()), 0) << name;
        for (size_t i = 0; i < n; ++i) out[i] = bits_float(static_cast<uint32_t>(h[i]));
    }
    if (dtype_attr != nullptr) {
        const hid_t attr = H5Aopen(ds, "dtype", H5P_DEFAULT);
        const hid_t type = H5Aget_type(attr);
        std::string s(H5Tget_size(type), '\0');
        H5Aread(attr, type, s.data());
        *dtype_attr = s.c_str();
        H5Tclose(type);
        H5Aclose(attr);
    }
    H5Sclose(space);
    H5Dclose(ds);
    return out;
}

struct SafeTensors {
    uint64_t header_len = 0;
    nlohmann::json header;
    std::string data;  // the data section
};

/// A safetensors file: 8-byte little-endian header length, JSON header, data section.
inline SafeTensors parse_safetensors(const std::string& path) {
    const std::string bytes = read_file(path);
    SafeTensors st;
    EXPECT_GE(bytes.size(), 8u) << path;
    if (bytes.size() < 8) return st;
    for (int i = 7; i >= 0; --i) {
        st.header_len = (st.header_len << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    }
    EXPECT_LE(8 + st.header_len, bytes.size()) << path;
    EXPECT_EQ(st.header_len % 8, 0u) << path << ": data must start 8-byte aligned";
    if (8 + st.header_len > bytes.size()) return st;
    st.header = nlohmann::json::parse(bytes.substr(8, st.header_len));
    st.data = bytes.substr(8 + st.header_len);
    return st;
}

/// Writes a safetensors file from a header and a data section (malformed on purpose or not;
/// forced_len, when not 0, replaces the header length).
inline void write_safetensors(const std::string& path, const nlohmann::json& header, const std::string& data,
                              uint64_t forced_len = 0) {
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    const uint64_t n = forced_len ? forced_len : text.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    write_file(path, out + text + data);
}

}  // namespace zt::test
