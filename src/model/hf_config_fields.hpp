// Reading a Hugging Face config.json's fields for a family's hf_settings (family.hpp): each
// field checked for its kind, every message naming the file and the field. Private to model/.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ztrain/core/error.hpp"

namespace zt {

/// Reads config.json fields, each checked for its kind, into deck texts; every message names
/// the file and the field.
class HfConfigFields {
  public:
    HfConfigFields(const nlohmann::json& c, const std::string& file) : m_c(c), m_file(file) {}

    bool has(const char* f) const { return m_c.contains(f) && !m_c.at(f).is_null(); }
    const nlohmann::json& at(const char* f) const {
        ZT_INPUT_CHECK(has(f), m_file, ": field ", f, " is missing");
        return m_c.at(f);
    }
    long integer(const char* f, long min) const {
        const nlohmann::json& v = at(f);
        ZT_INPUT_CHECK(v.is_number_integer() && v.get<long long>() >= min && v.get<long long>() <= INT32_MAX, m_file,
                       ": ", f, " = ", v.dump(), ": expected an integer >= ", min);
        return static_cast<long>(v.get<long long>());
    }
    long integer_or(const char* f, long min, long fallback) const { return has(f) ? integer(f, min) : fallback; }
    double number(const char* f) const {
        const nlohmann::json& v = at(f);
        ZT_INPUT_CHECK(v.is_number(), m_file, ": ", f, " = ", v.dump(), ": expected a number");
        return v.get<double>();
    }
    double number_or(const char* f, double fallback) const { return has(f) ? number(f) : fallback; }
    bool boolean_or(const char* f, bool fallback) const {
        if (!has(f)) return fallback;
        ZT_INPUT_CHECK(m_c.at(f).is_boolean(), m_file, ": ", f, " = ", m_c.at(f).dump(), ": expected true or false");
        return m_c.at(f).get<bool>();
    }
    std::string text_or(const char* f, const std::string& fallback) const {
        if (!has(f)) return fallback;
        ZT_INPUT_CHECK(m_c.at(f).is_string(), m_file, ": ", f, " = ", m_c.at(f).dump(), ": expected a string");
        return m_c.at(f).get<std::string>();
    }
    /// A field ztrain has no equivalent for must hold the value ztrain's model implies.
    void refuse_unless(bool ok, const char* f, const std::string& why) const {
        ZT_INPUT_CHECK(ok, m_file, ": ", f, " = ", m_c.contains(f) ? m_c.at(f).dump() : "(missing)", ": ", why);
    }

  private:
    const nlohmann::json& m_c;
    const std::string& m_file;
};

}  // namespace zt
