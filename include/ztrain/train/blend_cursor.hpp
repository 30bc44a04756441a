// A weighted data.train's data cursor in a checkpoint, and what a resume makes of it.
//
// meta_json "blend" = {"origin": G0, "corpora": [{"corpus": PATTERN, "weight": W,
// "drawn_at_origin": N0, "drawn": N}, ...]}: the blend's schedule restarted at sample G0 with
// N0 windows of each corpus already taken (data/blend.hpp's BlendCursor), and N the windows
// each had taken by the checkpoint's samples_seen. A run starts at origin 0, so a checkpoint
// of one corpus without weights needs no record (samples_seen is its cursor) and has none.
//
// A resume with the same corpora and weights takes the record's origin: every later step
// draws the windows of the uninterrupted run, at any world size (the schedule is a pure
// function of the global sample index). Changed weights or corpora: each corpus continues
// from the windows it had drawn (a new one from 0), in the new proportions from the
// checkpoint's sample on, with a note. Changed files are the input fingerprint's
// (data.on_change), not this.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

class BlendSampler;
class TokenCorpora;
struct CheckpointRecord;

/// The record of `sampler` over `corpora` at the data cursor `samples_seen`; null for one
/// corpus without weights at origin 0.
nlohmann::json blend_record(const TokenCorpora& corpora, const BlendSampler& sampler, uint64_t samples_seen);

/// Sets `sampler`'s cursor for a resume from `resumed` (its "blend" record, or for a
/// checkpoint without one the single corpus of its config's data.train). Returns the note on
/// what changed ("" when nothing did).
std::string resume_blend(const CheckpointRecord& resumed, const TokenCorpora& corpora, BlendSampler& sampler);

/// The tokens taken from each corpus of a weighted data.train by sample `samples_seen`
/// (windows x seq_len), keyed by pattern; empty for one corpus without weights.
std::vector<std::pair<std::string, uint64_t>> tokens_by_corpus(const TokenCorpora& corpora,
                                                               const BlendSampler& sampler, uint64_t samples_seen);

}  // namespace zt
