// libFuzzer target: weight import from a .safetensors file (zt::import_weights, the
// model.init_from path) into a tiny one-rank model (fuzz_support.hpp: tiny_model).
//
// The input is the whole file. import_weights validates everything it reads (header
// length, JSON, dtypes, shapes, offsets, overlaps, names) before using it; expected
// rejections are zt::Error / zt::InputError. Anything else is a finding, as is an accepted
// file that leaves the padded vocabulary rows of wte non-zero (import must zero them).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "fuzz_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/gpt.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace {

struct Model {
    zt::ModelConfig cfg = zt::fuzz::tiny_model();
    zt::ModelLayout layout = zt::make_gpt_layout(cfg);
    std::unique_ptr<zt::Backend> backend = zt::make_cpu_backend(1);
    zt::ModelState state{layout, *backend, 1};
};

Model& model() {
    static Model m;
    return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    zt::fuzz::scratch_dir();
    model();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = zt::fuzz::scratch_file("weights.safetensors");
    zt::fuzz::write_file(path, data, size);
    Model& m = model();
    // Poison the padded vocabulary rows: an accepted import must zero them.
    const zt::ParamSpec& wte = m.layout.find("wte.weight");
    float* w = m.state.master_base(wte.unit) + wte.offset;
    for (size_t i = wte.init_numel; i < wte.numel; ++i) w[i] = 1234.5f;
    try {
        zt::import_weights(path, m.layout, m.cfg, m.state);
    } catch (const zt::Error&) {
        return 0;
    }
    for (size_t i = wte.init_numel; i < wte.numel; ++i) {
        if (w[i] != 0.f) {
            std::fprintf(stderr, "fuzz_safetensors: padded wte row element %zu is %g after an import\n", i,
                         static_cast<double>(w[i]));
            std::abort();
        }
    }
    return 0;
}
