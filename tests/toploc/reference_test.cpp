// Cross-check against an independent implementation: tests/toploc/reference_toploc.py builds the
// same proofs in plain Python (full sort, set-based modulus, Lagrange interpolation) from the
// spec, and its bytes must equal ours for several shapes, k values, tie-heavy inputs and chunks
// whose injective modulus is below p.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/hashing.h"
#include "toploc/proof.h"
#include "toploc_test_util.h"

namespace trellis::toploc {
namespace {

struct Case {
  std::string name;
  ProofConfig config;
  size_t hidden = 0;
  std::vector<uint16_t> rows;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"readme shape", {4, 3}, 16, test::random_rows(10 * 16, 1)});
  out.push_back({"default k, 70 rows", {}, 64, test::random_rows(70 * 64, 2)});
  out.push_back({"k 16, chunk 8", {16, 8}, 100, test::random_rows(33 * 100, 3, 0.01f)});
  out.push_back({"k 1", {1, 5}, 7, test::random_rows(12 * 7, 4)});
  out.push_back({"k 200", {200, 32}, 40, test::random_rows(32 * 40, 5, 3.0f)});
  // Few distinct magnitudes: the tie rule decides most of the top-k.
  {
    Case c{"ties", {32, 32}, 50, std::vector<uint16_t>(40 * 50)};
    const uint16_t few[] = {0x0000, 0x8000, 0x3F80, 0xBF80, 0x4000, 0xC000};
    std::mt19937_64 rng(6);
    for (auto& v : c.rows) v = few[rng() % 6];
    out.push_back(std::move(c));
  }
  // 32 x 4096 values per chunk, with top values 65497 (and 2 x 65496) apart: modulus below p.
  {
    Case c{"modulus below p", {}, 4096, test::random_rows(40 * 4096, 7)};
    c.rows[10] = test::to_bf16(40.0f);
    c.rows[10 + 65497] = test::to_bf16(-41.0f);
    c.rows[10 + 2 * 65496] = test::to_bf16(42.0f);
    out.push_back(std::move(c));
  }
  return out;
}

TEST(Reference, PythonImplementationProducesTheSameBytes) {
  const std::vector<Case> all = cases();
  const auto dir =
      std::filesystem::temp_directory_path() / ("toploc_reference_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "cases.txt", out = dir / "proofs.txt";
  {
    std::ofstream f(in);
    for (const Case& c : all) {
      f << c.config.k << ' ' << c.config.chunk_rows << ' ' << c.hidden;
      for (uint16_t v : c.rows) f << ' ' << v;
      f << '\n';
    }
  }
  const std::string script = std::string(TRELLIS_SOURCE_DIR) + "/tests/toploc/reference_toploc.py";
  const std::string cmd =
      "python3 '" + script + "' < '" + in.string() + "' > '" + out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  std::string line;
  size_t below_p = 0;
  for (const Case& c : all) {
    ASSERT_TRUE(std::getline(f, line)) << "no output for case " << c.name;
    const std::string ours = build_proof(c.rows, c.hidden, c.config);
    EXPECT_EQ(to_hex(ours), line) << c.name;
    EXPECT_EQ(ours.size(), chunk_count(c.rows.size() / c.hidden, c.config.chunk_rows) *
                               chunk_proof_bytes(c.config.k))
        << c.name;
    for (const ChunkProof& p : parse_proof(ours, c.config, c.name)) below_p += p.modulus < 65497;
  }
  EXPECT_GE(below_p, 1u);  // the modulus search was exercised
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trellis::toploc
