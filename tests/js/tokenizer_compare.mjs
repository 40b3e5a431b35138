// Encodes every line of a corpus with the reference tokenizers, for the C++ tests to compare with:
//   - @lenml/tokenizers (a JS port of transformers.js tokenizers), always;
//   - `tokenizers` (Hugging Face's Rust library through its Node binding), when installed.
//
// usage: node tokenizer_compare.mjs NODE_MODULES TOKENIZER_DIR CORPUS_JSONL
//   TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json.
//   CORPUS_JSONL: one JSON string per line; lines starting with // and blank lines are skipped.
// Prints one JSON object on stdout:
//   {"hf_available": bool, "hf_error": string?, "lines": [{"text", "js": [ids], "js_decoded",
//    "js_decoded_skip", "hf": [ids]?, "hf_decoded"?, "hf_decoded_skip"?}, ...]}
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [nodeModules, tokDir, corpusPath] = process.argv.slice(2);
if (!nodeModules || !tokDir || !corpusPath) {
  console.error("usage: node tokenizer_compare.mjs NODE_MODULES TOKENIZER_DIR CORPUS_JSONL");
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, "noop.js"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));
const js = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

let hf = null;
let hfError = null;
try {
  const { Tokenizer } = require("tokenizers");
  hf = Tokenizer.fromFile(path.join(tokDir, "tokenizer.json"));
} catch (e) {
  hfError = String(e && e.message ? e.message : e);
}

const texts = fs
  .readFileSync(corpusPath, "utf8")
  .split("\n")
  .filter((l) => l.length > 0 && !l.startsWith("//"))
  .map((l) => JSON.parse(l));

const lines = [];
for (const text of texts) {
  const ids = js.encode(text, { add_special_tokens: false });
  const row = {
    text,
    js: ids,
    js_decoded: js.decode(ids, { skip_special_tokens: false }),
    js_decoded_skip: js.decode(ids, { skip_special_tokens: true }),
  };
  if (hf) {
    const enc = await hf.encode(text, null, { addSpecialTokens: false });
    const hfIds = Array.from(enc.getIds());
    row.hf = hfIds;
    row.hf_decoded = await hf.decode(hfIds, false);
    row.hf_decoded_skip = await hf.decode(hfIds, true);
  }
  lines.push(row);
}
process.stdout.write(JSON.stringify({ hf_available: hf !== null, hf_error: hfError, lines }));
