// safetensors_test.cc: the reader on hand-made files (bytes written here, values known),
// corrupt files (one test per rule), the sharded index and the streaming writer.
#include "packserve/model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "packserve/model/test_dir.h"
#include "testing/mutate.h"

namespace packserve::model {
namespace {

// 8-byte little-endian length + header + data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float f : values) s.append(reinterpret_cast<const char*>(&f), 4);
  return s;
}
std::string u16_bytes(std::initializer_list<uint16_t> values) {
  std::string s;
  for (uint16_t v : values) s.append(reinterpret_cast<const char*>(&v), 2);
  return s;
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

TEST(Safetensors, ReadsEveryDtypeWithExactValues) {
  TestDir dir("st_read");
  // bf16 0x3f80 = 1.0, 0xc000 = -2.0; f16 0x3c00 = 1.0, 0x3800 = 0.5.
  const std::string data = f32_bytes({1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, 7.0f}) +
                           u16_bytes({0x3f80, 0xc000}) + u16_bytes({0x3c00, 0x3800});
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                             R"("c":{"dtype":"F16","shape":[2],"data_offsets":[28,32]}})";
  const std::string path = dir.path() + "/x.safetensors";
  write_file(path, safetensors_bytes(header, data));
  HostTensor a, b, c;
  {
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_EQ((*file)->entries().size(), 3u);
    EXPECT_EQ((*file)->metadata().at("format"), "pt");
    a = (*file)->tensor("a").value();
    b = (*file)->tensor("b").value();
    c = (*file)->tensor("c").value();
    expect_error((*file)->tensor("zz").status(), StatusCode::kNotFound, {path, "zz"});
  }
  // The SafetensorsFile is gone; the tensors' owners keep the mapping alive.
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.name, "a");
  const float expected_a[] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, 7.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.at(i), expected_a[i]);
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.at(0), 1.0f);
  EXPECT_EQ(b.at(1), -2.0f);
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_EQ(c.at(0), 1.0f);
  EXPECT_EQ(c.at(1), 0.5f);
  EXPECT_EQ(c.num_bytes(), 4u);
}

TEST(Safetensors, OtherDtypesAreListedButNotReadable) {
  TestDir dir("st_i64");
  const std::string path = dir.path() + "/x.safetensors";
  write_file(path, safetensors_bytes(R"({"n":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                                     std::string(8, '\0')));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  ASSERT_NE((*file)->find("n"), nullptr);
  expect_error((*file)->tensor("n").status(), StatusCode::kUnimplemented, {"\"n\"", "I64", "BF16"});
}

// One corrupt file per rule: the message names the file, the tensor and the expectation.
struct CorruptCase {
  const char* what;
  std::string bytes;
  std::vector<std::string> parts;
};

TEST(Safetensors, CorruptFilesAreClearErrors) {
  TestDir dir("st_corrupt");
  const std::string ok_header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<CorruptCase> cases = {
      {"shorter than the length field", std::string(5, '\0'), {"truncated", "5 bytes"}},
      {"header length past the end",
       safetensors_bytes(ok_header, "").substr(0, 20),
       {"header length", "exceeds the file"}},
      {"data truncated",
       safetensors_bytes(ok_header, std::string(4, '\0')),
       {"tensor \"t\"", "data_offsets [0, 8]", "outside the data section of 4 bytes"}},
      {"header not JSON",
       safetensors_bytes("{\"t\": [", ""),
       {"malformed header", "not valid JSON"}},
      {"header not an object", safetensors_bytes("[1, 2]", ""), {"malformed header", "object"}},
      {"unknown dtype",
       safetensors_bytes(R"({"t":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})",
                         std::string(8, '\0')),
       {"tensor \"t\"", "unknown dtype \"F7\""}},
      {"size mismatch",
       safetensors_bytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                         std::string(12, '\0')),
       {"tensor \"t\"", "hold 8 bytes, expected 12", "shape [3], F32"}},
      {"begin after end",
       safetensors_bytes(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
                         std::string(8, '\0')),
       {"tensor \"t\"", "data_offsets [8, 4]"}},
      {"negative offset",
       safetensors_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})",
                         std::string(8, '\0')),
       {"tensor \"t\"", "data_offsets: expected [begin, end]"}},
      {"negative dimension",
       safetensors_bytes(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                         std::string(8, '\0')),
       {"tensor \"t\"", "shape"}},
      {"missing shape",
       safetensors_bytes(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", std::string(8, '\0')),
       {"tensor \"t\"", "shape: expected an array"}},
      {"overlap",
       safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         std::string(12, '\0')),
       {"tensor \"b\"", "overlap tensor \"a\""}},
  };
  for (const CorruptCase& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.path() + "/bad.safetensors";
    write_file(path, c.bytes);
    auto file = SafetensorsFile::open(path);
    ASSERT_FALSE(file.ok());
    auto parts = c.parts;
    parts.push_back(path);
    expect_error(file.status(), StatusCode::kInvalidArgument, parts);
  }
  expect_error(SafetensorsFile::open(dir.path() + "/absent.safetensors").status(),
               StatusCode::kNotFound, {"absent.safetensors", "cannot open"});
}

// Seeded mutations of a valid file (characters of the header replaced, inserted or deleted,
// the length field moved, the file cut short): every one either opens with each entry inside
// the data section and of its shape's size, every readable tensor's bytes read end to end, or
// fails with kInvalidArgument naming the file. Never a crash (scripts/sanitize-check.sh runs it
// under ASan, which also sees a read past the header's bytes).
TEST(Safetensors, MutatedFilesOpenConsistentlyOrFailNamingTheFile) {
  TestDir dir("st_mutated");
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                             R"("c":{"dtype":"I64","shape":[1],"data_offsets":[28,36]}})";
  const std::string valid = safetensors_bytes(header, std::string(36, '\x11'));
  const std::string path = dir.path() + "/m.safetensors";
  const std::string alphabet = "{}[],:\"0123456789-e.ABFIU \\x\x80\xff";
  Rng rng(20261124);
  int opened = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = valid;
    const int mutations = static_cast<int>(rng.uniform_int(1, 3));
    for (int m = 0; m < mutations; ++m) {
      const int64_t kind = rng.uniform_int(0, 4);
      if (kind <= 2) {  // a header or data character replaced, inserted or deleted
        testing::mutate_char(bytes, rng, alphabet, 8);
      } else if (kind == 3 && bytes.size() > 8) {  // the file cut short
        bytes.resize(
            static_cast<size_t>(rng.uniform_int(8, static_cast<int64_t>(bytes.size()) - 1)));
      } else {  // the length field moved a little, or to near 2^64
        const int64_t delta = rng.uniform_int(-16, 16);
        uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        n = rng.uniform_int(0, 9) == 0 ? ~uint64_t{0} - static_cast<uint64_t>(delta + 16)
                                       : n + static_cast<uint64_t>(delta);
        std::memcpy(bytes.data(), &n, 8);
      }
    }
    write_file(path, bytes);
    auto file = SafetensorsFile::open(path);
    if (!file.ok()) {
      ASSERT_EQ(file.status().code(), StatusCode::kInvalidArgument)
          << "trial " << trial << ": " << file.status().to_string();
      ASSERT_NE(file.status().message().find(path), std::string::npos) << file.status().to_string();
      continue;
    }
    ++opened;
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);
    ASSERT_LE(header_bytes, bytes.size() - 8) << "trial " << trial;
    const uint64_t data_bytes = bytes.size() - 8 - header_bytes;
    for (const SafetensorsEntry& e : (*file)->entries()) {
      SCOPED_TRACE("trial " + std::to_string(trial) + ", tensor " + e.name);
      ASSERT_LE(e.begin_bytes, e.end_bytes);
      ASSERT_LE(e.end_bytes, data_bytes);
      auto t = (*file)->tensor(e.name);
      if (!t.ok()) {  // a dtype the reader lists but does not convert
        ASSERT_EQ(t.status().code(), StatusCode::kUnimplemented) << t.status().to_string();
        continue;
      }
      ASSERT_EQ(t->num_bytes(), e.end_bytes - e.begin_bytes);
      float sum = 0;
      for (int64_t i = 0; i < t->num_elements(); ++i) sum += t->at(i);
      (void)sum;
    }
  }
  // Some mutations keep the file valid (a changed digit of a value, a space): both paths ran.
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 3000);
}

TEST(SafetensorsWriter, StreamsAndReadsBack) {
  TestDir dir("st_write");
  const std::string path = dir.path() + "/w.safetensors";
  std::vector<SafetensorsTensorSpec> specs = {
      {"x", DType::kF32, {2, 2}}, {"y", DType::kBF16, {3}}, {"empty", DType::kF16, {0, 4}}};
  auto writer = SafetensorsWriter::create(path, specs, {{"k", "v"}});
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  EXPECT_EQ(writer->next_tensor(), 0u);
  const std::string x = f32_bytes({1, 2, 3, 4});
  const std::string y = u16_bytes({0x3f80, 0x4000, 0x4040});  // 1, 2, 3 in bf16
  auto span = [](const std::string& s, size_t from, size_t n) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()) + from, n);
  };
  // Pieces that cross the tensor boundary.
  ASSERT_TRUE(writer->write(span(x, 0, 10)).ok());
  ASSERT_TRUE(writer->write(span(x, 10, 6)).ok());
  EXPECT_EQ(writer->next_tensor(), 1u);
  EXPECT_FALSE(std::filesystem::exists(path));  // only "<path>.tmp" until finish()
  ASSERT_TRUE(writer->write(span(y, 0, 6)).ok());
  expect_error(writer->write(span(y, 0, 1)), StatusCode::kFailedPrecondition,
               {"23 data bytes written", "announced 22"});
  ASSERT_TRUE(writer->finish().ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->metadata().at("k"), "v");
  auto tx = (*file)->tensor("x").value();
  auto ty = (*file)->tensor("y").value();
  auto te = (*file)->tensor("empty").value();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tx.at(i), static_cast<float>(i + 1));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ty.at(i), static_cast<float>(i + 1));
  EXPECT_EQ(te.shape, (std::vector<int64_t>{0, 4}));
  // The data section starts 8-byte aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tx.data) % 8, 0u);
}

TEST(SafetensorsWriter, IncompleteOrInvalidLeavesNoFile) {
  TestDir dir("st_write_bad");
  const std::string path = dir.path() + "/w.safetensors";
  {
    auto writer = SafetensorsWriter::create(path, {{"x", DType::kF32, {4}}});
    ASSERT_TRUE(writer.ok());
    const std::string x = f32_bytes({1, 2});
    ASSERT_TRUE(writer->write(std::as_bytes(std::span<const char>(x.data(), x.size()))).ok());
    expect_error(writer->finish(), StatusCode::kFailedPrecondition,
                 {"8 of 16 data bytes", "tensor \"x\" incomplete"});
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  expect_error(
      SafetensorsWriter::create(path, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}}).status(),
      StatusCode::kInvalidArgument, {"\"x\"", "unique"});
  expect_error(SafetensorsWriter::create(path, {{"x", DType::kF32, {-1}}}).status(),
               StatusCode::kInvalidArgument, {"\"x\"", "negative"});
}

// Two shards and an index: every tensor is found in its own file.
TEST(SafetensorsCheckpoint, ShardedIndex) {
  TestDir dir("st_sharded");
  write_file(dir.path() + "/model-00001-of-00002.safetensors",
             safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                               f32_bytes({11.0f})));
  write_file(dir.path() + "/model-00002-of-00002.safetensors",
             safetensors_bytes(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                               f32_bytes({22.0f})));
  write_file(dir.path() + "/model.safetensors.index.json",
             R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors",
                 "b":"model-00002-of-00002.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::open_dir(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ckpt->tensor("a")->at(0), 11.0f);
  EXPECT_EQ(ckpt->tensor("b")->at(0), 22.0f);
  expect_error(ckpt->tensor("c").status(), StatusCode::kNotFound, {dir.path(), "\"c\""});

  // An index entry pointing at a shard that lacks the tensor.
  write_file(dir.path() + "/model.safetensors.index.json",
             R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})");
  expect_error(SafetensorsCheckpoint::open_dir(dir.path()).status(), StatusCode::kInvalidArgument,
               {"weight_map[\"a\"]", "model-00002-of-00002.safetensors has no such tensor"});
  write_file(dir.path() + "/model.safetensors.index.json", R"({"weight_map":{"a":"../x"}})");
  expect_error(SafetensorsCheckpoint::open_dir(dir.path()).status(), StatusCode::kInvalidArgument,
               {"weight_map[\"a\"]", "file name in the checkpoint directory"});
  write_file(dir.path() + "/model.safetensors.index.json", R"({"weights":{}})");
  expect_error(SafetensorsCheckpoint::open_dir(dir.path()).status(), StatusCode::kInvalidArgument,
               {"model.safetensors.index.json", "weight_map"});
  write_file(dir.path() + "/model.safetensors.index.json",
             R"({"weight_map":{"a":"missing.safetensors"}})");
  expect_error(SafetensorsCheckpoint::open_dir(dir.path()).status(), StatusCode::kNotFound,
               {"missing.safetensors"});
}

TEST(SafetensorsCheckpoint, EmptyDirectory) {
  TestDir dir("st_empty");
  expect_error(SafetensorsCheckpoint::open_dir(dir.path()).status(), StatusCode::kNotFound,
               {dir.path(), "model.safetensors", "model.safetensors.index.json"});
}

}  // namespace
}  // namespace packserve::model
