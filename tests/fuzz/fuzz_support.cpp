#include "fuzz_support.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace zt::fuzz {

namespace fs = std::filesystem;

namespace {
std::string g_dir;

void remove_scratch() {
    std::error_code ec;
    if (!g_dir.empty()) fs::remove_all(g_dir, ec);
}
}  // namespace

const std::string& scratch_dir() {
    if (g_dir.empty()) {
        std::error_code ec;
        std::string base = fs::is_directory("/dev/shm", ec) ? "/dev/shm" : "";
        if (base.empty()) {
            const char* tmp = std::getenv("TMPDIR");
            base = tmp && *tmp ? tmp : "/tmp";
        }
        g_dir = base + "/ztfuzz." + std::to_string(::getpid());
        fs::remove_all(g_dir, ec);
        fs::create_directories(g_dir, ec);
        if (ec) {
            std::fprintf(stderr, "fuzz harness: cannot create %s: %s\n", g_dir.c_str(), ec.message().c_str());
            std::abort();
        }
        std::atexit(remove_scratch);
    }
    return g_dir;
}

std::string scratch_file(const std::string& name) { return scratch_dir() + "/" + name; }

void write_file(const std::string& path, const void* data, size_t n) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        std::perror(path.c_str());
        std::abort();
    }
    if (n > 0 && std::fwrite(data, 1, n, f) != n) {
        std::perror(path.c_str());
        std::abort();
    }
    if (std::fclose(f) != 0) {
        std::perror(path.c_str());
        std::abort();
    }
}

void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

ModelConfig tiny_model() {
    ModelConfig m;
    m.n_layer = 1;
    m.n_head = 1;
    m.n_embd = 4;
    m.seq_len = 4;
    m.vocab_size = 10;
    m.vocab_pad_to = 16;
    return m;
}

ModelConfig tiny_llama_model() {
    ModelConfig m = tiny_model();
    m.arch = ModelArch("llama");
    m.n_head = 2;
    m.n_kv_head = 1;
    m.n_embd = 8;
    m.ffn_dim = 8;
    m.rope_theta = 500000;
    m.rope_scaling = RopeScaling::kLlama3;
    m.rope_factor = 8;
    m.rope_original_context = 2;
    m.tie_embeddings = false;
    return m;
}

TinyState::TinyState(const ModelConfig& model)
    : cfg(model), layout(make_model_layout(cfg)), backend(make_cpu_backend(1)), state(layout, *backend, 1) {}

TinyState& tiny_state() {
    static TinyState m(tiny_model());
    return m;
}

void fill_master(TinyState& m, float value) {
    for (int u = 0; u < m.layout.num_units(); ++u) {
        float* w = m.state.shards().master_base(u);
        std::fill(w + m.state.shards().owned_begin(u), w + m.state.shards().owned_end(u), value);
    }
}

void require_zero_padding(TinyState& m, const char* target) {
    for (const ParamSpec& p : m.layout.params) {
        const float* w = m.state.shards().master_base(p.unit) + p.offset;
        for (size_t i = p.init_numel; i < p.numel; ++i) {
            if (w[i] != 0.f) {
                std::fprintf(stderr, "%s: padded %s element %zu is %g after an import\n", target, p.name.c_str(), i,
                             static_cast<double>(w[i]));
                std::abort();
            }
        }
    }
}

std::string hf_shard_name(size_t k, size_t n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
    return buf;
}

namespace {
[[noreturn]] void h5_fail(const std::string& path, const char* what) {
    std::fprintf(stderr, "fuzz harness: %s: %s failed\n", path.c_str(), what);
    std::abort();
}
}  // namespace

void write_meta_h5(const std::string& path, const std::string& text) {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) h5_fail(path, "H5Fcreate");
    const hsize_t dims[1] = {static_cast<hsize_t>(text.size())};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk[1] = {dims[0] > 0 ? std::min<hsize_t>(dims[0], 1 << 20) : 1};
    if (space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, chunk) < 0 || H5Pset_fletcher32(dcpl) < 0) {
        h5_fail(path, "dataset setup");
    }
    const hid_t ds = H5Dcreate2(f, "meta_json", H5T_NATIVE_UINT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) h5_fail(path, "H5Dcreate2");
    if (!text.empty() && H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0) {
        h5_fail(path, "H5Dwrite");
    }
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (H5Fclose(f) < 0) h5_fail(path, "H5Fclose");
}

}  // namespace zt::fuzz
