// Paths shared by tests: files of the source tree and per-test scratch directories.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

namespace trainsim::test_support {

/// `rel` under the source tree (TRAINSIM_SOURCE_DIR, defined for every test target by
/// tests/CMakeLists.txt), e.g. source_path("scenarios/small/gpt-tiny_tp1_pp1_dp1.yaml").
inline std::string source_path(const std::string& rel) {
  return std::string(TRAINSIM_SOURCE_DIR) + "/" + rel;
}

/// A fresh, empty directory under the system's temporary directory, named after `prefix`, the
/// running test and the process id (so parallel ctest runs never share one); removed with its
/// contents when the object goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = info ? std::string(info->test_suite_name()) + "_" + info->name()
                                  : std::string("no_test");
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + test + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// A path inside the directory (the file need not exist).
  std::filesystem::path file(const std::string& name) const { return path_ / name; }
  /// Writes `text` to `name` inside the directory; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace trainsim::test_support
