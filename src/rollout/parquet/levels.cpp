#include "rollout/parquet/levels.h"

#include <algorithm>

#include "common/error.h"

namespace trellis::rollout::parquet {
namespace {

void put_uleb128(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

uint64_t get_uleb128(std::string_view in, size_t& pos, const std::string& where) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= in.size()) fail(where, "RLE/bit-packed data ends inside a run header");
    const auto byte = static_cast<uint8_t>(in[pos++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  fail(where, "RLE/bit-packed run header is longer than 10 bytes");
}

size_t run_length(const std::vector<uint32_t>& v, size_t i) {
  size_t j = i + 1;
  while (j < v.size() && v[j] == v[i]) ++j;
  return j - i;
}

}  // namespace

int bit_width_for(uint32_t max_value) {
  int w = 0;
  while (w < 32 && (max_value >> w) != 0) ++w;
  return w;
}

void encode_hybrid(const std::vector<uint32_t>& values, int bit_width, std::string& out) {
  const size_t value_bytes = (static_cast<size_t>(bit_width) + 7) / 8;
  size_t i = 0;
  while (i < values.size()) {
    const size_t run = run_length(values, i);
    if (run >= 8) {
      put_uleb128(static_cast<uint64_t>(run) << 1, out);
      for (size_t b = 0; b < value_bytes; ++b)
        out.push_back(static_cast<char>((values[i] >> (8 * b)) & 0xff));
      i += run;
      continue;
    }
    // Bit-packed groups of 8 until a long run starts at a group boundary.
    const size_t start = i;
    size_t groups = 0;
    do {
      ++groups;
      i += 8;
    } while (i < values.size() && run_length(values, i) < 8);
    put_uleb128((static_cast<uint64_t>(groups) << 1) | 1, out);
    const size_t begin = out.size();
    out.append(groups * static_cast<size_t>(bit_width), '\0');
    for (size_t k = 0; k < groups * 8; ++k) {
      const uint64_t v = start + k < values.size() ? values[start + k] : 0;
      const size_t bit = k * static_cast<size_t>(bit_width);
      for (int b = 0; b < bit_width; ++b)
        if ((v >> b) & 1) out[begin + (bit + b) / 8] |= static_cast<char>(1u << ((bit + b) % 8));
    }
  }
}

size_t decode_hybrid(std::string_view in, int bit_width, size_t count, std::vector<uint32_t>& out,
                     const std::string& where) {
  if (bit_width < 0 || bit_width > 32) fail(where, "bit width {} is out of range", bit_width);
  const size_t value_bytes = (static_cast<size_t>(bit_width) + 7) / 8;
  const uint64_t max_value = bit_width == 32 ? 0xffffffffull : (1ull << bit_width) - 1;
  size_t pos = 0, done = 0;
  while (done < count) {
    const uint64_t header = get_uleb128(in, pos, where);
    const size_t wanted = count - done;
    if (header & 1) {
      const uint64_t groups = header >> 1;
      const uint64_t available = in.size() - pos;
      // Values actually present: cut at what is asked for, and at the bytes there are.
      const uint64_t take = std::min<uint64_t>(groups * 8, wanted);
      if (groups > (uint64_t{1} << 40) ||
          (take * static_cast<uint64_t>(bit_width) + 7) / 8 > available)
        fail(where, "bit-packed run of {} groups runs past the end of its data", groups);
      const auto* data = reinterpret_cast<const uint8_t*>(in.data() + pos);
      for (uint64_t k = 0; k < take; ++k) {
        const uint64_t bit = k * static_cast<uint64_t>(bit_width);
        uint64_t v = 0;
        for (int b = 0; b < bit_width; ++b)
          v |= static_cast<uint64_t>((data[(bit + b) / 8] >> ((bit + b) % 8)) & 1) << b;
        out.push_back(static_cast<uint32_t>(v));
      }
      done += take;
      pos += static_cast<size_t>(
          std::min<uint64_t>(groups * static_cast<uint64_t>(bit_width), available));
    } else {
      const uint64_t run = header >> 1;
      if (in.size() - pos < value_bytes) fail(where, "RLE run ends before its value");
      uint64_t v = 0;
      for (size_t b = 0; b < value_bytes; ++b)
        v |= static_cast<uint64_t>(static_cast<uint8_t>(in[pos + b])) << (8 * b);
      pos += value_bytes;
      if (v > max_value) fail(where, "RLE value {} does not fit in {} bits", v, bit_width);
      const size_t take = static_cast<size_t>(std::min<uint64_t>(run, wanted));
      out.insert(out.end(), take, static_cast<uint32_t>(v));
      done += take;
    }
  }
  return pos;
}

void encode_levels_v1(const std::vector<uint32_t>& levels, int bit_width, std::string& out) {
  std::string data;
  encode_hybrid(levels, bit_width, data);
  const auto n = static_cast<uint32_t>(data.size());
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((n >> (8 * b)) & 0xff));
  out += data;
}

size_t decode_levels_v1(std::string_view in, int bit_width, size_t count,
                        std::vector<uint32_t>& out, const std::string& where) {
  if (in.size() < 4) fail(where, "page ends before its level data's length");
  uint32_t n = 0;
  for (int b = 0; b < 4; ++b) n |= static_cast<uint32_t>(static_cast<uint8_t>(in[b])) << (8 * b);
  if (n > in.size() - 4)
    fail(where, "level data of {} bytes runs past the end of the page ({} bytes left)", n,
         in.size() - 4);
  decode_hybrid(in.substr(4, n), bit_width, count, out, where);
  return 4 + static_cast<size_t>(n);
}

}  // namespace trellis::rollout::parquet
