#include "rollout/parquet/encoding.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "rollout/parquet/levels.h"

namespace trellis::rollout::parquet {
namespace {

template <typename T>
void put_le(T v, std::string& out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

uint32_t get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

void encode_plain(const Values& values, size_t begin, size_t end, std::string& out) {
  std::visit(
      [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        for (size_t i = begin; i < end; ++i) {
          if constexpr (std::is_same_v<T, std::string>) {
            put_le(static_cast<uint32_t>(v[i].size()), out);
            out += v[i];
          } else {
            put_le(v[i], out);
          }
        }
      },
      values);
}

size_t decode_plain(std::string_view in, size_t count, Values& out, const std::string& where) {
  return std::visit(
      [&](auto& v) -> size_t {
        using T = typename std::decay_t<decltype(v)>::value_type;
        if constexpr (std::is_same_v<T, std::string>) {
          size_t pos = 0;
          for (size_t i = 0; i < count; ++i) {
            if (in.size() - pos < 4) fail(where, "PLAIN byte array {} of {} ends early", i, count);
            const uint32_t n = get_u32(in.data() + pos);
            pos += 4;
            if (n > in.size() - pos)
              fail(where, "PLAIN byte array {} claims {} bytes, {} left", i, n, in.size() - pos);
            v.emplace_back(in.substr(pos, n));
            pos += n;
          }
          return pos;
        } else {
          if (count > in.size() / sizeof(T))
            fail(where, "PLAIN data holds {} bytes, too few for {} values of {} bytes", in.size(),
                 count, sizeof(T));
          const size_t old = v.size();
          v.resize(old + count);
          if (count > 0) std::memcpy(v.data() + old, in.data(), count * sizeof(T));
          return count * sizeof(T);
        }
      },
      out);
}

void decode_dictionary_indices(std::string_view in, size_t count, const Values& dictionary,
                               Values& out, const std::string& where) {
  std::vector<uint32_t> indices;
  decode_dictionary_index_stream(in, count, value_count(dictionary), indices, where);
  expand_dictionary(dictionary, indices, out);
}

uint64_t plain_decoded_bytes(const Values& like, size_t in_size, size_t count) {
  return std::visit(
      [&](const auto& v) -> uint64_t {
        using T = typename std::decay_t<decltype(v)>::value_type;
        if constexpr (std::is_same_v<T, std::string>) {
          // Each value is a 4-byte length and its bytes: at most in_size / 4 of them.
          const uint64_t n = std::min<uint64_t>(count, in_size / 4);
          return n * kStringValueBytes + (in_size - 4 * n);
        } else {
          return std::min<uint64_t>(count, in_size / sizeof(T)) * sizeof(T);
        }
      },
      like);
}

void decode_dictionary_index_stream(std::string_view in, size_t count, size_t dict_size,
                                    std::vector<uint32_t>& indices, const std::string& where) {
  indices.clear();
  if (count == 0) return;
  if (in.empty()) fail(where, "dictionary-encoded page has no bit width");
  const int width = static_cast<uint8_t>(in[0]);
  if (width > 32) fail(where, "dictionary index bit width {} is above 32", width);
  decode_hybrid(in.substr(1), width, count, indices, where);
  for (uint32_t index : indices)
    if (index >= dict_size)
      fail(where, "dictionary index {} is past the dictionary's {} entries", index, dict_size);
}

uint64_t dictionary_expansion_bytes(const Values& dictionary,
                                    const std::vector<uint32_t>& indices) {
  return std::visit(
      [&](const auto& dict) -> uint64_t {
        using T = typename std::decay_t<decltype(dict)>::value_type;
        if constexpr (std::is_same_v<T, std::string>) {
          uint64_t bytes = 0;
          for (uint32_t index : indices) bytes += kStringValueBytes + dict[index].size();
          return bytes;
        } else {
          return static_cast<uint64_t>(indices.size()) * sizeof(T);
        }
      },
      dictionary);
}

void expand_dictionary(const Values& dictionary, const std::vector<uint32_t>& indices,
                       Values& out) {
  std::visit(
      [&](auto& v) {
        using Vec = std::decay_t<decltype(v)>;
        const Vec& dict = std::get<Vec>(dictionary);
        for (uint32_t index : indices) v.push_back(dict[index]);
      },
      out);
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

}  // namespace trellis::rollout::parquet
