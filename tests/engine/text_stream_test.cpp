// Tests for TextStream: UTF-8 characters split across tokens are held back until complete, stop
// strings end the text (also when they span tokens), possible stop-string prefixes are held back
// and released when they turn out not to be one, special tokens stand for no text, and the deltas
// always add up to the text.
#include "engine/text_stream.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

namespace trellis::engine {
namespace {

namespace fs = std::filesystem;

// The byte-level tokenizer of `trellis model init`: token id b is byte b; specials from 256.
class TextStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "trellis_text_stream_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    model::write_byte_level_tokenizer(dir_, "chatml");
    tok_ = new model::Tokenizer(model::Tokenizer::load(dir_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    fs::remove_all(dir_);
  }

  static std::vector<int32_t> bytes(const std::string& s) {
    std::vector<int32_t> ids;
    for (char c : s) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }

  // Pushes the ids and returns every delta (finish() last).
  static std::vector<std::string> deltas(TextStream& s, const std::vector<int32_t>& ids) {
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(s.push(id));
    out.push_back(s.finish());
    return out;
  }

  static std::string joined(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += p;
    return out;
  }

  static fs::path dir_;
  static model::Tokenizer* tok_;
};
fs::path TextStreamTest::dir_;
model::Tokenizer* TextStreamTest::tok_ = nullptr;

TEST_F(TextStreamTest, HoldsBackIncompleteUtf8Characters) {
  TextStream s(*tok_);
  const std::string euro = "\xe2\x82\xac";  // U+20AC, three bytes
  auto d = deltas(s, bytes("a" + euro + "b"));
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[0], "a");
  EXPECT_EQ(d[1], "");
  EXPECT_EQ(d[2], "");
  EXPECT_EQ(d[3], euro);
  EXPECT_EQ(d[4], "b");
  EXPECT_EQ(d[5], "");
  EXPECT_EQ(s.text(), "a" + euro + "b");
  EXPECT_EQ(s.offsets(), (std::vector<int64_t>{0, 1, 1, 1, 2}));  // in characters
  EXPECT_FALSE(s.stopped());
}

TEST_F(TextStreamTest, AnIncompleteCharacterAtTheEndIsFlushedByFinish) {
  TextStream s(*tok_);
  EXPECT_EQ(s.push('x'), "x");
  EXPECT_EQ(s.push(0xf0), "");  // a 4-byte lead
  EXPECT_EQ(s.push(0x9f), "");
  EXPECT_EQ(s.finish(), "\xf0\x9f");
  // A stray continuation byte can never complete: it is not held back.
  TextStream t(*tok_);
  EXPECT_EQ(t.push(0x80), "\x80");
}

TEST_F(TextStreamTest, SpecialTokensStandForNoText) {
  TextStream s(*tok_);
  const int32_t im_end = *tok_->token_to_id("<|im_end|>");
  auto d = deltas(s, {'h', 'i', im_end});
  EXPECT_EQ(joined(d), "hi");
  EXPECT_EQ(s.tokens(), 3);
}

TEST_F(TextStreamTest, StopStringEndsTheTextBeforeIt) {
  TextStream s(*tok_, {"STOP", "\n\n"});
  std::vector<std::string> d;
  for (char c : std::string("ab\ncdST")) d.push_back(s.push(c));
  EXPECT_EQ(joined(d), "ab\ncd");  // "\n" and "ST" were held back until they could not stop
  EXPECT_EQ(s.push('O'), "");
  EXPECT_EQ(s.push('P'), "");  // completes "STOP"
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push('z'), "");  // nothing after a stop
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "ab\ncd");
  EXPECT_EQ(s.tokens(), 9);  // up to the token that completed the stop string
}

TEST_F(TextStreamTest, TheEarliestStopStringWins) {
  TextStream s(*tok_, {"cd", "bc"});
  EXPECT_EQ(s.push('a'), "a");
  EXPECT_EQ(s.push('b'), "");  // could start "bc"
  EXPECT_EQ(s.push('c'), "");  // "bc" wins over "cd": it starts first
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "a");
}

TEST_F(TextStreamTest, HeldBackPrefixIsReleasedAtTheEnd) {
  TextStream s(*tok_, {"!!!"});
  auto d = deltas(s, bytes("ok!!"));
  EXPECT_EQ(d[0], "o");
  EXPECT_EQ(d[1], "k");
  EXPECT_EQ(d[2], "");
  EXPECT_EQ(d[3], "");
  EXPECT_EQ(d[4], "!!");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.text(), "ok!!");
}

}  // namespace
}  // namespace trellis::engine
