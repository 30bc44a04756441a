#include "ztrain/train/tensorboard.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ztrain/core/crc32c.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace {

// ---- protobuf wire format: the few pieces an Event needs ----

void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void put_fixed(std::string& out, uint64_t bits, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

/// Field `field` of wire type 2 (length-delimited: strings and nested messages).
void put_bytes(std::string& out, int field, const std::string& bytes) {
    put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
    put_varint(out, bytes.size());
    out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
    std::string e;
    uint64_t bits = 0;
    std::memcpy(&bits, &wall_time, sizeof bits);
    put_varint(e, (1 << 3) | 1);  // wall_time: fixed64
    put_fixed(e, bits, 8);
    if (step != 0) {  // proto3 leaves a zero default out
        put_varint(e, (2 << 3) | 0);
        put_varint(e, static_cast<uint64_t>(step));
    }
    return e;
}

double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void flatten(const std::string& prefix, const nlohmann::ordered_json& v, std::vector<TensorBoardScalar>& out) {
    if (v.is_object()) {
        for (auto it = v.begin(); it != v.end(); ++it) flatten(prefix + "/" + it.key(), it.value(), out);
    } else if (v.is_boolean()) {
        out.push_back({prefix, v.get<bool>() ? 1.0 : 0.0});
    } else if (v.is_number()) {
        out.push_back({prefix, v.get<double>()});
    }
}

}  // namespace

std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::ordered_json& record) {
    std::vector<TensorBoardScalar> out;
    if (!record.is_object()) return out;
    std::string group = "train";
    if (record.contains("event") && record["event"].is_string()) {
        group = record["event"].get<std::string>();
        if (record.contains("task") && record["task"].is_string()) group += "/" + record["task"].get<std::string>();
    } else if (record.contains("val_loss")) {
        group = "val";
    }
    for (auto it = record.begin(); it != record.end(); ++it) {
        const std::string& key = it.key();
        if (key == "step" || key == "event" || key == "task") continue;
        flatten(group + "/" + (group == "val" && key == "val_loss" ? std::string("loss") : key), it.value(), out);
    }
    return out;
}

std::string tensorboard_scalar_event(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& scalars) {
    std::string summary;
    for (const TensorBoardScalar& s : scalars) {
        std::string value;
        put_bytes(value, 1, s.tag);
        const float f = static_cast<float>(s.value);
        uint32_t bits = 0;
        std::memcpy(&bits, &f, sizeof bits);
        put_varint(value, (2 << 3) | 5);  // simple_value: fixed32
        put_fixed(value, bits, 4);
        put_bytes(summary, 1, value);
    }
    std::string e = event_header(wall_time, step);
    put_bytes(e, 5, summary);
    return e;
}

std::string tensorboard_record(const std::string& payload) {
    std::string r;
    put_fixed(r, payload.size(), 8);
    const uint32_t len_crc = masked_crc32c(r.data(), 8);
    put_fixed(r, len_crc, 4);
    r += payload;
    put_fixed(r, masked_crc32c(payload.data(), payload.size()), 4);
    return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, long resumed_step) : m_step(resumed_step) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(str("cannot create the TensorBoard directory ", dir, ": ", ec.message()));
    char host[256] = "localhost";
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
    const double now = unix_seconds();
    const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                             std::to_string(static_cast<long long>(now)) + "." + host;
    m_path = base;
    // "x": never open a file that exists (two runs started in the same second).
    m_file = std::fopen(m_path.c_str(), "wbx");
    if (m_file == nullptr && errno == EEXIST) {
        m_path = base + "." + std::to_string(::getpid());
        m_file = std::fopen(m_path.c_str(), "wbx");
    }
    if (m_file == nullptr) throw Error(str("cannot create ", m_path, ": ", std::strerror(errno)));
    std::string version = event_header(now, 0);
    put_bytes(version, 3, "brain.Event:2");
    append(version);
    if (resumed_step > 0) {
        // SessionLog{status: START}: TensorBoard drops what it holds at this step and later.
        std::string start = event_header(now, resumed_step + 1);
        std::string session_log;
        put_varint(session_log, (1 << 3) | 0);
        put_varint(session_log, 1);
        put_bytes(start, 6, session_log);
        append(start);
    }
}

TensorBoardWriter::~TensorBoardWriter() {
    if (m_file != nullptr) std::fclose(m_file);
}

void TensorBoardWriter::write(const nlohmann::ordered_json& record) {
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer()) {
        m_step = record["step"].get<long>();
    }
    const std::vector<TensorBoardScalar> scalars = tensorboard_scalars(record);
    if (!scalars.empty()) append(tensorboard_scalar_event(unix_seconds(), m_step, scalars));
}

void TensorBoardWriter::append(const std::string& payload) {
    const std::string r = tensorboard_record(payload);
    if (std::fwrite(r.data(), 1, r.size(), m_file) != r.size() || std::fflush(m_file) != 0) {
        throw Error(str("cannot write ", m_path, ": ", std::strerror(errno)));
    }
}

}  // namespace zt
