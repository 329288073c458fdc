// Encodes every string of a corpus with Hugging Face `tokenizers` (its Node binding) so that the C++
// interop test can compare our tokenizer against the reference implementation.
//
//   node tests/interop/hf_tokenize.js TOKENIZER_JSON CORPUS_JSON
//
// CORPUS_JSON is a JSON array of strings. Prints one JSON object on stdout:
//   {"ids": [[...], ...], "roundtrips": [true, ...]}
// ids[i]: the ids of string i with add_special_tokens=false (no BOS/EOS added; added tokens
// written in the text, such as <|im_end|>, are still matched as those tokens).
// roundtrips[i]: whether HF's decode(ids[i]) (special tokens kept) gives string i back exactly.
'use strict';

const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [tokenizerPath, corpusPath] = process.argv.slice(2);
  if (!tokenizerPath || !corpusPath) {
    throw new Error('usage: node hf_tokenize.js TOKENIZER_JSON CORPUS_JSON');
  }
  const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
  if (!Array.isArray(corpus) || !corpus.every((s) => typeof s === 'string')) {
    throw new Error(`${corpusPath}: expected a JSON array of strings`);
  }
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const ids = [];
  const roundtrips = [];
  for (const text of corpus) {
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    const tokenIds = Array.from(encoding.getIds());
    ids.push(tokenIds);
    roundtrips.push((await tokenizer.decode(tokenIds, false)) === text);
  }
  process.stdout.write(JSON.stringify({ ids, roundtrips }) + '\n');
}

main().catch((err) => {
  console.error(`hf_tokenize.js: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
