// libFuzzer target: weight import from a .safetensors file (zt::import_weights, the
// model.init_from path) into a tiny one-rank model (fuzz_support.hpp: tiny_model).
//
// The input is the whole file. import_weights validates everything it reads (header
// length, JSON, dtypes, shapes, offsets, overlaps, names) before using it; expected
// rejections are zt::Error / zt::InputError. Anything else is a finding, as is an accepted
// file that leaves the padded vocabulary rows of wte non-zero (import must zero them).
#include <cstdint>
#include <string>

#include "fuzz_support.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/error.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::scratch_dir();
    zt::fuzz::tiny_state();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = zt::fuzz::scratch_file("weights.safetensors");
    zt::fuzz::write_file(path, data, size);
    zt::fuzz::TinyState& m = zt::fuzz::tiny_state();
    // Poison every element (the padded vocabulary rows included): an accepted import must zero them.
    zt::fuzz::fill_master(m, 1234.5f);
    try {
        zt::import_weights(path, m.layout, m.cfg, m.state);
    } catch (const zt::Error&) {
        return 0;
    }
    zt::fuzz::require_zero_padding(m, "fuzz_safetensors");
    return 0;
}
