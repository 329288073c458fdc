#include "common/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/error.h"

namespace trellis {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open file: " + errno_text(), path.string());
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw Error("cannot read file", path.string());
  return std::move(out).str();
}

void write_file_atomic(const std::filesystem::path& path, std::string_view data) {
  AtomicFileWriter out(path);
  out.write(data.data(), data.size());
  out.commit();
}

AtomicFileWriter::AtomicFileWriter(const std::filesystem::path& path) : path_(path) {
  std::filesystem::path dir = path.parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("cannot create directory: " + ec.message(), dir.string());
  }
  tmp_ = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
         std::to_string(std::random_device{}());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create file: " + errno_text(), tmp_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write file: " + errno_text(), tmp_);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  int rc = ::fsync(fd_);
  std::string why = rc == 0 ? "" : errno_text();
  if (::close(fd_) != 0 && rc == 0) {
    rc = -1;
    why = errno_text();
  }
  fd_ = -1;
  if (rc != 0) throw Error("cannot flush file: " + why, tmp_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw Error("cannot rename into place: " + errno_text(), path_.string());
  }
  committed_ = true;
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open file: " + errno_text(), path.string());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    throw Error("cannot stat file: " + why, path.string());
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = errno_text();
      ::close(fd);
      throw Error("cannot map file: " + why, path.string());
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

}  // namespace trellis
