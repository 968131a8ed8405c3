// safetensors.cc: memory-mapped reader, sharded checkpoints and the streaming writer
// (safetensors.h).
#include "packserve/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace packserve::model {
namespace {

using Json = nlohmann::json;

// The spec's bound on the header (100 MB): anything larger is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Element size of every dtype the format defines; 0 = unknown.
uint64_t element_size_bytes(std::string_view dtype) {
  static const std::map<std::string, uint64_t, std::less<>> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::string describe(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

Result<SafetensorsEntry> parse_entry(const std::string& where, const std::string& name,
                                     const Json& value, uint64_t data_bytes) {
  SafetensorsEntry e;
  e.name = name;
  if (!value.is_object())
    return invalid_argument(where + ": expected an object, got " + describe(value));
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return invalid_argument(where + ": dtype: expected a string such as \"BF16\"");
  }
  e.dtype_name = dtype->get<std::string>();
  const uint64_t element_bytes = element_size_bytes(e.dtype_name);
  if (element_bytes == 0) {
    return invalid_argument(where + ": dtype: unknown dtype \"" + e.dtype_name +
                            "\"; expected BF16, F16, F32 (or another safetensors dtype)");
  }
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return invalid_argument(where + ": shape: expected an array of integers >= 0");
  }
  uint64_t num_elements = 1;
  for (const Json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (1ll << 40)) {
      return invalid_argument(where + ": shape: expected integers in [0, 2^40], got " +
                              describe(*shape));
    }
    e.shape.push_back(d.get<int64_t>());
    num_elements *= static_cast<uint64_t>(d.get<int64_t>());
    if (num_elements > (1ull << 48)) {
      return invalid_argument(where + ": shape: " + describe(*shape) + " is too large");
    }
  }
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return invalid_argument(where + ": data_offsets: expected [begin, end] (integers >= 0)");
  }
  e.begin_bytes = (*offsets)[0].get<uint64_t>();
  e.end_bytes = (*offsets)[1].get<uint64_t>();
  if (e.begin_bytes > e.end_bytes || e.end_bytes > data_bytes) {
    return invalid_argument(where + ": data_offsets [" + std::to_string(e.begin_bytes) + ", " +
                            std::to_string(e.end_bytes) + "] outside the data section of " +
                            std::to_string(data_bytes) + " bytes (a truncated file?)");
  }
  const uint64_t expected = num_elements * element_bytes;
  if (e.end_bytes - e.begin_bytes != expected) {
    return invalid_argument(where + ": data_offsets [" + std::to_string(e.begin_bytes) + ", " +
                            std::to_string(e.end_bytes) + "] hold " +
                            std::to_string(e.end_bytes - e.begin_bytes) + " bytes, expected " +
                            std::to_string(expected) + " (shape " + shape_text(e.shape) + ", " +
                            e.dtype_name + ")");
  }
  return e;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kFP8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(const_cast<std::byte*>(map_), map_bytes_);
}

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return internal_error(path + ": fstat failed: " + std::strerror(err));
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return invalid_argument(path + ": truncated: " + std::to_string(file_bytes) +
                            " bytes, expected at least 8 (the header length)");
  }
  void* map = mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return internal_error(path + ": mmap failed: " + std::strerror(map_errno));
  file->map_ = static_cast<const std::byte*>(map);
  file->map_bytes_ = file_bytes;

  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<uint8_t>(file->map_[i]);
  }
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8) {
    return invalid_argument(path + ": header length " + std::to_string(header_bytes) +
                            " exceeds the file (" + std::to_string(file_bytes) +
                            " bytes) or the 100 MB limit: truncated or not a safetensors file");
  }
  const char* header_text = reinterpret_cast<const char*>(file->map_ + 8);
  Json header;
  try {
    header = Json::parse(header_text, header_text + header_bytes);
  } catch (const Json::exception& e) {
    return invalid_argument(path + ": malformed header: not valid JSON: " + e.what());
  }
  if (!header.is_object())
    return invalid_argument(path + ": malformed header: expected a JSON object");
  file->data_ = file->map_ + 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return invalid_argument(path + ": __metadata__: expected an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m->is_string()) file->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    PS_ASSIGN_OR_RETURN(
        auto entry, parse_entry(path + ": tensor \"" + it.key() + "\"", it.key(), *it, data_bytes));
    file->index_.emplace(entry.name, file->entries_.size());
    file->entries_.push_back(std::move(entry));
  }
  // No two tensors may share bytes (empty tensors share nothing).
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : file->entries_) {
    if (e.end_bytes > e.begin_bytes) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin_bytes < b->begin_bytes; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin_bytes < by_offset[i - 1]->end_bytes) {
      return invalid_argument(path + ": tensor \"" + by_offset[i]->name + "\": data_offsets [" +
                              std::to_string(by_offset[i]->begin_bytes) + ", " +
                              std::to_string(by_offset[i]->end_bytes) + "] overlap tensor \"" +
                              by_offset[i - 1]->name + "\" [" +
                              std::to_string(by_offset[i - 1]->begin_bytes) + ", " +
                              std::to_string(by_offset[i - 1]->end_bytes) + "]");
    }
  }
  return std::shared_ptr<const SafetensorsFile>(std::move(file));
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Result<HostTensor> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return not_found(path_ + ": no tensor \"" + std::string(name) + "\"");
  HostTensor t;
  if (e->dtype_name == "BF16") {
    t.dtype = DType::kBF16;
  } else if (e->dtype_name == "F16") {
    t.dtype = DType::kF16;
  } else if (e->dtype_name == "F32") {
    t.dtype = DType::kF32;
  } else {
    return unimplemented(path_ + ": tensor \"" + e->name + "\": dtype " + e->dtype_name +
                         " is not supported; expected BF16, F16 or F32");
  }
  t.name = e->name;
  t.shape = e->shape;
  t.data = data_ + e->begin_bytes;
  t.owner = shared_from_this();
  return t;
}

Result<std::span<const std::byte>> SafetensorsFile::bytes(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return not_found(path_ + ": no tensor \"" + std::string(name) + "\"");
  return std::span<const std::byte>(data_ + e->begin_bytes, e->end_bytes - e->begin_bytes);
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint ckpt;
  ckpt.dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path, std::ios::binary);
    if (!in) return not_found(index_path + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    Json index;
    try {
      index = Json::parse(text.str());
    } catch (const Json::exception& e) {
      return invalid_argument(index_path + ": not valid JSON: " + e.what());
    }
    const auto map = index.is_object() ? index.find("weight_map") : index.end();
    if (map == index.end() || !map->is_object()) {
      return invalid_argument(index_path + ": weight_map: expected an object {tensor: file}");
    }
    std::map<std::string, size_t> file_index;
    for (auto it = map->begin(); it != map->end(); ++it) {
      if (!it->is_string()) {
        return invalid_argument(index_path + ": weight_map[\"" + it.key() +
                                "\"]: expected a file name, got " + describe(*it));
      }
      const std::string shard = it->get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return invalid_argument(index_path + ": weight_map[\"" + it.key() +
                                "\"]: expected a file name in the checkpoint directory, got \"" +
                                shard + "\"");
      }
      auto [pos, inserted] = file_index.emplace(shard, ckpt.files_.size());
      if (inserted) {
        PS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(dir + "/" + shard));
        ckpt.files_.push_back(std::move(file));
      }
      if (ckpt.files_[pos->second]->find(it.key()) == nullptr) {
        return invalid_argument(index_path + ": weight_map[\"" + it.key() + "\"]: " + shard +
                                " has no such tensor");
      }
      ckpt.where_.emplace(it.key(), pos->second);
    }
    return ckpt;
  }
  if (!fs::exists(single_path, ec)) {
    return not_found(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  PS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single_path));
  for (const auto& e : file->entries()) ckpt.where_.emplace(e.name, 0);
  ckpt.files_.push_back(std::move(file));
  return ckpt;
}

Result<HostTensor> SafetensorsCheckpoint::tensor(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) {
    return not_found(dir_ + ": checkpoint has no tensor \"" + std::string(name) + "\"");
  }
  return files_[it->second]->tensor(name);
}

Result<std::pair<const SafetensorsEntry*, std::span<const std::byte>>> SafetensorsCheckpoint::raw(
    std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) {
    return not_found(dir_ + ": checkpoint has no tensor \"" + std::string(name) + "\"");
  }
  const SafetensorsFile& f = *files_[it->second];
  PS_ASSIGN_OR_RETURN(const std::span<const std::byte> b, f.bytes(name));
  return std::make_pair(f.find(name), b);
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

uint64_t SafetensorsTensorSpec::num_bytes() const {
  uint64_t n = float8 ? 1 : dtype_size_bytes(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Result<SafetensorsWriter> SafetensorsWriter::create(
    const std::string& path, std::vector<SafetensorsTensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  SafetensorsWriter w;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return invalid_argument(path + ": tensor name \"" + t.name +
                              "\": expected a unique, non-empty name");
    }
    for (int64_t d : t.shape) {
      if (d < 0) return invalid_argument(path + ": tensor \"" + t.name + "\": negative dimension");
    }
    const uint64_t end = offset + t.num_bytes();
    header[t.name] = {
        {"dtype", t.float8 ? std::string_view("F8_E4M3") : safetensors_dtype_name(t.dtype)},
        {"shape", t.shape},
        {"data_offsets", {offset, end}}};
    w.ends_bytes_.push_back(end);
    offset = end;
  }
  std::string text = header.dump();
  // Pad with spaces (allowed by the format) so the data section starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0) text += ' ';
  w.path_ = path;
  w.tensors_ = std::move(tensors);
  w.file_.reset(std::fopen((path + ".tmp").c_str(), "wb"));
  if (!w.file_) return internal_error(path + ".tmp: cannot create: " + std::strerror(errno));
  unsigned char length[8];
  uint64_t n = text.size();
  for (unsigned char& b : length) {
    b = static_cast<unsigned char>(n & 0xff);
    n >>= 8;
  }
  if (std::fwrite(length, 1, 8, w.file_.get()) != 8 ||
      std::fwrite(text.data(), 1, text.size(), w.file_.get()) != text.size()) {
    return internal_error(path + ".tmp: write failed: " + std::strerror(errno));
  }
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) {  // not finished: leave no partial file behind
    file_.reset();
    std::error_code ec;
    std::filesystem::remove(path_ + ".tmp", ec);
  }
}

Status SafetensorsWriter::write(std::span<const std::byte> bytes) {
  if (!file_) return failed_precondition(path_ + ": write after finish()");
  const uint64_t total = ends_bytes_.empty() ? 0 : ends_bytes_.back();
  if (written_bytes_ + bytes.size() > total) {
    return failed_precondition(path_ + ": " + std::to_string(written_bytes_ + bytes.size()) +
                               " data bytes written, the header announced " +
                               std::to_string(total));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_.get()) != bytes.size()) {
    return internal_error(path_ + ".tmp: write failed: " + std::strerror(errno));
  }
  written_bytes_ += bytes.size();
  return ok_status();
}

size_t SafetensorsWriter::next_tensor() const {
  return static_cast<size_t>(
      std::upper_bound(ends_bytes_.begin(), ends_bytes_.end(), written_bytes_) -
      ends_bytes_.begin());
}

Status SafetensorsWriter::finish() {
  if (!file_) return failed_precondition(path_ + ": finish() called twice");
  const uint64_t total = ends_bytes_.empty() ? 0 : ends_bytes_.back();
  if (written_bytes_ != total) {
    const size_t next = next_tensor();
    return failed_precondition(path_ + ": finish() after " + std::to_string(written_bytes_) +
                               " of " + std::to_string(total) + " data bytes (tensor \"" +
                               (next < tensors_.size() ? tensors_[next].name : "") +
                               "\" incomplete)");
  }
  std::FILE* f = file_.release();
  if (std::fflush(f) != 0 || std::fclose(f) != 0) {
    return internal_error(path_ + ".tmp: write failed: " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(path_ + ".tmp", path_, ec);
  if (ec) return internal_error(path_ + ": rename from .tmp failed: " + ec.message());
  return ok_status();
}

}  // namespace packserve::model
