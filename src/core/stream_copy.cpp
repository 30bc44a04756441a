#include "ztrain/core/stream_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace zt {

void copy_past_cache(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    // Streaming stores need 16-byte aligned destinations: copy the head up to the first one.
    const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {  // one cache line per iteration
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
        const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    std::memcpy(d + i, s + i, bytes - i);
    // Streaming stores are weakly ordered: make them visible before the copy counts as done
    // (another thread reads the destination after a release of ours).
    _mm_sfence();
#else
    std::memcpy(dst, src, bytes);
#endif
}

}  // namespace zt
