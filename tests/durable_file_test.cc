// DurableFile (src/core/durable_file.h): the one durable write behind reports, checkpoint files and token shards.
#include "durable_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "error.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "durable-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static void Write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

  std::string dir_;
};

TEST_F(DurableFileTest, CommitReplacesThePreviousFileAndLeavesNoTemporary) {
  Write(Path("f"), "old");
  DurableFile file(Path("f"), Path("f.tmp"));
  file.Append("he", 2);
  file.Append("llo", 3);
  file.StartWriteback();
  file.WriteAt(0, "H", 1);
  file.Commit();
  EXPECT_EQ(Read(Path("f")), "Hello");
  EXPECT_FALSE(fs::exists(Path("f.tmp")));
}

TEST_F(DurableFileTest, AnUncommittedFileRemovesItsTemporaryAndKeepsThePreviousFile) {
  Write(Path("f"), "old");
  {
    DurableFile file(Path("f"), Path("f.tmp"));
    file.Append("new", 3);
    EXPECT_TRUE(fs::exists(Path("f.tmp")));
  }
  EXPECT_FALSE(fs::exists(Path("f.tmp")));
  EXPECT_EQ(Read(Path("f")), "old");
}

TEST_F(DurableFileTest, AFailureIsOneRuntimeErrorNamingTheFileAndTheOsMessage) {
  const std::string temporary = Path("missing/f.tmp");
  try {
    DurableFile file(Path("missing/f"), temporary);
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + temporary + ": " + OsMessage(ENOENT));
  }
}

TEST_F(DurableFileTest, AFailedRenameRemovesTheTemporary) {
  fs::create_directory(Path("d"));
  Write(Path("d/inside"), "x");  // a non-empty directory cannot be replaced by a file
  DurableFile file(Path("d"), Path("d.tmp"));
  file.Append("new", 3);
  EXPECT_THROW(file.Commit(), RuntimeError);
  EXPECT_FALSE(fs::exists(Path("d.tmp")));
  EXPECT_EQ(Read(Path("d/inside")), "x");
}

TEST_F(DurableFileTest, WritebackStartedAfterEveryBlockLeavesTheWholeFileInOrder) {
  // The helper thread's sync_file_range calls run behind the appends; Commit stops it and fsyncs the rest.
  std::string expected;
  {
    DurableFile file(Path("blocks"), Path("blocks.tmp"));
    for (int block = 0; block < 64; ++block) {
      const std::string bytes(64 * 1024 + block, static_cast<char>('A' + block % 26));
      file.Append(bytes.data(), bytes.size());
      file.StartWriteback();
      expected += bytes;
    }
    file.Commit();
    EXPECT_GE(file.commit_s(), 0.0);
  }
  EXPECT_EQ(Read(Path("blocks")), expected);
  EXPECT_FALSE(fs::exists(Path("blocks.tmp")));
}

TEST_F(DurableFileTest, AnUncommittedFileWithWritebackRunningRemovesItsTemporary) {
  {
    DurableFile file(Path("dropped"), Path("dropped.tmp"));
    const std::string bytes(1 << 20, 'x');
    for (int block = 0; block < 8; ++block) {
      file.Append(bytes.data(), bytes.size());
      file.StartWriteback();
    }
  }  // destroyed with the helper possibly mid-call: it is joined, the temporary removed
  EXPECT_FALSE(fs::exists(Path("dropped.tmp")));
  EXPECT_FALSE(fs::exists(Path("dropped")));
}

TEST_F(DurableFileTest, ReplaceFileDurablyWritesTheBytes) {
  ReplaceFileDurably(Path("r"), Path("r.tmp.1"), "bytes", 5);
  EXPECT_EQ(Read(Path("r")), "bytes");
  EXPECT_FALSE(fs::exists(Path("r.tmp.1")));
}

TEST_F(DurableFileTest, SyncDirectoryNamesAMissingDirectory) {
  try {
    SyncDirectory(Path("missing"));
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open directory " + Path("missing") + " to sync it"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tb
