// png.cc: see png.h.
#include "packserve/benchclient/png.h"

#include <array>
#include <fstream>

namespace packserve::benchclient {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

void put_u32_be(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], std::span<const uint8_t> data) {
  put_u32_be(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(type[i]));
  out.insert(out.end(), data.begin(), data.end());
  const uint32_t crc = crc32(std::span<const uint8_t>(out.data() + type_at, out.size() - type_at));
  put_u32_be(out, crc);
}

}  // namespace

uint32_t crc32(std::span<const uint8_t> data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (uint8_t b : data) c = table[(c ^ b) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(std::span<const uint8_t> data, uint32_t adler) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = adler & 0xFFFFu;
  uint32_t b = adler >> 16;
  // 5552 is the largest n with 255 n (n + 1) / 2 + (n + 1) (kMod - 1) < 2^32.
  size_t i = 0;
  while (i < data.size()) {
    const size_t end = std::min(data.size(), i + 5552);
    for (; i < end; ++i) {
      a += data[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return (b << 16) | a;
}

std::vector<uint8_t> zlib_store(std::span<const uint8_t> data) {
  constexpr size_t kMaxBlock = 65535;
  std::vector<uint8_t> out;
  out.reserve(data.size() + data.size() / kMaxBlock * 5 + 16);
  // CMF 0x78: deflate, 32 KiB window; FLG 0x01: (0x78 * 256 + 0x01) % 31 == 0, no dictionary.
  out.push_back(0x78);
  out.push_back(0x01);
  size_t offset = 0;
  do {
    const size_t len = std::min(kMaxBlock, data.size() - offset);
    const bool final = offset + len == data.size();
    out.push_back(final ? 1 : 0);  // BFINAL, BTYPE = 00 (stored); the rest of the byte is padding
    const auto len16 = static_cast<uint16_t>(len);
    const auto nlen16 = static_cast<uint16_t>(~len16);
    out.push_back(static_cast<uint8_t>(len16 & 0xFF));
    out.push_back(static_cast<uint8_t>(len16 >> 8));
    out.push_back(static_cast<uint8_t>(nlen16 & 0xFF));
    out.push_back(static_cast<uint8_t>(nlen16 >> 8));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(offset),
               data.begin() + static_cast<std::ptrdiff_t>(offset + len));
    offset += len;
  } while (offset < data.size());
  put_u32_be(out, adler32(data));
  return out;
}

Result<std::vector<uint8_t>> encode_png(const RgbImage& image) {
  if (image.width < 1 || image.height < 1) {
    return invalid_argument("png: width and height must be >= 1, got " +
                            std::to_string(image.width) + "x" + std::to_string(image.height));
  }
  const size_t row_bytes = static_cast<size_t>(image.width) * 3;
  if (image.pixels.size() != row_bytes * static_cast<size_t>(image.height)) {
    return invalid_argument("png: pixels.size() = " + std::to_string(image.pixels.size()) +
                            ", expected width * height * 3 = " +
                            std::to_string(row_bytes * static_cast<size_t>(image.height)));
  }
  std::vector<uint8_t> raw;
  raw.reserve((row_bytes + 1) * static_cast<size_t>(image.height));
  for (int32_t y = 0; y < image.height; ++y) {
    raw.push_back(0);  // filter type None
    const auto* row = image.pixels.data() + static_cast<size_t>(y) * row_bytes;
    raw.insert(raw.end(), row, row + row_bytes);
  }
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32_be(ihdr, static_cast<uint32_t>(image.width));
  put_u32_be(ihdr, static_cast<uint32_t>(image.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // depth 8, RGB, deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", zlib_store(raw));
  put_chunk(out, "IEND", {});
  return out;
}

Status write_png(const RgbImage& image, const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, encode_png(image));
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return internal_error("png: cannot open '" + path + "' for writing");
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  if (!file) return internal_error("png: writing '" + path + "' failed");
  return ok_status();
}

}  // namespace packserve::benchclient
