// Ed25519 identities (libsodium). The key file holds the 32-byte seed as 64 hex digits and a
// newline; the key pair is derived from it, so a file can be checked (and written by hand) easily.
#include "common/identity.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"

namespace trellis {
namespace {

void init_sodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw Error("libsodium failed to initialize", "identity");
}

std::string errno_text() { return std::strerror(errno); }

// The identity whose secret key derives from `seed` (32 bytes).
void keypair_from_seed(std::string_view seed, std::string& secret, std::string& address) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  unsigned char sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, reinterpret_cast<const unsigned char*>(seed.data()));
  secret.assign(reinterpret_cast<const char*>(sk), sizeof sk);
  address = to_hex({reinterpret_cast<const char*>(pk), sizeof pk});
  sodium_memzero(sk, sizeof sk);
}

// Writes `text` to `path` with mode 0600 so that no reader ever sees a partial or group-readable
// file: a temporary file is written and fsynced, then linked into place (failing, rather than
// replacing, when another process created the key first). Returns false in that case.
bool create_key_file(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (!path.parent_path().empty()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) fail(path.parent_path().string(), "cannot create the key directory: {}", ec.message());
  }
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::random_device{}());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(tmp, "cannot create the key file: {}", errno_text());
  ::fchmod(fd, 0600);  // whatever the umask
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const std::string write_error = written ? "" : errno_text();
  const bool synced = written && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced) {
    ::unlink(tmp.c_str());
    fail(tmp, "cannot write the key file: {}", written ? errno_text() : write_error);
  }
  const bool linked = ::link(tmp.c_str(), path.c_str()) == 0;
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (!linked && link_errno != EEXIST) {
    fail(path.string(), "cannot create the key file: {}", std::strerror(link_errno));
  }
  return linked;
}

}  // namespace

std::string load_or_create_secret(const std::filesystem::path& file,
                                  const std::function<std::string()>& fresh) {
  const std::string where = file.string();
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) {
    if (errno != ENOENT) fail(where, "cannot read the secret file: {}", errno_text());
    std::string text = fresh() + "\n";
    create_key_file(file, text);  // when another process won the race, load its secret
    sodium_memzero(text.data(), text.size());
    if (::stat(file.c_str(), &st) != 0)
      fail(where, "cannot read the secret file: {}", errno_text());
  }
  if (!S_ISREG(st.st_mode)) fail(where, "the secret file is not a regular file");
  if ((st.st_mode & 077) != 0) {
    fail(where,
         "the secret file is accessible to other users (mode {:04o}); its secret may have leaked. "
         "Run `chmod 600 {}` if it is safe to keep, or delete it to create a new one",
         st.st_mode & 07777, where);
  }
  if (st.st_size > 4096)
    fail(where, "the secret file is {} bytes; a secret has at most 4096", st.st_size);
  std::string text = read_file(file);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

Identity Identity::load_or_create(const std::filesystem::path& key_file) {
  init_sodium();
  const std::string where = key_file.string();
  std::string text = load_or_create_secret(key_file, [] {
    unsigned char seed[crypto_sign_SEEDBYTES];
    randombytes_buf(seed, sizeof seed);
    std::string hex = to_hex({reinterpret_cast<const char*>(seed), sizeof seed});
    sodium_memzero(seed, sizeof seed);
    return hex;
  });
  if (text.size() != 2 * crypto_sign_SEEDBYTES) {
    fail(where, "malformed key file: expected {} hex digits (an Ed25519 seed), found {} characters",
         2 * crypto_sign_SEEDBYTES, text.size());
  }
  std::string seed;
  try {
    seed = from_hex(text, where);
  } catch (const Error& e) {
    fail(where, "malformed key file: {}", e.what());
  }
  Identity id;
  keypair_from_seed(seed, id.secret_, id.address_);
  sodium_memzero(seed.data(), seed.size());
  return id;
}

Identity Identity::generate() {
  init_sodium();
  unsigned char seed[crypto_sign_SEEDBYTES];
  randombytes_buf(seed, sizeof seed);
  Identity id;
  keypair_from_seed({reinterpret_cast<const char*>(seed), sizeof seed}, id.secret_, id.address_);
  sodium_memzero(seed, sizeof seed);
  return id;
}

std::string Identity::sign_hex(std::string_view message) const {
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size(), reinterpret_cast<const unsigned char*>(secret_.data()));
  return to_hex({reinterpret_cast<const char*>(sig), sizeof sig});
}

bool verify_signature(const std::string& address_hex, std::string_view message,
                      const std::string& signature_hex) {
  if (address_hex.size() != 2 * crypto_sign_PUBLICKEYBYTES ||
      signature_hex.size() != 2 * crypto_sign_BYTES) {
    return false;
  }
  std::string pk, sig;
  try {
    pk = from_hex(address_hex, "address");
    sig = from_hex(signature_hex, "signature");
  } catch (const Error&) {
    return false;
  }
  init_sodium();
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(sig.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(),
                                     reinterpret_cast<const unsigned char*>(pk.data())) == 0;
}

}  // namespace trellis
