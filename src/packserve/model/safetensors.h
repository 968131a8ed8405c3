// safetensors.h: reading and writing the safetensors format (issue 4 "Loading").
//
// Format: an 8-byte little-endian header length N, N bytes of JSON header
//   {"<name>": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data section; offsets are relative to its start (byte 8 + N).
// Reading memory-maps the file (read-only, shared): a HostTensor's `owner` holds the mapping,
// so tensors stay valid after the SafetensorsFile is gone. Opening validates every entry:
// dtype known, shape non-negative, data_offsets inside the data section, end - begin ==
// prod(shape) * dtype size, no two tensors overlapping. Tensors of dtypes other than BF16, F16
// and F32 may be present (their bytes are checked) but cannot be read as HostTensors.
// A sharded checkpoint (model.safetensors.index.json, "weight_map": name -> file) is a
// SafetensorsCheckpoint over several files.
// Writing streams: the header is written first from the tensors' names, dtypes and shapes, then
// the tensors' bytes in order, so no tensor needs to be in memory whole; the file appears under
// its final name only after finish() (written as "<path>.tmp", then renamed).
// Thread-safety: SafetensorsFile and SafetensorsCheckpoint are immutable after opening; share
// freely. A SafetensorsWriter is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/model/weights.h"

namespace packserve::model {

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;  // as written: "BF16", "F16", "F32", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin_bytes = 0;  // offset in the data section
  uint64_t end_bytes = 0;
};

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Maps and validates `path`. Errors (kInvalidArgument) name the file and, where there is one,
  // the tensor: `a.safetensors: tensor "x": data_offsets [0, 10] hold 10 bytes, expected 12
  // (shape [3], F32)`; kNotFound when the file cannot be opened.
  static Result<std::shared_ptr<const SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In header order of names (sorted).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  // A view of tensor `name`; kNotFound naming the file when absent, kUnimplemented for a
  // dtype other than BF16/F16/F32.
  Result<HostTensor> tensor(std::string_view name) const;
  // The bytes of tensor `name` whatever its dtype (valid while this file lives); kNotFound
  // naming the file when absent.
  Result<std::span<const std::byte>> bytes(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  const std::byte* map_ = nullptr;
  size_t map_bytes_ = 0;
  const std::byte* data_ = nullptr;  // start of the data section
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// The tensors of a checkpoint directory: `model.safetensors`, or the files named by
// `model.safetensors.index.json`'s weight_map (which wins when both exist).
class SafetensorsCheckpoint {
 public:
  // Errors: kNotFound when neither file exists (naming both), kInvalidArgument for a malformed
  // index (naming the field) or a tensor the index maps to a file that lacks it.
  static Result<SafetensorsCheckpoint> open_dir(const std::string& dir);

  bool contains(std::string_view name) const { return where_.find(name) != where_.end(); }
  // kNotFound naming the tensor and the directory when absent.
  Result<HostTensor> tensor(std::string_view name) const;
  // Tensor `name`'s entry (dtype as written, shape) and bytes, whatever its dtype (valid while
  // this checkpoint lives); kNotFound as tensor().
  Result<std::pair<const SafetensorsEntry*, std::span<const std::byte>>> raw(
      std::string_view name) const;
  std::vector<std::string> tensor_names() const;  // sorted
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> files_ index
};

// "BF16" <-> DType for the three readable dtypes.
std::string_view safetensors_dtype_name(DType dtype);

struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  bool float8 = false;  // F8_E4M3 bytes (dtype unused): float8 checkpoints (fp8_weights.h)
  uint64_t num_bytes() const;
};

class SafetensorsWriter {
 public:
  // Writes the header for `tensors` (data in this order) to `<path>.tmp`. kInvalidArgument for
  // an empty or duplicate name or a negative dimension; kInternal when the file cannot be written.
  static Result<SafetensorsWriter> create(const std::string& path,
                                          std::vector<SafetensorsTensorSpec> tensors,
                                          const std::map<std::string, std::string>& metadata = {});
  SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept = default;
  ~SafetensorsWriter();

  // Appends the next bytes of the data section; a call may span tensors. kFailedPrecondition
  // when more bytes than the header announced are written.
  Status write(std::span<const std::byte> bytes);
  // Index of the tensor the next byte belongs to (== number of tensors when all are written).
  size_t next_tensor() const;
  // Checks that every byte was written, flushes, renames `<path>.tmp` to `path`.
  Status finish();

 private:
  SafetensorsWriter() = default;
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::vector<SafetensorsTensorSpec> tensors_;
  std::vector<uint64_t> ends_bytes_;  // cumulative end offset of each tensor
  uint64_t written_bytes_ = 0;
};

}  // namespace packserve::model
