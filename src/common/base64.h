// Base64 (RFC 4648, standard alphabet, with '=' padding): how binary proofs and signatures travel
// inside JSON and text files.
//
// Decoding is strict, because its input comes from untrusted peers: no whitespace, no missing or
// extra padding, no characters outside the alphabet, and no non-zero bits in the last character
// (so every byte string has exactly one accepted encoding). Anything else is an Error.
#pragma once

#include <string>
#include <string_view>

namespace trellis {

std::string base64_encode(std::string_view bytes);
// Error naming `where` unless `text` is the canonical base64 encoding of some byte string.
std::string base64_decode(std::string_view text, const std::string& where);

}  // namespace trellis
