// TensorBoard event files: what metrics.jsonl records, as scalars TensorBoard plots.
//
// The format is TensorFlow's record framing: per record, the payload's length (uint64, little
// endian), the masked CRC-32C of those 8 bytes, the payload, the masked CRC-32C of the
// payload. Each payload is an `Event` protobuf (tensorflow/core/util/event.proto), written by
// hand: only wall_time (1, double), step (2, int64), file_version (3, string), summary (5:
// repeated value {tag (1), simple_value (2, float)}) and session_log (6: status (1) START)
// are used, which keeps protobuf out of the build.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

/// One scalar of a record: its TensorBoard tag and value.
struct TensorBoardScalar {
    std::string tag;
    double value = 0.0;
};

/// The scalars of a metrics.jsonl record, tagged by group: a step record's fields under
/// train/ (train/loss, train/lr, train/comm_bytes/intra/reduce_scatter, ...), a validation
/// record's val_loss as val/loss, an event record's under its event name (memory/params,
/// checkpoint/write_ms, eval/<task>/acc_norm, ...). Nested objects flatten with '/';
/// booleans are 0 or 1; strings and nulls (a non-finite grad_norm) are left out, as is the
/// step itself.
std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::ordered_json& record);

/// An Event protobuf with a summary of `scalars` (the payload of one record).
std::string tensorboard_scalar_event(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& scalars);

/// The framing of one record around `payload`.
std::string tensorboard_record(const std::string& payload);

/// One event file in a directory, written by rank 0. A new file per run (a resumed run
/// adds one; nothing is overwritten); each record is flushed as it is written, so a crash
/// leaves at most a cut last record, which TensorBoard's reader skips.
class TensorBoardWriter {
  public:
    /// Creates `dir` if needed and dir/events.out.tfevents.<unix time>.<host> in it (with
    /// .<pid> appended when a file of that name exists), and writes the file_version record.
    /// A run that resumes at `resumed_step` > 0 also writes a session start at the next step,
    /// which makes TensorBoard drop the steps after it that a killed run had logged.
    TensorBoardWriter(const std::string& dir, long resumed_step);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    /// Writes the record's scalars (tensorboard_scalars) at its "step", or at the last step
    /// written (records without one: memory, ...).
    void write(const nlohmann::ordered_json& record);
    const std::string& path() const { return m_path; }

  private:
    void append(const std::string& payload);
    std::FILE* m_file = nullptr;
    std::string m_path;
    long m_step = 0;
};

}  // namespace zt
