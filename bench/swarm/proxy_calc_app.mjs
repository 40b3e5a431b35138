// The scripted application of bench/swarm/proxy_learning.py, in Node with the official OpenAI SDK: USERS
// users at once, each asking calc questions through `ajet proxy` with the calculator tool declared,
// running the tool calls itself (examples/node_agent/calculator.mjs, the calc task's calculator) and
// asking again, until REQUESTS requests were sent. It knows nothing of training: no rewards, no task ids,
// never the true answers. Every answer must be a well-formed chat.completion; the rest are counted.
//
// usage: node bench/swarm/proxy_calc_app.mjs NODE_MODULES JOB.json SUMMARY.json
//   JOB.json: {"base_url": "http://127.0.0.1:PORT/v1", "requests": 480, "users": 8,
//              "questions": [{"messages": [...], "tools": [...]}, ...]}
//   SUMMARY.json, written at the end: {"sdk", "sent", "answers", "well_formed", "malformed", "failed",
//     "problems": [text, ...] (the first 20), "seconds",
//     "conversations": [{"question": index, "messages": [...]}, ...] (the finished ones, in order),
//     "tool_results": [[expression, result], ...]}
// Exit 0 iff every request got a well-formed answer; 2 on bad usage.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

import { calculator, MAX_TOOL_CALLS } from "../../examples/node_agent/calculator.mjs";

const kMaxTurns = 4; // requests per conversation: up to 3 calculator rounds, then the answer
const kRequestTimeoutMs = 900_000; // a request waits for N answers and the judge on a busy CPU
const kFinishReasons = ["stop", "tool_calls", "length"];

const [nodeModules, jobFile, summaryFile] = process.argv.slice(2);
if (!nodeModules || !jobFile || !summaryFile) {
  console.error("usage: node proxy_calc_app.mjs NODE_MODULES JOB.json SUMMARY.json");
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, "noop.js"));
const openaiModule = require("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;
const sdkVersion = JSON.parse(fs.readFileSync(path.join(nodeModules, "openai", "package.json"), "utf8")).version;
const job = JSON.parse(fs.readFileSync(jobFile, "utf8"));

// An application's own key and model name: the proxy ignores both. No retries: a retried request
// would hide a lost one and send more than REQUESTS.
const client = new OpenAI({ baseURL: job.base_url, apiKey: "sk-the-apps-own-key", maxRetries: 0,
                            timeout: kRequestTimeoutMs });

// '' when `r` is a well-formed chat.completion, else what is wrong with it.
function malformation(r) {
  const choice = r?.choices?.[0];
  const message = choice?.message;
  if (r?.object !== "chat.completion") return `object ${JSON.stringify(r?.object)}`;
  if (!message) return "no choices[0].message";
  if (message.role !== "assistant") return `role ${JSON.stringify(message.role)}`;
  if (!kFinishReasons.includes(choice.finish_reason)) return `finish_reason ${JSON.stringify(choice.finish_reason)}`;
  if (message.content != null && typeof message.content !== "string") return "content is not a string";
  for (const call of message.tool_calls ?? []) {
    if (call?.type !== "function" || typeof call.function?.arguments !== "string") return "tool_calls";
  }
  return "";
}

class Exhausted extends Error {} // all REQUESTS were sent: the conversation in progress is left unfinished

const tally = { sent: 0, answers: 0, well_formed: 0, malformed: 0, failed: 0, problems: [] };
const conversations = [];
const toolResults = [];
let nextQuestion = 0;

function problem(text) {
  if (tally.problems.length < 20) tally.problems.push(text.slice(0, 300));
}

// One request; the assistant message, or null when the answer failed or was malformed (counted).
async function send(messages, tools) {
  if (tally.sent >= job.requests) throw new Exhausted();
  tally.sent++;
  let r;
  try {
    r = await client.chat.completions.create({ model: "calc-assistant", messages, tools });
  } catch (e) {
    if (e instanceof OpenAI.APIError) { // HTTP errors, connection errors and timeouts
      tally.failed++;
      problem(`${e.constructor.name}${e.status ? ` (HTTP ${e.status})` : ""}: ${e.message}`);
    } else { // a 200 whose body the SDK could not parse
      tally.answers++;
      tally.malformed++;
      problem(`unparsable answer: ${e.message}`);
    }
    return null;
  }
  tally.answers++;
  const wrong = malformation(r);
  if (wrong) {
    tally.malformed++;
    problem(`malformed answer (${wrong}): ${JSON.stringify(r).slice(0, 200)}`);
    return null;
  }
  tally.well_formed++;
  return r.choices[0].message;
}

// The calculator's reply to one call, as the application runs it (past MAX_TOOL_CALLS: refused).
function runTool(call, calls) {
  let args;
  try {
    args = JSON.parse(call.function.arguments || "{}");
  } catch {
    args = null;
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) return "error: arguments are not a JSON object";
  if (calls > MAX_TOOL_CALLS) return `error: tool call limit reached (${MAX_TOOL_CALLS})`;
  const expression = "expression" in args ? String(args.expression) : "";
  const result = calculator(expression);
  toolResults.push([expression, result]);
  return result;
}

// One calc conversation: the model may call the calculator (at most 3 times), then answers.
async function converse(question) {
  const messages = question.messages.map((m) => ({ ...m }));
  let calls = 0;
  for (let turn = 0; turn < kMaxTurns; turn++) {
    const message = await send(messages, question.tools);
    if (message === null) break;
    const kept = { role: message.role, content: message.content ?? null };
    if (message.tool_calls?.length) kept.tool_calls = message.tool_calls;
    messages.push(kept);
    if (!message.tool_calls?.length) break;
    for (const call of message.tool_calls) {
      calls++;
      messages.push({ role: "tool", tool_call_id: call.id ?? "", content: runTool(call, calls) });
    }
    if (calls > MAX_TOOL_CALLS) break;
  }
  return messages;
}

// One user: the next question, until the requests are spent.
async function user() {
  while (tally.sent < job.requests) {
    const index = nextQuestion++ % job.questions.length;
    try {
      const messages = await converse(job.questions[index]);
      conversations.push({ question: index, messages });
    } catch (e) {
      if (e instanceof Exhausted) return;
      throw e;
    }
  }
}

const started = Date.now();
await Promise.all(Array.from({ length: job.users }, user));
const summary = { sdk: `openai ${sdkVersion}`, ...tally, seconds: (Date.now() - started) / 1000,
                  conversations, tool_results: toolResults };
fs.writeFileSync(summaryFile, JSON.stringify(summary));
console.error(`proxy_calc_app: ${tally.sent} requests sent, ${tally.answers} answers, ${tally.well_formed} ` +
              `well-formed, ${tally.malformed} malformed, ${tally.failed} failed, ${conversations.length} ` +
              `conversations finished in ${summary.seconds.toFixed(0)} s`);
process.exit(tally.well_formed === tally.sent ? 0 : 1);
