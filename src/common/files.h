// File helpers: whole-file reads, atomic writes (temp file + fsync + rename) and read-only
// memory maps. Every failure is an Error that names the path and the system's reason.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace trellis {

std::string read_file(const std::filesystem::path& path);

// Writes `data` to `path` so that readers see either the old file or the whole new one: the
// bytes go to a temporary file in the same directory, are flushed to disk, then renamed over.
void write_file_atomic(const std::filesystem::path& path, std::string_view data);

// A file written to a temporary name in the same directory and renamed over `path` by commit()
// (after fsync), so readers see the old file or the whole new one; removed if never committed.
// Lets large outputs stream to disk in pieces.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::filesystem::path& path);  // creates parent directories
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void commit();

 private:
  std::filesystem::path path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// A read-only memory map of a whole file. Movable, not copyable; unmaps on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace trellis
