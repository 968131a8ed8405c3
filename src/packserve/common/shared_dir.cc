#include "packserve/common/shared_dir.h"

#include <filesystem>

namespace packserve {

std::string source_root() { return PACKSERVE_SOURCE_DIR; }

Result<std::string> find_shared_dir() {
  const std::filesystem::path path =
      std::filesystem::weakly_canonical(std::filesystem::path(source_root()) / ".." / "shared");
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    return not_found("shared folder not found at " + path.string() +
                     ": the traces and seeds live in ../shared beside the repository root");
  }
  return path.string();
}

Result<std::string> find_shared_file(const std::string& relative) {
  PS_ASSIGN_OR_RETURN(std::string dir, find_shared_dir());
  const std::filesystem::path path = std::filesystem::path(dir) / relative;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    return not_found("shared file not found: " + path.string());
  }
  return path.string();
}

}  // namespace packserve
