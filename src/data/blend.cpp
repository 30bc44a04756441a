// Blends of pretraining corpora (see include/ztrain/data/blend.hpp): the weighted list's
// parser, the corpora, the interleaving schedule and the sampler over it.
// Deliberately does not: mix corpora inside a window (a window is one corpus's), or sample
// corpora at random (the interleaving gives each global batch the weights' proportions
// exactly, to within the number of corpora, where random draws would only approach them).
#include "ztrain/data/blend.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "ztrain/core/comma_list.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "shard_file.hpp"

namespace zt {
namespace {

std::string trimmed(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    const size_t e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

/// The weight text as a number; false when it is not one (trailing characters included).
bool parse_weight(const std::string& text, double* w) {
    if (text.empty()) return false;
    char* end = nullptr;
    errno = 0;
    *w = std::strtod(text.c_str(), &end);
    return end != nullptr && *end == '\0' && errno == 0 && std::isfinite(*w);
}

/// Whether `text` names existing files as a whole (a plain name with a ':' in it).
bool matches_files(const std::string& text, const std::string& key) {
    try {
        return !expand_shard_glob(text, key).empty();
    } catch (const InputError&) {
        return false;
    }
}

/// One GLOB:W entry; InputError naming the key and the corpus when its weight is bad.
CorpusSpec parse_entry(const std::string& entry, const std::string& key) {
    const size_t colon = entry.rfind(':');
    ZT_INPUT_CHECK(colon != std::string::npos, key, ": corpus '", entry,
                   "' has no weight (expected GLOB:W, GLOB:W, ... with a weight W > 0 for every corpus)");
    CorpusSpec c;
    c.pattern = trimmed(entry.substr(0, colon));
    const std::string w = trimmed(entry.substr(colon + 1));
    ZT_INPUT_CHECK(!c.pattern.empty(), key, ": weight '", w, "' has no corpus before it (expected GLOB:W)");
    ZT_INPUT_CHECK(parse_weight(w, &c.weight), key, ": weight '", w, "' of corpus '", c.pattern,
                   "' is not a number (expected GLOB:W with a weight W > 0)");
    ZT_INPUT_CHECK(c.weight >= 0, key, ": weight ", w, " of corpus '", c.pattern,
                   "' is negative (expected a weight > 0)");
    ZT_INPUT_CHECK(c.weight > 0, key, ": weight ", w, " of corpus '", c.pattern,
                   "' is 0: it would never be drawn (leave the corpus out, or give it a weight > 0)");
    return c;
}

/// Scales the weights to sum to 1; the note lists what they became when they did not.
void normalise(CorpusList& list, const std::string& key) {
    double sum = 0;
    for (const CorpusSpec& c : list.corpora) sum += c.weight;
    if (std::fabs(sum - 1.0) <= 1e-9) return;
    std::string now;
    for (CorpusSpec& c : list.corpora) {
        c.weight /= sum;
        now += str(now.empty() ? "" : ", ", c.pattern, ":", c.weight);
    }
    list.note = str(key, ": the weights sum to ", sum, ", not 1: normalised to ", now);
}

}  // namespace

CorpusList parse_corpus_list(const std::string& text, const std::string& key) {
    CorpusList list;
    const std::vector<std::string> entries = split_comma_list(text);
    if (entries.size() == 1 && entries[0].find(':') == std::string::npos) {
        list.corpora.push_back({text, 1.0});
        return list;
    }
    if (entries.size() == 1) {
        // "dir:x/train.bin" is a file name unless its tail is a number.
        double w = 0;
        const size_t colon = entries[0].rfind(':');
        if (!parse_weight(trimmed(entries[0].substr(colon + 1)), &w) && matches_files(text, key)) {
            list.corpora.push_back({text, 1.0});
            return list;
        }
    }
    list.weighted = true;
    std::set<std::string> seen;
    for (const std::string& entry : entries) {
        ZT_INPUT_CHECK(!entry.empty(), key, " = '", text, "': an empty corpus in the list (expected GLOB:W, GLOB:W, ...)");
        CorpusSpec c = parse_entry(entry, key);
        ZT_INPUT_CHECK(seen.insert(c.pattern).second, key, ": corpus '", c.pattern,
                       "' is listed twice (give each corpus once, with its total weight)");
        list.corpora.push_back(c);
    }
    normalise(list, key);
    return list;
}

std::string first_corpus_pattern(const std::string& text) {
    const std::vector<std::string> entries = split_comma_list(text);
    if (entries.size() == 1 && entries[0].find(':') == std::string::npos) return text;
    const size_t colon = entries[0].rfind(':');
    double w = 0;
    if (colon == std::string::npos || !parse_weight(trimmed(entries[0].substr(colon + 1)), &w)) return entries[0];
    return trimmed(entries[0].substr(0, colon));
}

double planned_corpus_bytes(const CorpusList& list, const std::string& key, int seq_len) {
    const uint64_t T = static_cast<uint64_t>(std::max(1, seq_len));
    double bytes = 0;
    for (const CorpusSpec& c : list.corpora) {
        for (const std::string& file : expand_shard_glob(c.pattern, key)) {
            int32_t count = 0;
            try {
                count = detail::open_shard(file).header[2];
            } catch (const InputError& e) {
                throw InputError(str(key, ": ", e.what()));
            }
            const uint64_t n = static_cast<uint64_t>(std::max(0, count));
            const uint64_t windows = n > T ? (n - 1) / T : 0;
            bytes += 4.0 * static_cast<double>(n) + 12.0 * static_cast<double>(windows);
        }
    }
    return bytes;
}

TokenCorpora::TokenCorpora(const CorpusList& list, const std::string& key, int vocab_size, int seq_len)
    : m_list(list) {
    for (const CorpusSpec& c : list.corpora) {
        m_data.push_back(std::make_unique<TokenDataset>(c.pattern, key, vocab_size, seq_len));
    }
}

std::vector<std::string> TokenCorpora::files() const {
    std::vector<std::string> out;
    for (const auto& d : m_data) out.insert(out.end(), d->files().begin(), d->files().end());
    return out;
}

size_t TokenCorpora::num_windows() const {
    size_t n = 0;
    for (const auto& d : m_data) n += d->num_windows();
    return n;
}

uint64_t corpus_seed(uint64_t seed, size_t corpus) {
    return corpus == 0 ? seed : seed ^ mix64(0xb1e9dc0ull + static_cast<uint64_t>(corpus));
}

BlendSchedule::BlendSchedule(const std::vector<double>& weights, uint64_t seed) {
    ZT_REQUIRE(!weights.empty(), "a blend of no corpora");
    // Integer quotas (2^32 for the whole) keep the schedule exact integer arithmetic: the
    // same on every machine whatever its floating-point contraction.
    constexpr double kWhole = 4294967296.0;
    for (double w : weights) m_quota.push_back(std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(w * kWhole))));
    m_remaining.assign(m_quota.size(), 0);
    uint64_t rest = 0;
    for (size_t c = m_quota.size(); c-- > 0;) {
        rest += m_quota[c];
        m_remaining[c] = rest;
    }
    for (size_t c = 0; c < m_quota.size(); ++c) {
        m_phase.push_back(random_bits(seed, static_cast<uint64_t>(RandomStream::kData), 0xb1e4d000ull + c) %
                          m_remaining[c]);
    }
}

BlendSchedule::Draw BlendSchedule::draw(uint64_t i) const {
    using U128 = unsigned __int128;
    for (size_t c = 0; c + 1 < m_quota.size(); ++c) {
        // Corpus c's draws among the first i samples left to it, and among the first i + 1.
        const uint64_t before = static_cast<uint64_t>((U128(i) * m_quota[c] + m_phase[c]) / m_remaining[c]);
        const uint64_t after = static_cast<uint64_t>((U128(i + 1) * m_quota[c] + m_phase[c]) / m_remaining[c]);
        if (after > before) return {c, before};
        i -= before;  // this sample's place among those the later corpora share
    }
    return {m_quota.size() - 1, i};
}

std::vector<uint64_t> BlendSchedule::counts(uint64_t n) const {
    using U128 = unsigned __int128;
    std::vector<uint64_t> out(m_quota.size(), 0);
    for (size_t c = 0; c + 1 < m_quota.size(); ++c) {
        out[c] = static_cast<uint64_t>((U128(n) * m_quota[c] + m_phase[c]) / m_remaining[c]);
        n -= out[c];
    }
    out.back() = n;
    return out;
}

namespace {

std::vector<double> weights_of(const TokenCorpora& corpora) {
    std::vector<double> w;
    for (size_t c = 0; c < corpora.size(); ++c) w.push_back(corpora.spec(c).weight);
    return w;
}

}  // namespace

BlendSampler::BlendSampler(const TokenCorpora& corpora, uint64_t seed, bool shuffle)
    : m_corpora(corpora), m_schedule(weights_of(corpora), seed) {
    for (size_t c = 0; c < corpora.size(); ++c) {
        m_samplers.push_back(std::make_unique<BatchSampler>(corpora.dataset(c), corpus_seed(seed, c), shuffle));
    }
    m_cursor.drawn.assign(corpora.size(), 0);
}

void BlendSampler::set_cursor(BlendCursor cursor) {
    ZT_REQUIRE(cursor.drawn.size() == m_samplers.size(), "a blend cursor of ", cursor.drawn.size(),
               " corpora for ", m_samplers.size());
    m_cursor = std::move(cursor);
}

void BlendSampler::fill(uint64_t first, int count, int32_t* inputs, int32_t* targets) const {
    ZT_REQUIRE(first >= m_cursor.origin, "sample ", first, " before the blend's origin ", m_cursor.origin);
    const size_t T = static_cast<size_t>(m_corpora.dataset(0).seq_len());
    for (int j = 0; j < count; ++j) {
        const BlendSchedule::Draw d = m_schedule.draw(first - m_cursor.origin + static_cast<uint64_t>(j));
        const size_t w = m_samplers[d.corpus]->window_of(m_cursor.drawn[d.corpus] + d.index);
        m_corpora.dataset(d.corpus).window(w, inputs + static_cast<size_t>(j) * T, targets + static_cast<size_t>(j) * T);
    }
}

std::vector<uint64_t> BlendSampler::drawn(uint64_t g) const {
    ZT_REQUIRE(g >= m_cursor.origin, "sample ", g, " before the blend's origin ", m_cursor.origin);
    std::vector<uint64_t> out = m_schedule.counts(g - m_cursor.origin);
    for (size_t c = 0; c < out.size(); ++c) out[c] += m_cursor.drawn[c];
    return out;
}

}  // namespace zt
