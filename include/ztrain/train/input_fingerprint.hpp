// The identity of a run's inputs, saved in each checkpoint (meta_json "inputs") so that a
// resume can tell when data.train, data.val or the tokenizer changed under it.
//
// Cheap for corpora of any size: per file its name, size, a hash of its first KiB (a token
// shard's header) and hashes of its first and last MiB; never the whole file. A change in the
// middle of a large file alone is therefore not seen: the check is for files replaced,
// added, removed, regenerated or truncated, not a content audit.
//
// Not here: what a change means for the run (data.on_change, trainer.cpp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

/// {"train": [FILE...], "val": [FILE...], "tokenizer": FILE or null}, FILE = {"file" (base
/// name), "bytes", "header", "head", "tail"} (hash64 hex of the first KiB, first and last
/// MiB). Throws InputError naming a file that cannot be read. `train_corpora` /
/// `val_corpora`: each file's corpus pattern for a weighted list (FILE then has "corpus", and
/// changes are matched by corpus and name), empty otherwise. `base_files`: a LoRA run's frozen
/// base (lora_base_files), as "base": [FILE...] when there are any.
nlohmann::json input_fingerprint(const std::vector<std::string>& train_files,
                                 const std::vector<std::string>& val_files, const std::string& tokenizer_file,
                                 const std::vector<std::string>& train_corpora = {},
                                 const std::vector<std::string>& val_corpora = {},
                                 const std::vector<std::string>& base_files = {});

/// The files that are a LoRA run's base, model.init_from: the file itself, or a Hugging Face
/// directory's config.json, weight files (*.safetensors, *.bin) and their index, by name.
std::vector<std::string> lora_base_files(const std::string& init_from);

/// What differs between the base a checkpoint's fingerprint records and this run's, one
/// phrase each; empty when nothing does or either records none.
std::vector<std::string> base_changes(const nlohmann::json& saved, const nlohmann::json& now);

/// For a tool reading a LoRA checkpoint (zt-consolidate, zt-generate, zt-eval): its base as
/// it is now (at `base`, or the path the checkpoint records when empty) against the
/// fingerprint the checkpoint records, as ztrain checks at a resume. Throws InputError naming
/// what changed; nothing for a checkpoint without a base, or one that records no fingerprint.
void check_lora_base_unchanged(const std::string& step_dir, const std::string& base);

/// What differs between a checkpoint's fingerprint `saved` and this run's `now`, one phrase
/// each ("data.train: train_001.bin: 2048 -> 4096 bytes"); empty when nothing does, or when
/// the checkpoint records no fingerprint (written before ztrain saved one).
std::vector<std::string> input_changes(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace zt
