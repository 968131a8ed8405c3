// png_test.cc: the PNG encoder against known checksum values and an independent decoder
// written here (chunk walk with a bitwise CRC-32, zlib header check, stored-block reader,
// byte-by-byte Adler-32, scanline unfiltering), pixel for pixel.
#include "packserve/benchclient/png.h"

#include <gtest/gtest.h>

#include <string>

namespace packserve::benchclient {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Bitwise CRC-32 (no table), the textbook definition.
uint32_t crc_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t adler_naive(const std::vector<uint8_t>& d) {
  uint64_t a = 1, b = 0;
  for (uint8_t x : d) {
    a = (a + x) % 65521;
    b = (b + a) % 65521;
  }
  return static_cast<uint32_t>((b << 16) | a);
}

uint32_t be32(const std::vector<uint8_t>& v, size_t at) {
  return (uint32_t{v[at]} << 24) | (uint32_t{v[at + 1]} << 16) | (uint32_t{v[at + 2]} << 8) |
         uint32_t{v[at + 3]};
}

// Decodes what encode_png writes; fails the test on any inconsistency.
RgbImage decode(const std::vector<uint8_t>& png) {
  const std::vector<uint8_t> sig = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  EXPECT_TRUE(std::equal(sig.begin(), sig.end(), png.begin()));
  size_t at = 8;
  RgbImage img;
  std::vector<uint8_t> idat;
  bool end = false;
  while (at + 12 <= png.size() && !end) {
    const uint32_t len = be32(png, at);
    const std::string type(png.begin() + static_cast<long>(at) + 4,
                           png.begin() + static_cast<long>(at) + 8);
    EXPECT_EQ(crc_bitwise(png.data() + at + 4, len + 4), be32(png, at + 8 + len)) << type;
    const size_t data = at + 8;
    if (type == "IHDR") {
      img.width = static_cast<int32_t>(be32(png, data));
      img.height = static_cast<int32_t>(be32(png, data + 4));
      EXPECT_EQ(png[data + 8], 8);  // bit depth
      EXPECT_EQ(png[data + 9], 2);  // RGB
    } else if (type == "IDAT") {
      idat.insert(idat.end(), png.begin() + static_cast<long>(data),
                  png.begin() + static_cast<long>(data + len));
    } else if (type == "IEND") {
      end = true;
    }
    at = data + len + 4;
  }
  EXPECT_TRUE(end);
  EXPECT_EQ(at, png.size());
  // zlib: CMF/FLG check, then stored blocks only.
  EXPECT_EQ((idat[0] * 256 + idat[1]) % 31, 0);
  EXPECT_EQ(idat[0] & 0x0F, 8);  // deflate
  size_t p = 2;
  std::vector<uint8_t> raw;
  for (bool final = false; !final;) {
    final = idat[p] & 1;
    EXPECT_EQ((idat[p] >> 1) & 3, 0) << "not a stored block";
    const uint32_t len = idat[p + 1] | (uint32_t{idat[p + 2]} << 8);
    const uint32_t nlen = idat[p + 3] | (uint32_t{idat[p + 4]} << 8);
    EXPECT_EQ(len ^ 0xFFFFu, nlen);
    raw.insert(raw.end(), idat.begin() + static_cast<long>(p + 5),
               idat.begin() + static_cast<long>(p + 5 + len));
    p += 5 + len;
  }
  EXPECT_EQ(p + 4, idat.size());
  EXPECT_EQ(be32(idat, p), adler_naive(raw));
  const size_t row = static_cast<size_t>(img.width) * 3;
  EXPECT_EQ(raw.size(), (row + 1) * static_cast<size_t>(img.height));
  for (int32_t y = 0; y < img.height; ++y) {
    const size_t r = static_cast<size_t>(y) * (row + 1);
    EXPECT_EQ(raw[r], 0);  // filter None
    img.pixels.insert(img.pixels.end(), raw.begin() + static_cast<long>(r + 1),
                      raw.begin() + static_cast<long>(r + 1 + row));
  }
  return img;
}

TEST(Checksums, KnownValues) {
  // The CRC-32 check value of "123456789" (ISO-HDLC) and Adler-32 of "Wikipedia" (RFC 1950's
  // worked example in the Wikipedia article).
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);
  EXPECT_EQ(crc32(bytes_of("")), 0u);
  EXPECT_EQ(adler32(bytes_of("Wikipedia")), 0x11E60398u);
  EXPECT_EQ(adler32(bytes_of("")), 1u);
  // The IEND chunk's CRC every PNG ends with.
  EXPECT_EQ(crc32(bytes_of("IEND")), 0xAE426082u);
}

TEST(Checksums, MatchNaiveOnLongInput) {
  std::vector<uint8_t> d(200000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>((i * 7919u) >> 3);
  EXPECT_EQ(adler32(d), adler_naive(d));  // crosses the 5552-byte reduction boundary
  EXPECT_EQ(crc32(d), crc_bitwise(d.data(), d.size()));
  // Continuation equals one pass.
  const std::span<const uint8_t> all(d);
  EXPECT_EQ(crc32(all.subspan(1000), crc32(all.first(1000))), crc32(all));
}

TEST(Png, SmallImageDecodesToTheSamePixels) {
  RgbImage img{3, 2, {}};
  for (int i = 0; i < 18; ++i) img.pixels.push_back(static_cast<uint8_t>(i * 13));
  auto png = encode_png(img);
  ASSERT_TRUE(png.ok()) << png.status().to_string();
  // 8 signature + IHDR (12 + 13) + IDAT (12 + 2 + 5 + 2 * (1 + 9) + 4) + IEND 12.
  EXPECT_EQ(png->size(), 8u + 25u + 12u + 31u + 12u);
  const RgbImage back = decode(*png);
  EXPECT_EQ(back.width, 3);
  EXPECT_EQ(back.height, 2);
  EXPECT_EQ(back.pixels, img.pixels);
}

TEST(Png, LargeImageUsesSeveralStoredBlocks) {
  RgbImage img{400, 300, {}};  // 300 * 1201 = 360300 raw bytes = 6 stored blocks
  for (int32_t y = 0; y < img.height; ++y) {
    for (int32_t x = 0; x < img.width; ++x) {
      img.pixels.push_back(static_cast<uint8_t>(x));
      img.pixels.push_back(static_cast<uint8_t>(y));
      img.pixels.push_back(static_cast<uint8_t>(x ^ y));
    }
  }
  auto png = encode_png(img);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(decode(*png).pixels, img.pixels);
}

TEST(Png, RejectsBadSizes) {
  auto r = encode_png(RgbImage{0, 5, {}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("width and height"), std::string::npos);
  r = encode_png(RgbImage{2, 2, std::vector<uint8_t>(11)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pixels.size() = 11"), std::string::npos);
}

TEST(Png, WriteFailsWithThePath) {
  RgbImage img{1, 1, {1, 2, 3}};
  const Status s = write_png(img, "/nonexistent-dir/x.png");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("/nonexistent-dir/x.png"), std::string::npos);
}

}  // namespace
}  // namespace packserve::benchclient
