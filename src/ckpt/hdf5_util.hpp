// HDF5 helpers shared by the checkpoint reader/writer and the exporter (private to ckpt/).
#pragma once

#include <hdf5.h>

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

/// Throws Error (or InputError for reads of user-supplied files) naming the file.
inline void h5_require(bool ok, bool input, const std::string& file, const std::string& what) {
    if (ok) return;
    if (input) throw InputError(str(file, ": ", what));
    throw Error(str(file, ": ", what));
}

}  // namespace zt::h5
