// test_dir.h: a fresh temporary directory for one test (model tests only), removed with its
// contents when the TestDir goes out of scope. Unique per process and name, so tests that
// ctest runs in parallel never share one.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace packserve::model {

class TestDir {
 public:
  explicit TestDir(const std::string& name) {
    path_ = (std::filesystem::temp_directory_path() /
             ("packserve_" + name + "_" + std::to_string(::getpid())))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace packserve::model
