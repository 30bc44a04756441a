// Corpus preparation (prepare.hpp), inputs: reading plain, gzip and zstd content (detected
// by the first bytes) from files or standard input, line by line in chunks, and cutting
// the inputs into parts at record boundaries.
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "prepare_detail.hpp"
#include "ztrain/core/error.hpp"

namespace fs = std::filesystem;

namespace zt::detail {

namespace {

constexpr size_t kRawChunk = 1 << 20;

enum class Compression { kNone, kGzip, kZstd };

Compression compression_of(const unsigned char* b, size_t n) {
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return Compression::kGzip;
    if (n >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) return Compression::kZstd;
    return Compression::kNone;
}

}  // namespace

bool is_stdin(const std::string& path) { return path == "-"; }

/// The raw stream (a file or standard input) and the decompressor over it.
struct InputReader::Impl {
    std::string path;
    std::ifstream file;
    std::istream* raw = nullptr;
    Compression kind = Compression::kNone;
    uint64_t raw_read = 0;
    std::vector<char> in_buf;
    size_t in_pos = 0, in_len = 0;
    bool raw_eof = false;
    bool stream_end = false;
    z_stream gz{};
    bool gz_open = false;
    ZSTD_DStream* zs = nullptr;

    ~Impl() {
        if (gz_open) inflateEnd(&gz);
        if (zs != nullptr) ZSTD_freeDStream(zs);
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw InputError(str("--input: '", path, "': ", what));
    }

    /// Refills in_buf from the raw stream when it is used up; false at its end.
    bool refill() {
        if (in_pos < in_len) return true;
        if (raw_eof) return false;
        raw->read(in_buf.data(), static_cast<std::streamsize>(in_buf.size()));
        in_len = static_cast<size_t>(raw->gcount());
        in_pos = 0;
        raw_read += in_len;
        if (raw->bad()) fail("read failed");
        if (in_len < in_buf.size()) raw_eof = true;
        return in_len > 0;
    }

    size_t read_plain(char* buf, size_t n) {
        if (!refill()) return 0;
        const size_t k = std::min(n, in_len - in_pos);
        std::memcpy(buf, in_buf.data() + in_pos, k);
        in_pos += k;
        return k;
    }

    size_t read_gzip(char* buf, size_t n) {
        size_t out = 0;
        while (out == 0) {
            if (stream_end) {
                // Concatenated gzip members (cat a.gz b.gz) continue the content.
                if (!refill()) return 0;
                if (inflateReset(&gz) != Z_OK) fail("gzip: cannot reset the decompressor");
                stream_end = false;
            }
            if (!refill()) fail("gzip: the file ends inside a compressed stream (truncated?)");
            gz.next_in = reinterpret_cast<Bytef*>(in_buf.data() + in_pos);
            gz.avail_in = static_cast<uInt>(in_len - in_pos);
            gz.next_out = reinterpret_cast<Bytef*>(buf);
            gz.avail_out = static_cast<uInt>(n);
            const int rc = inflate(&gz, Z_NO_FLUSH);
            if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
                fail(str("gzip: ", gz.msg != nullptr ? gz.msg : "corrupt data"));
            }
            in_pos = in_len - gz.avail_in;
            out = n - gz.avail_out;
            if (rc == Z_STREAM_END) stream_end = true;
        }
        return out;
    }

    size_t read_zstd(char* buf, size_t n) {
        size_t out = 0;
        while (out == 0) {
            if (!refill()) {
                if (!stream_end) fail("zstd: the file ends inside a compressed frame (truncated?)");
                return 0;
            }
            ZSTD_inBuffer in{in_buf.data() + in_pos, in_len - in_pos, 0};
            ZSTD_outBuffer o{buf, n, 0};
            const size_t rc = ZSTD_decompressStream(zs, &o, &in);
            if (ZSTD_isError(rc) != 0) fail(str("zstd: ", ZSTD_getErrorName(rc)));
            in_pos += in.pos;
            out = o.pos;
            stream_end = rc == 0;
        }
        return out;
    }
};

InputReader::InputReader(const std::string& path, uint64_t offset) : m(std::make_unique<Impl>()) {
    m->path = path;
    m->in_buf.resize(kRawChunk);
    if (is_stdin(path)) {
        m->raw = &std::cin;
    } else {
        m->file.open(path, std::ios::binary);
        if (!m->file) throw InputError(str("--input: cannot read '", path, "'"));
        m->raw = &m->file;
    }
    m->refill();
    m->kind = compression_of(reinterpret_cast<const unsigned char*>(m->in_buf.data()), m->in_len);
    if (m->kind == Compression::kGzip) {
        // 15 + 32: a gzip or zlib header, detected.
        if (inflateInit2(&m->gz, 15 + 32) != Z_OK) m->fail("gzip: cannot start the decompressor");
        m->gz_open = true;
    } else if (m->kind == Compression::kZstd) {
        m->zs = ZSTD_createDStream();
        if (m->zs == nullptr) m->fail("zstd: cannot start the decompressor");
    }
    if (offset > 0) {
        ZT_REQUIRE(m->kind == Compression::kNone && !is_stdin(path), "a part of '", path,
                   "' starts at byte ", offset, " but only plain files are cut");
        m->file.clear();
        m->file.seekg(static_cast<std::streamoff>(offset));
        m->in_pos = m->in_len = 0;
        m->raw_eof = false;
        m->raw_read = 0;
    }
}

InputReader::~InputReader() = default;

size_t InputReader::read(char* buf, size_t n) {
    switch (m->kind) {
        case Compression::kGzip:
            return m->read_gzip(buf, n);
        case Compression::kZstd:
            return m->read_zstd(buf, n);
        case Compression::kNone:
            break;
    }
    return m->read_plain(buf, n);
}

uint64_t InputReader::raw_bytes() const { return m->raw_read; }

bool InputReader::compressed() const { return m->kind != Compression::kNone; }

bool is_compressed_file(const std::string& path) {
    if (is_stdin(path)) return false;
    std::ifstream in(path, std::ios::binary);
    unsigned char b[4] = {0, 0, 0, 0};
    in.read(reinterpret_cast<char*>(b), 4);
    return compression_of(b, static_cast<size_t>(in.gcount())) != Compression::kNone;
}

LineReader::LineReader(const std::string& path, uint64_t begin, uint64_t end, bool text_only)
    : m_path(path), m_in(path, begin), m_end(end), m_text_only(text_only), m_buf_offset(begin) {}

bool LineReader::fill() {
    if (m_eof) return false;
    // Keep the unread tail, then append a chunk.
    m_buf.erase(0, m_pos);
    m_buf_offset += m_pos;
    m_pos = 0;
    const size_t old = m_buf.size();
    m_buf.resize(old + kRawChunk);
    const size_t got = m_in.read(m_buf.data() + old, kRawChunk);
    m_buf.resize(old + got);
    if (got == 0) {
        m_eof = true;
        return false;
    }
    ZT_INPUT_CHECK(!m_text_only || std::memchr(m_buf.data() + old, '\0', got) == nullptr, "--input: '", m_path,
                   "' contains NUL bytes (binary?); zt-prepare reads text files only");
    return true;
}

bool LineReader::next(InputLine& line) {
    if (m_buf_offset + m_pos >= m_end) return false;
    size_t nl = m_buf.find('\n', m_pos);
    while (nl == std::string::npos) {
        const size_t searched = m_buf.size() - m_pos;  // fill() moves the unread bytes to the front
        if (!fill()) break;
        nl = m_buf.find('\n', m_pos + searched);
    }
    if (m_pos >= m_buf.size()) return false;
    const size_t stop = nl == std::string::npos ? m_buf.size() : nl + 1;
    line.text = std::string_view(m_buf).substr(m_pos, stop - m_pos);
    line.offset = m_buf_offset + m_pos;
    m_pos = stop;
    return true;
}

namespace {

/// A line without its '\n' and a trailing '\r'.
std::string_view line_body(std::string_view text) {
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    return text;
}

/// The first record start at or after `from` (>= 1) in a plain file: jsonl, the first
/// line start; text, the line after the first separator line starting there. UINT64_MAX
/// when there is none.
uint64_t next_boundary(const std::string& path, uint64_t from, const PrepareOptions& opt, bool jsonl) {
    // The line holding byte from - 1 ends where the first line start >= from is.
    LineReader lines(path, from - 1, UINT64_MAX, false);
    InputLine line;
    if (!lines.next(line) || line.text.back() != '\n') return UINT64_MAX;
    if (jsonl) return line.offset + line.text.size();
    while (lines.next(line)) {
        if (line.text.back() == '\n' && line_body(line.text) == *opt.doc_separator) {
            return line.offset + line.text.size();
        }
    }
    return UINT64_MAX;
}

}  // namespace

std::vector<InputPart> plan_parts(const std::vector<std::string>& files, const PrepareOptions& opt, bool jsonl,
                                  uint64_t part_bytes) {
    std::vector<InputPart> parts;
    for (size_t f = 0; f < files.size(); ++f) {
        std::error_code ec;
        const uint64_t size = is_stdin(files[f]) ? 0 : static_cast<uint64_t>(fs::file_size(files[f], ec));
        const bool cut = !is_stdin(files[f]) && (jsonl || opt.doc_separator) && !is_compressed_file(files[f]);
        uint64_t begin = 0;
        while (true) {
            uint64_t end = UINT64_MAX;
            if (cut && begin + part_bytes < size) end = next_boundary(files[f], begin + part_bytes, opt, jsonl);
            if (end >= size) end = UINT64_MAX;
            const uint64_t raw_end = end == UINT64_MAX ? size : end;
            parts.push_back(InputPart{f, begin, end, raw_end - begin});
            if (end == UINT64_MAX) break;
            begin = end;
        }
    }
    return parts;
}

}  // namespace zt::detail
