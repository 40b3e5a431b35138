// sync_train_code's archive checks on in-memory zips: unsafe names, links, encryption, limits, and
// unpacking into a fresh directory only, with every member held to the size its header declares.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/error.h"
#include "common/fs.h"
#include "engine_control/code_archive.h"
#include "engine_control/test_zip.h"

namespace ajet::engine_control {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::make_zip;
using testing::ZipMember;

const std::string kCmake = "cmake_minimum_required(VERSION 3.20)\nproject(x)\n";

std::string rejection(const std::vector<ZipMember>& members, ArchiveLimits limits = {}) {
  try {
    inspect_zip(make_zip(members), limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CodeArchive, AcceptsAPlainTreeAndListsItsMembers) {
  auto entries =
      inspect_zip(make_zip({{"CMakeLists.txt", kCmake}, {"src/", ""}, {"src/a.cc", "int x;\n"}}));
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "CMakeLists.txt");
  EXPECT_EQ(entries[0].size, kCmake.size());
  EXPECT_TRUE(entries[1].is_dir);
}

TEST(CodeArchive, RefusesUnsafeNamesAndMembers) {
  EXPECT_THAT(rejection({{"../x", "a"}}), HasSubstr("'..'"));
  EXPECT_THAT(rejection({{"a/../../x", "a"}}), HasSubstr("'..'"));
  EXPECT_THAT(rejection({{"a/..", "a"}}), HasSubstr("'..'"));
  EXPECT_THAT(rejection({{"/etc/x", "a"}}), HasSubstr("absolute"));
  EXPECT_THAT(rejection({{"C:/x", "a"}}), HasSubstr("drive"));
  EXPECT_THAT(rejection({{"a\\..\\x", "a"}}), HasSubstr("'\\'"));
  EXPECT_THAT(rejection({{"link", "/etc/passwd", 0120777}}), HasSubstr("symbolic link"));
  EXPECT_THAT(rejection({{"fifo", "", 0010644}}), HasSubstr("not a regular file"));
  EXPECT_EQ(rejection({{"..a/b..", "fine: dots inside names"}}), "");
}

TEST(CodeArchive, RefusesWhatIsNotAZipAndOversizeArchives) {
  EXPECT_EQ(rejection({}),
            "");  // an empty archive is a valid zip (unpacking then wants CMakeLists.txt)
  try {
    inspect_zip("PK\x03\x04 this is not really a zip");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a zip"));
  }
  ArchiveLimits small;
  small.max_file_bytes = 10;
  try {
    inspect_zip(make_zip({{"big", std::string(11, 'x')}}), small);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_THAT(e.what(), HasSubstr("10"));
  }
  small = ArchiveLimits{};
  small.max_total_bytes = 15;
  EXPECT_THAT(rejection({{"a", std::string(10, 'x')}, {"b", std::string(10, 'x')}}, small),
              HasSubstr("15 bytes"));
  small = ArchiveLimits{};
  small.max_entries = 1;
  EXPECT_THAT(rejection({{"a", "x"}, {"b", "y"}}, small), HasSubstr("limit is 1"));
  // A truncated archive: the central directory is gone.
  std::string zip = make_zip({{"a", "x"}});
  EXPECT_THAT(
      [&] {
        try {
          inspect_zip(zip.substr(0, zip.size() - 30));
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("not a zip"));
}

class UnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ajet_code_archive_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(UnpackTest, UnpacksIntoAFreshDirectoryAndFindsTheSourceRoot) {
  UnpackedTree t = unpack_source_zip(
      make_zip({{"CMakeLists.txt", kCmake}, {"src/a.cc", "int a;\n"}}), dir_ / "one");
  EXPECT_EQ(t.root, dir_ / "one" / "tree");
  EXPECT_EQ(read_file(t.root / "src/a.cc"), "int a;\n");
  EXPECT_EQ(t.files, 2u);
  // git archive --prefix=agentjet/: the single top directory is the root.
  UnpackedTree p = unpack_source_zip(make_zip({{"agentjet/CMakeLists.txt", kCmake}}), dir_ / "two");
  EXPECT_EQ(p.root, dir_ / "two" / "tree" / "agentjet");
  // Never over an existing directory.
  EXPECT_THROW(unpack_source_zip(make_zip({{"CMakeLists.txt", kCmake}}), dir_ / "one"), Error);
  // No CMakeLists.txt: refused, and nothing is left behind.
  EXPECT_THROW(unpack_source_zip(make_zip({{"README", "x"}}), dir_ / "three"), Error);
  EXPECT_FALSE(fs::exists(dir_ / "three"));
  EXPECT_FALSE(fs::exists(dir_ / "three.zip"));
}

TEST_F(UnpackTest, DeflatedMembersAndExecutableModesUnpack) {
  const std::string source(100000, 'a');
  UnpackedTree t = unpack_source_zip(make_zip({{"CMakeLists.txt", kCmake, 0100644, true},
                                               {"src/big.cc", source, 0100644, true},
                                               {"tools/run.sh", "#!/bin/sh\n", 0100755}}),
                                     dir_ / "one");
  EXPECT_EQ(read_file(t.root / "src/big.cc"), source);
  EXPECT_EQ(t.bytes, kCmake.size() + source.size() + 10);
  EXPECT_NE(fs::status(t.root / "tools/run.sh").permissions() & fs::perms::owner_exec,
            fs::perms::none);
  EXPECT_EQ(fs::status(t.root / "src/big.cc").permissions() & fs::perms::owner_exec,
            fs::perms::none);
}

// A 612 KB upload whose members declared 1,000 bytes and inflated to 60 MiB each wrote ~620 MB
// before the 413: the sizes were checked after `unzip` had written everything. Now each member
// stops at its declared size.
TEST_F(UnpackTest, AMemberThatInflatesPastItsDeclaredSizeStopsThereAndIsNamed) {
  const std::string bomb(60u << 20, '\0');
  std::vector<ZipMember> members = {{"CMakeLists.txt", kCmake}};
  for (int i = 0; i < 10; ++i)
    members.push_back({"bomb" + std::to_string(i), bomb, 0100644, true, 1000});
  const std::string zip = make_zip(members);
  EXPECT_LT(zip.size(), 1u << 20);
  try {
    unpack_source_zip(zip, dir_ / "bomb");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), ::testing::HasSubstr(
                              "'bomb0' unpacks to more than the 1000 bytes its header declares"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "bomb"));
  // Lies the other way, and corrupt data, are named too.
  auto error_of = [&](std::vector<ZipMember> m, const std::string& name) {
    try {
      unpack_source_zip(make_zip(m), dir_ / name);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of({{"CMakeLists.txt", kCmake, 0100644, true, 5000}}, "short"),
              ::testing::HasSubstr("unpacks to " + std::to_string(kCmake.size()) +
                                   " bytes, but its header declares 5000"));
  std::string corrupt = make_zip({{"CMakeLists.txt", kCmake}});
  corrupt[30 + 14] ^= 1;  // one byte of the stored data: the CRC no longer matches
  try {
    unpack_source_zip(corrupt, dir_ / "crc");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("CRC-32"));
  }
  EXPECT_THAT(error_of({{"CMakeLists.txt", kCmake}, {"CMakeLists.txt", kCmake}}, "twice"),
              ::testing::HasSubstr("appears twice"));
  EXPECT_THAT(error_of({{"CMakeLists.txt", kCmake}, {"a", "x"}, {"a/b", "y"}}, "file-dir"),
              ::testing::HasSubstr("'a/b'"));
}

}  // namespace
}  // namespace ajet::engine_control
