// sync_train_code's archive checks on in-memory zips: unsafe names, links, encryption, limits, and
// unpacking (real `unzip`) into a fresh directory only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/error.h"
#include "common/fs.h"
#include "swarm/code_archive.h"
#include "swarm/test_zip.h"

namespace ajet::swarm {
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
  auto entries = inspect_zip(make_zip({{"CMakeLists.txt", kCmake}, {"src/", ""}, {"src/a.cc", "int x;\n"}}));
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
  EXPECT_EQ(rejection({}), "");  // an empty archive is a valid zip (unpacking then wants CMakeLists.txt)
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
  EXPECT_THAT(rejection({{"a", std::string(10, 'x')}, {"b", std::string(10, 'x')}}, small), HasSubstr("15 bytes"));
  small = ArchiveLimits{};
  small.max_entries = 1;
  EXPECT_THAT(rejection({{"a", "x"}, {"b", "y"}}, small), HasSubstr("limit is 1"));
  // A truncated archive: the central directory is gone.
  std::string zip = make_zip({{"a", "x"}});
  EXPECT_THAT([&] {
    try {
      inspect_zip(zip.substr(0, zip.size() - 30));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), HasSubstr("not a zip"));
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
  UnpackedTree t = unpack_source_zip(make_zip({{"CMakeLists.txt", kCmake}, {"src/a.cc", "int a;\n"}}), dir_ / "one");
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

}  // namespace
}  // namespace ajet::swarm
