// CRC-32C (Castagnoli), the checksum of TensorFlow's record framing (TensorBoard event
// files) and of iSCSI/ext4: the SSE4.2 crc32 instruction where the CPU has it, a table
// elsewhere; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zt {

/// CRC-32C of `n` bytes, continuing from `crc` (the value of the bytes before; 0 to start).
/// crc32c("123456789") = 0xE3069283, the published check value.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// The same value by the table, whatever the CPU (the tests compare the two paths).
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

/// TensorFlow's masked form of a CRC stored next to the data it covers (so a CRC of data
/// that itself holds CRCs does not degenerate): rotate right by 15, add 0xa282ead8.
inline uint32_t masked_crc32c(const void* data, size_t n) {
    const uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace zt
