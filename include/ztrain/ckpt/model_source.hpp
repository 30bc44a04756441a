// A trained model to run on one process (zt-generate): a checkpoint directory (its latest
// step, or a step_N directory) of any world size and ZeRO stage, or a Hugging Face model
// directory (config.json + model.safetensors or its shards). The model's configuration comes
// from the checkpoint's record or config.json; the weights are streamed a piece at a time
// into the caller's buffers (the checkpoint consolidated in memory as zt-consolidate reads
// it: one tensor or one 4 MiB piece of host memory at a time besides the destination).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "ztrain/config/config.hpp"

namespace zt {

struct ModelLayout;

struct ModelSource {
    std::string path;      ///< as given
    bool hf_dir = false;   ///< a Hugging Face model directory, else a checkpoint
    std::string step_dir;  ///< the checkpoint's step directory
    ModelConfig model;     ///< every model key, from the record or config.json
    std::string deck;      ///< the checkpoint's resolved deck (config_ini); empty for hf_dir
    /// A LoRA checkpoint's frozen base read from here rather than from the path it records
    /// (--base: the base has moved); empty: the recorded path.
    std::string lora_base;
};

/// Opens and checks `path` (exists, a checkpoint or a Hugging Face directory, every model
/// dimension recorded). `lora_base`: where a LoRA checkpoint's base is now (refused for a
/// Hugging Face directory or a checkpoint that holds every weight). Throws InputError naming
/// the path and what is wrong.
ModelSource open_model_source(const std::string& path, const std::string& lora_base = "");

/// Receives elements [begin, begin + n) of unit `unit` (host memory, valid for the call).
using WeightSink = std::function<void(int unit, size_t begin, const float* data, size_t n)>;

/// Streams every weight of `source` into `put`: every element of every unit of a
/// checkpoint, or every tensor of a Hugging Face directory (its live rows; padded rows and
/// alignment gaps are not delivered, so the destination must start zeroed).
void read_model_weights(const ModelSource& source, const ModelLayout& layout, const WeightSink& put);

}  // namespace zt
