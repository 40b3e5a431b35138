// TensorBoard event files, encoded by hand: no TensorFlow, no protobuf library. A file is a
// sequence of TFRecords, each one serialized `Event` proto; TensorBoard (and tf.summary readers)
// read them. Only scalars are written. This module never reads event files (tests bring their own
// reader).
//
// TFRecord framing: uint64 LE length, uint32 LE masked CRC32C of those 8 bytes, the data, uint32 LE
// masked CRC32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
// Event (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2 (int64),
// file_version = 3 (string, "brain.Event:2" in the first event of a file), summary = 5;
// Summary { repeated Value value = 1 }, Value { string tag = 1; float simple_value = 2 }.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ajet::tfevents {

using Scalars = std::vector<std::pair<std::string, double>>;  // tag -> value (written as float)

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// Protobuf wire pieces (base-128 varint; a negative int64 takes 10 bytes, as protobuf writes it).
void put_varint(std::string& out, uint64_t value);

// One TFRecord around `data`.
std::string frame_record(std::string_view data);

// The serialized Event that opens a file (wall_time and file_version "brain.Event:2").
std::string file_version_event(double wall_time);
// The serialized Event holding `scalars` at `step` (one Summary.Value per scalar, in order).
std::string scalars_event(double wall_time, int64_t step, const Scalars& scalars);

// "events.out.tfevents.<unix seconds>.<hostname>", TensorBoard's naming.
std::string event_file_name(double wall_time);

// Appends events to one file in `dir`. Every write is flushed, so a reader (TensorBoard while the
// run goes) sees whole records. Not thread-safe: one owner writes. Throws Error(kIo) naming the
// file.
class EventFileWriter {
 public:
  // Creates `dir` and the file (appends when a file of that name exists: a second version event in
  // a file is harmless), and writes the version event.
  EventFileWriter(const std::filesystem::path& dir, double wall_time);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void write_scalars(int64_t step, const Scalars& scalars, double wall_time);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace ajet::tfevents
