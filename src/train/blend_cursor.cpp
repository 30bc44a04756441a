// A weighted data.train's cursor in checkpoints (see include/ztrain/train/blend_cursor.hpp).
#include "ztrain/train/blend_cursor.hpp"

#include <cmath>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/blend.hpp"

namespace zt {
namespace {

/// A checkpoint's corpora: pattern, weight and the windows drawn by its samples_seen.
struct SavedCorpus {
    std::string pattern;
    double weight = 1.0;
    uint64_t drawn_at_origin = 0;
    uint64_t drawn = 0;
};

struct SavedBlend {
    uint64_t origin = 0;
    std::vector<SavedCorpus> corpora;
};

/// The checkpoint's blend: its record, or (none) the one corpus of its data.train, which
/// had drawn samples_seen windows; no corpus when that deck cannot be read.
SavedBlend saved_blend(const CheckpointRecord& resumed) {
    SavedBlend out;
    const nlohmann::json& rec = resumed.blend;
    if (rec.is_object()) {
        out.origin = rec.value("origin", uint64_t{0});
        for (const nlohmann::json& c : rec.value("corpora", nlohmann::json::array())) {
            out.corpora.push_back({c.value("corpus", std::string()), c.value("weight", 1.0),
                                   c.value("drawn_at_origin", uint64_t{0}), c.value("drawn", uint64_t{0})});
        }
        return out;
    }
    try {
        const std::string train = parse_deck_text(resumed.config_ini, "the checkpoint's config").data.train;
        out.corpora.push_back({train, 1.0, 0, resumed.progress.samples_seen});
    } catch (const std::exception&) {
        // An unreadable deck: no corpus to continue, every one starts afresh.
    }
    return out;
}

bool same_blend(const SavedBlend& saved, const TokenCorpora& corpora) {
    if (saved.corpora.size() != corpora.size()) return false;
    for (size_t c = 0; c < corpora.size(); ++c) {
        const SavedCorpus& s = saved.corpora[c];
        if (s.pattern != corpora.spec(c).pattern || std::fabs(s.weight - corpora.spec(c).weight) > 1e-12) return false;
    }
    return true;
}

std::string describe(const SavedBlend& saved) {
    std::string out;
    for (const SavedCorpus& c : saved.corpora) out += str(out.empty() ? "" : ", ", c.pattern, ":", c.weight);
    return out.empty() ? "unknown" : out;
}

std::string describe(const TokenCorpora& corpora) {
    std::string out;
    for (size_t c = 0; c < corpora.size(); ++c) {
        out += str(c ? ", " : "", corpora.spec(c).pattern, ":", corpora.spec(c).weight);
    }
    return out;
}

}  // namespace

nlohmann::json blend_record(const TokenCorpora& corpora, const BlendSampler& sampler, uint64_t samples_seen) {
    const BlendCursor& cursor = sampler.cursor();
    if (!corpora.weighted() && cursor.origin == 0) return nlohmann::json();
    const std::vector<uint64_t> drawn = sampler.drawn(samples_seen);
    nlohmann::json rec;
    rec["origin"] = cursor.origin;
    rec["corpora"] = nlohmann::json::array();
    for (size_t c = 0; c < corpora.size(); ++c) {
        rec["corpora"].push_back({{"corpus", corpora.spec(c).pattern},
                                  {"weight", corpora.spec(c).weight},
                                  {"drawn_at_origin", cursor.drawn[c]},
                                  {"drawn", drawn[c]}});
    }
    return rec;
}

std::string resume_blend(const CheckpointRecord& resumed, const TokenCorpora& corpora, BlendSampler& sampler) {
    // One corpus without weights resumed from a checkpoint without a record: the run it
    // continues had the same single order (a changed file is the fingerprint's business).
    if (resumed.blend.is_null() && !corpora.weighted()) return "";
    const SavedBlend saved = saved_blend(resumed);
    BlendCursor cursor;
    if (same_blend(saved, corpora)) {
        cursor.origin = saved.origin;
        for (const SavedCorpus& c : saved.corpora) cursor.drawn.push_back(c.drawn_at_origin);
        sampler.set_cursor(cursor);
        return "";
    }
    const uint64_t at = resumed.progress.samples_seen;
    cursor.origin = at;
    std::string fresh;
    for (size_t c = 0; c < corpora.size(); ++c) {
        uint64_t drawn = 0;
        bool found = false;
        for (const SavedCorpus& s : saved.corpora) {
            if (s.pattern == corpora.spec(c).pattern) {
                drawn = s.drawn;
                found = true;
            }
        }
        if (!found) fresh += str(fresh.empty() ? "" : ", ", corpora.spec(c).pattern);
        cursor.drawn.push_back(drawn);
    }
    sampler.set_cursor(cursor);
    return str("data.train: the blend differs from the checkpoint's (", describe(saved), " -> ", describe(corpora),
               "): each corpus continues from the windows it had drawn, in the new proportions from sample ", at,
               fresh.empty() ? std::string() : str("; new corpora start at their first window: ", fresh));
}

std::vector<std::pair<std::string, uint64_t>> tokens_by_corpus(const TokenCorpora& corpora,
                                                               const BlendSampler& sampler, uint64_t samples_seen) {
    std::vector<std::pair<std::string, uint64_t>> out;
    if (!corpora.weighted()) return out;
    const std::vector<uint64_t> drawn = sampler.drawn(samples_seen);
    const uint64_t T = static_cast<uint64_t>(corpora.dataset(0).seq_len());
    for (size_t c = 0; c < corpora.size(); ++c) out.emplace_back(corpora.spec(c).pattern, drawn[c] * T);
    return out;
}

}  // namespace zt
