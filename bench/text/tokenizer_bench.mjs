// The JS half of bench/text/tokenizer_bench: encodes the same documents with @lenml/tokenizers (the
// JS port of transformers.js tokenizers) and with Hugging Face's `tokenizers` (Rust, Node binding),
// and prints their best wall and CPU time (whole process, all threads) over ROUNDS passes as JSON.
//
// usage: node tokenizer_bench.mjs NODE_MODULES TOKENIZER_DIR DOCS_JSONL ROUNDS
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [nodeModules, tokDir, docsPath, roundsArg] = process.argv.slice(2);
const rounds = Number(roundsArg || 3);
const require = createRequire(path.join(nodeModules, "noop.js"));
const docs = fs.readFileSync(docsPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

async function timeIt(encodeAll) {
  let best = Infinity;
  let bestCpu = Infinity;
  let tokens = 0;
  for (let r = 0; r < rounds; ++r) {
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    tokens = await encodeAll();
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const c = process.cpuUsage(c0);
    best = Math.min(best, s);
    bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
  }
  return { best_s: best, best_cpu_s: bestCpu, tokens };
}

const out = {};
{
  const { TokenizerLoader } = require("@lenml/tokenizers");
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));
  const js = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  out.lenml = await timeIt(async () => {
    let n = 0;
    for (const d of docs) n += js.encode(d, { add_special_tokens: false }).length;
    return n;
  });
}
try {
  const { Tokenizer } = require("tokenizers");
  const hf = Tokenizer.fromFile(path.join(tokDir, "tokenizer.json"));
  out.hf = await timeIt(async () => {
    let n = 0;
    for (const d of docs) n += (await hf.encode(d, null, { addSpecialTokens: false })).getIds().length;
    return n;
  });
} catch (e) {
  out.hf_error = String(e && e.message ? e.message : e);
}
process.stdout.write(JSON.stringify(out));
