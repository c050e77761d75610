// posenc/core/file.hpp: atomic whole-file writes and checksums.
//
// Every file posenc writes (tables, .npy outputs, checkpoints, reports) goes through
// write_file_atomic: the bytes go to "<path>.tmp.<pid>", are fsync'ed, then renamed over
// <path>. A failure at any point leaves either the old file or none, never a partial one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace posenc {

// Writes `bytes` to `path` atomically (temporary file, fsync, rename). Throws io_error.
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);
void write_file_atomic(const std::string& path, const std::string& text);

// Reads a whole file. Throws io_error naming the path when it cannot be opened or read.
std::vector<std::byte> read_file(const std::string& path);

// CRC-32 (IEEE 802.3 polynomial 0xEDB88320, reflected, init and final xor 0xFFFFFFFF),
// the same value as zlib's crc32(). crc32("123456789") == 0xCBF43926.
uint32_t crc32(std::span<const std::byte> bytes, uint32_t crc = 0);

}  // namespace posenc
