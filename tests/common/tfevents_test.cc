// The TensorBoard event encoder against independent references: CRC-32C test vectors of RFC 3720
// (B.4), protobuf varints as the protobuf documentation spells them, and events assembled byte by
// byte from event.proto's field numbers. tests/tools/tfevents_reader_test.py reads a real front's
// file with its own decoder.
#include "common/tfevents.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "common/fs.h"

namespace ajet::tfevents {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(char(v));
  return out;
}

std::string le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
  return out;
}

std::string le32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
  return out;
}

std::string double_bits(double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, 8);
  return le64(bits);
}

TEST(Crc32c, MatchesTheCheckValueAndRfc3720Vectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(char(i));
    descending.push_back(char(31 - i));
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32c, MaskRotatesRightBy15AndAddsTheConstant) {
  // mask(0xE3069283): rotr15 = 0x2507C60D, + 0xA282EAD8 = 0xC78AB0E5 (mod 2^32).
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c(""), 0xA282EAD8u);
}

TEST(Varint, EncodesAsProtobufDoes) {
  auto varint = [](uint64_t v) {
    std::string out;
    put_varint(out, v);
    return out;
  };
  EXPECT_EQ(varint(0), bytes({0x00}));
  EXPECT_EQ(varint(1), bytes({0x01}));
  EXPECT_EQ(varint(127), bytes({0x7f}));
  EXPECT_EQ(varint(128), bytes({0x80, 0x01}));
  EXPECT_EQ(varint(300), bytes({0xac, 0x02}));
  EXPECT_EQ(varint(16384), bytes({0x80, 0x80, 0x01}));
  // int64 -1 is ten bytes: nine 0xff and 0x01.
  EXPECT_EQ(varint(uint64_t(int64_t(-1))),
            bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(Record, FramesLengthCrcDataCrc) {
  const std::string record = frame_record("abc");
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(record.substr(0, 8), bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(record.substr(8, 4), le32(masked_crc32c(le64(3))));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(record.substr(15, 4), le32(masked_crc32c("abc")));
  // The masked CRC of the 8 length bytes of 3, computed by hand from the bit-wise definition.
  EXPECT_EQ(record.substr(8, 4), le32(0x0E4999B0u));
  EXPECT_EQ(record.substr(15, 4), le32(0x21F1576Eu));
  EXPECT_EQ(frame_record("").size(), 16u);
}

TEST(Event, FileVersionEventIsWallTimeAndVersionString) {
  const std::string expected =
      bytes({0x09}) + double_bits(1234.5) + bytes({0x1a, 13}) + "brain.Event:2";
  EXPECT_EQ(file_version_event(1234.5), expected);
}

TEST(Event, ScalarsEventHoldsEveryValueInOneSummary) {
  // Event{wall_time=1.5 (field 1, fixed64), step=3 (field 2, varint), summary (field 5)}
  // Summary{value (field 1)}, Value{tag (field 1), simple_value (field 2, fixed32 float)}.
  const std::string value_a =
      bytes({0x0a, 1}) + "a" + bytes({0x15, 0x00, 0x00, 0x00, 0x3f});  // 0.5f
  const std::string value_bc =
      bytes({0x0a, 2}) + "bc" + bytes({0x15, 0x00, 0x00, 0x80, 0xbf});  // -1.0f
  const std::string summary =
      bytes({0x0a, int(value_a.size())}) + value_a + bytes({0x0a, int(value_bc.size())}) + value_bc;
  const std::string expected = bytes({0x09}) + double_bits(1.5) + bytes({0x10, 0x03}) +
                               bytes({0x2a, int(summary.size())}) + summary;
  EXPECT_EQ(scalars_event(1.5, 3, {{"a", 0.5}, {"bc", -1.0}}), expected);
}

TEST(Event, LargeStepsAndLongTagsUseMultiByteVarints) {
  const std::string tag(200, 't');
  const std::string event = scalars_event(0.0, 300, {{tag, 1.0}});
  // step: 0x10 then varint 300 (0xac 0x02) right after the 9 bytes of wall_time
  EXPECT_EQ(event.substr(9, 3), bytes({0x10, 0xac, 0x02}));
  // Value: tag key 1 + length varint(200) 2 + 200 + float key 1 + 4 = 208 bytes (varint 0xd0 0x01);
  // Summary: its key 1 + that length 2 + 208 = 211 bytes (varint 0xd3 0x01).
  EXPECT_EQ(event.substr(12, 3), bytes({0x2a, 0xd3, 0x01}));
  EXPECT_EQ(event.substr(15, 3), bytes({0x0a, 0xd0, 0x01}));
  EXPECT_EQ(event.size(), 12u + 3u + 211u);
}

TEST(EventFile, NameAndRecordsOnDisk) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ajet_tfevents_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::path file;
  {
    EventFileWriter writer(dir / "tensorboard", 1700000000.25);
    file = writer.path();
    EXPECT_EQ(file.parent_path(), dir / "tensorboard");
    EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.1700000000.", 0), 0u) << file;
    writer.write_scalars(7, {{"train/loss", 0.25}}, 1700000001.0);
    // Flushed at once: the records are on disk while the writer is open.
    const std::string on_disk = read_file(file);
    EXPECT_EQ(on_disk, frame_record(file_version_event(1700000000.25)) +
                           frame_record(scalars_event(1700000001.0, 7, {{"train/loss", 0.25}})));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ajet::tfevents
