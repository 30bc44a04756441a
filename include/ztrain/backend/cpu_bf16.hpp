// How the CPU backend runs the matrix products of a bf16 run: on the CPU's bf16 instructions
// through oneDNN (bf16 inputs, fp32 accumulation), or, where that is impossible or switched
// off, converted to fp32 through OpenBLAS sgemm as an fp32 run's.
//
// Decided once per process from three facts: whether the build found oneDNN, the ISA oneDNN
// dispatches to on this CPU (bf16 needs avx512_core_bf16 or avx512_core_amx; oneDNN's own
// DNNL_MAX_CPU_ISA caps it), and the environment variable ZT_CPU_BF16:
//   unset, "auto"  native where possible, else fp32 products with a start-up note
//   "on"           native, or an input error saying what is missing
//   "off"          fp32 products (a run whose numbers must match a machine without bf16)
// fp16 runs always use the fp32 products (the CPUs this targets have no fp16 products).
#pragma once

#include <string>

namespace zt {

struct CpuBf16Products {
    /// bf16 runs multiply bf16 inputs on bf16 instructions through oneDNN.
    bool native = false;
    /// The ISA oneDNN dispatches to ("avx512_core_bf16", "avx512_core_amx", "avx2", ...), or
    /// "none" in a build without oneDNN.
    std::string isa = "none";
    /// oneDNN's version ("2.6.3"), empty in a build without it.
    std::string onednn_version;
    /// Why not native, one sentence for the start-up note; empty when native.
    std::string fallback_reason;
};

/// The decision for `setting` (ZT_CPU_BF16's value; null when unset). Throws InputError for
/// a value other than auto/on/off, or "on" where native products are impossible.
CpuBf16Products decide_cpu_bf16_products(const char* setting);

/// decide_cpu_bf16_products(getenv("ZT_CPU_BF16")), decided on the first call and kept.
const CpuBf16Products& cpu_bf16_products();

/// One line for `ztrain --env`: oneDNN's version, its ISA and what a bf16 run's products use.
std::string cpu_bf16_products_report();

}  // namespace zt
