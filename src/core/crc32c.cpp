#include "ztrain/core/crc32c.hpp"

#include <array>
#include <cstring>

namespace zt {
namespace {

constexpr uint32_t kPolyReflected = 0x82f63b78u;  // Castagnoli, bit-reversed

std::array<uint32_t, 256> make_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
        t[i] = c;
    }
    return t;
}

uint32_t crc32c_table(const unsigned char* p, size_t n, uint32_t c) {
    static const std::array<uint32_t, 256> table = make_table();
    for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n, uint32_t c) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        std::memcpy(&word, p, 8);
        c64 = __builtin_ia32_crc32di(c64, word);
    }
    c = static_cast<uint32_t>(c64);
    for (; n > 0; --n, ++p) c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
bool have_sse42() {
    static const bool have = __builtin_cpu_supports("sse4.2");
    return have;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint32_t c = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (have_sse42()) return ~crc32c_sse42(p, n, c);
#endif
    return ~crc32c_table(p, n, c);
}

}  // namespace zt

namespace zt {

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
    return ~crc32c_table(static_cast<const unsigned char*>(data), n, ~crc);
}

}  // namespace zt
