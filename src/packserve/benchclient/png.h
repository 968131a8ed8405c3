// png.h: a minimal PNG encoder (RGB, 8 bits per channel) written for the benchmark plots, so
// packserve writes images without any image library.
//
// Format: signature, IHDR (color type 2, bit depth 8, no interlace), one IDAT holding a zlib
// stream (RFC 1950) whose deflate data (RFC 1951) is a sequence of *stored* blocks (BTYPE 00,
// at most 65535 bytes each), IEND. Every scanline has filter byte 0 (None). The image is larger
// than a compressed one but exact and trivially checkable: png_test.cc decodes it with an
// independent reader.
// Checksums: CRC-32 (ISO 3309 / ITU-T V.42, polynomial 0xEDB88320 reflected) over each
// chunk's type and data; Adler-32 over the uncompressed zlib payload.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::benchclient {

// CRC-32 of `data`, continuing from `crc` (0 for a fresh checksum).
uint32_t crc32(std::span<const uint8_t> data, uint32_t crc = 0);
// Adler-32 of `data` (1 for a fresh checksum).
uint32_t adler32(std::span<const uint8_t> data, uint32_t adler = 1);

// A zlib stream of `data` in stored deflate blocks (header 0x78 0x01, Adler-32 trailer).
std::vector<uint8_t> zlib_store(std::span<const uint8_t> data);

// An RGB image: pixels row-major, 3 bytes per pixel.
struct RgbImage {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> pixels;  // size = width * height * 3
};

// The PNG file bytes of `image`. kInvalidArgument when width or height < 1 or the pixel
// buffer's size is not width * height * 3.
Result<std::vector<uint8_t>> encode_png(const RgbImage& image);
// encode_png, written to `path`; kInternal naming the path when the write fails.
Status write_png(const RgbImage& image, const std::string& path);

}  // namespace packserve::benchclient
