// Checkpoint export (one consolidated weights file) and weight import (model.init_from).
//
// Export (zt-consolidate): the sharded checkpoint of any world size and ZeRO stage becomes
// one file, streamed one tensor at a time, so peak memory is the largest tensor plus one
// transposed/converted copy, never the whole model. The format follows the extension:
//
//   .h5 / .hdf5   one dataset per tensor under its ztrain name ("h.3.attn.c_attn.weight"),
//                 ztrain orientation (matrices (out, in)), the token embedding cut to
//                 model.vocab_size rows. fp32 is stored as native float; bf16 and fp16 as
//                 uint16 bit patterns with a string attribute dtype = "bf16" | "fp16" (HDF5
//                 1.10 has no native 16-bit float). Every dataset carries the dtype
//                 attribute. Root attributes: format = "ztrain-weights", step, applied_steps,
//                 tokens_seen, n_layer, n_head, n_embd, seq_len, vocab_size, vocab_pad_to,
//                 padded_vocab, dtype, source, config_ini. With the optimizer:
//                 optimizer/<name>/adam_m and adam_v (fp32, same shapes).
//   .safetensors  the model family's Hugging Face names and layout, dtype F32 | BF16 | F16,
//                 __metadata__ {format: "pt", source, step, model dims, config_ini}.
//                 GPT-2: "transformer.h.3.attn.c_attn.weight", Conv1D matrices [in, out]
//                 (ztrain's transposed); lm_head.weight is not written (tied to wte).
//                 Llama: ztrain's own names and orientation ("model.layers.3.self_attn.
//                 q_proj.weight", (out, in)); lm_head.weight only when untied.
//                 Vocabulary rows beyond model.vocab_size are cut in both.
//   DIRECTORY/    a Hugging Face model directory: model.safetensors as above plus config.json
//                 (GPT2Config or LlamaConfig, hf_family.cpp), which from_pretrained reads;
//                 or, split at a maximum size, model-0000k-of-0000n.safetensors files with
//                 model.safetensors.index.json, as save_pretrained writes them.
//
// Import (model.init_from): reads a .h5, a .safetensors file (with or without GPT-2's
// "transformer." prefix; F32, BF16 or F16) or a Hugging Face model directory (config.json,
// checked field by field against the model; model.safetensors, or the shards named by
// model.safetensors.index.json) into the owned master elements of a ModelState of any world
// size / stage. Everything read is validated before use (header length, JSON, offsets,
// dtypes, names, exact shapes, the index against its shards); a violation is an InputError
// naming the file and, where there is one, the tensor or field.
//
// Implementation: src/ckpt/consolidate.cpp (export, --info), import_weights.cpp (import),
// safetensors.cpp (the file format and the shard index), hf_family.cpp (Hugging Face names,
// Conv1D transposes and config.json both ways per model family: GPT-2 and Llama).
// Not here: AdamW state import (an initialized run starts its optimizer from zero),
// tokenizer files (ckpt knows no tokenizers: zt-consolidate adds the run's through
// HfDirectoryExtras).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {

class Communicator;
class ModelState;
struct ModelLayout;

/// What a caller adds to a Hugging Face directory besides the weights (zt-consolidate: the
/// run's tokenizer): fields set in config.json, and text files (name, contents) written
/// before it (config.json goes last, so a directory with a config holds everything else).
struct HfDirectoryExtras {
    nlohmann::json config_fields = nlohmann::json::object();
    std::vector<std::pair<std::string, std::string>> files;
};

/// Writes the checkpoint at ckpt_path (a step directory, or a checkpoint directory whose
/// `latest` names one) to `output` (.h5/.hdf5 or .safetensors) in `dtype`. With
/// with_optimizer (.h5 only) AdamW m and v are written too (always fp32). The file appears
/// complete or not at all (written to OUTPUT.partial, renamed at the end). Throws
/// InputError naming the file for a missing/damaged checkpoint or an unusable output name,
/// Error for I/O failures.
/// An `output` that is an existing directory, or ends with '/', is a Hugging Face model
/// directory: OUTPUT/model.safetensors plus OUTPUT/config.json for the checkpoint's family
/// (GPT2Config: dims, gelu_new, layer_norm_epsilon 1e-5, tied embeddings; LlamaConfig: dims,
/// GQA heads, rms_norm_eps, rope_theta, rope_scaling, tie_word_embeddings,
/// max_position_embeddings = seq_len), which `AutoModelForCausalLM.from_pretrained(OUTPUT)`
/// reads. The directory itself is created if its parent exists.
/// With max_shard_bytes > 0 (a directory only) the weights are split as save_pretrained(
/// max_shard_size=...) splits them: in the checkpoint's tensor order, a file closed when the
/// next tensor would take it over the limit (a larger tensor alone in its own), written as
/// model-00001-of-0000N.safetensors ... with model.safetensors.index.json ({"metadata":
/// {"total_parameters", "total_size"}, "weight_map": {name: file}}); everything fitting in one
/// file is model.safetensors, as there. Weight files an earlier export left in the directory
/// and this one did not write are removed. `extras` applies to a directory only. Returns the
/// weight files written.
///
/// A checkpoint of a LoRA run (lora.rank > 0: it holds the adapters; the frozen base comes
/// from the weights the run was initialised from, at the path it records or at `lora_base`,
/// or is regenerated from its train.seed) is exported to a directory with `lora`: kAdapter writes PEFT's adapter_model.safetensors
/// ("base_model.model." + the family's Hugging Face name of each NAME.lora_A/B.weight) and
/// adapter_config.json, which peft.PeftModel.from_pretrained(base, OUTPUT) loads; kMerge a
/// plain Hugging Face directory whose adapted weights are W + (alpha / r) B A. kNone refuses
/// such a checkpoint for a directory (exit 2 naming both choices); .h5 and .safetensors files
/// hold every tensor under ztrain's names.
enum class LoraExport { kNone, kAdapter, kMerge };
std::vector<std::string> consolidate(const std::string& ckpt_path, const std::string& output, DType dtype,
                                     bool with_optimizer, uint64_t max_shard_bytes = 0,
                                     const HfDirectoryExtras& extras = {}, LoraExport lora = LoraExport::kNone,
                                     const std::string& lora_base = "");
/// zt-consolidate --max-shard-size: bytes, or a number and KB | MB | GB | TB (powers of 10, any
/// case; huggingface_hub's parse_size_to_int), e.g. "5GB" = 5e9, "0.5MB" = 500000. Throws
/// InputError naming the text.
uint64_t parse_max_shard_size(const std::string& text);

/// The Hugging Face GPT2Config (config.json; the GPT-2 family's Family::hf_config) describing a model of these dimensions stored
/// in `dtype`; vocab_size is the unpadded vocabulary. bos/eos are GPT-2's 50256 for the
/// GPT-2 vocabulary (50257) and null otherwise.
nlohmann::json hf_gpt2_config(long n_layer, long n_head, long n_embd, long n_positions, long vocab_size,
                              DType dtype);

/// Human-readable description of a checkpoint: step, world size, stage, dtype, tokens,
/// model dims, every tensor with its shape, every shard file with its size (checked against
/// the recorded size; hashes are not computed here). Throws InputError for a bad path.
std::string checkpoint_info(const std::string& ckpt_path);

/// The model keys DIR/config.json determines (model.from_hf; hf_family.cpp says which and
/// refuses what ztrain cannot honour). Throws InputError naming the file and the field.
std::vector<HfSetting> read_hf_config(const std::string& dir);

/// Sets the master weights of `state` (whose layout is `layout`: the model's, a tensor split's
/// or a pipeline stage's) from a consolidated .h5, a .safetensors file or a Hugging Face model
/// directory (see above; the directory's config.json must describe `cfg`): each rank writes
/// only its owned elements; padded vocabulary rows and alignment
/// gaps become zero; then the working copy is re-derived (sync_working_from_master, which
/// is collective: every rank must call import_weights). With `comm`, a failure on any rank
/// is agreed so every rank throws the same error instead of leaving others in a collective.
void import_weights(const std::string& path, const ModelLayout& layout, const ModelConfig& cfg, ModelState& state,
                    Communicator* comm = nullptr);

}  // namespace zt
