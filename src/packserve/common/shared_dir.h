// shared_dir.h: finds the project's ../shared folder (traces, seeds), which lives beside the
// repository and never inside it. One helper, so a test or benchmark that needs it fails
// with the path it tried instead of skipping silently.
#pragma once

#include <string>

#include "packserve/common/status.h"

namespace packserve {
// The source tree's root (compiled in) and "<root>/../shared" when it exists, else a
// kNotFound Status naming the path it tried and what it is for.
std::string source_root();
Result<std::string> find_shared_dir();
// find_shared_dir() + "/" + relative, checked to exist.
Result<std::string> find_shared_file(const std::string& relative);
}  // namespace packserve
