// The official Anthropic JS SDK (@anthropic-ai/sdk, pinned in tests/js/package.json) against a running
// ajet-swarm's /v1/messages: every response and stream must parse without errors, and (mode "echo",
// with ajet-echo-engine, whose answer is the last user message) carry exactly the expected text, tool
// use blocks, stop reasons and usage. Mode "real" (the real ajet-engine, random model) checks shapes.
//
// usage: node anthropic_sdk_swarm.mjs NODE_MODULES MODE BASE_URL TRAIN_KEY EVAL_KEY
// BASE_URL is claim_episode's openai_base_url (".../v1"); the SDK adds /v1/messages itself.
// Prints one JSON object: {"ok": bool, "checks": [{"name", "ok", "detail"?}]}; exit 0 iff every check passed.
import path from "node:path";
import { createRequire } from "node:module";

import { check, eq, expect, report } from "./checks.mjs";

const [nodeModules, mode, openaiBaseURL, trainKey, evalKey] = process.argv.slice(2);
if (!nodeModules || !["echo", "real"].includes(mode) || !openaiBaseURL || !trainKey || !evalKey) {
  console.error("usage: node anthropic_sdk_swarm.mjs NODE_MODULES echo|real BASE_URL TRAIN_KEY EVAL_KEY");
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, "noop.js"));
const sdk = require("@anthropic-ai/sdk");
const Anthropic = sdk.Anthropic ?? sdk.default;

const echo = mode === "echo";
const baseURL = openaiBaseURL.replace(/\/v1\/?$/, "");
const train = new Anthropic({ baseURL, apiKey: trainKey, maxRetries: 0, timeout: 120_000 });
const evalClient = new Anthropic({ baseURL, apiKey: evalKey, maxRetries: 0, timeout: 120_000 });
const model = "claude-agentjet";
const maxTokens = echo ? 200 : 8;
const TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>';
const tools = [{
  name: "calculator",
  description: "Evaluates an arithmetic expression",
  input_schema: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
}];
const user = (content) => [{ role: "user", content }];

function messageOk(m) {
  eq(m.type, "message", "type");
  eq(m.role, "assistant", "role");
  expect(typeof m.id === "string" && m.id.startsWith("msg_"), `id ${m.id}`);
  expect(Array.isArray(m.content) && m.content.length > 0, `content ${JSON.stringify(m.content)}`);
  expect(["end_turn", "max_tokens", "stop_sequence", "tool_use"].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
  expect(m.usage && m.usage.input_tokens > 0 && m.usage.output_tokens > 0, `usage ${JSON.stringify(m.usage)}`);
}
const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

await check("messages.create", async () => {
  const m = await train.messages.create({ model, max_tokens: maxTokens, system: "Be brief.", messages: user("hello swarm") });
  messageOk(m);
  if (echo) {
    eq(textOf(m), "hello swarm", "text");
    eq(m.stop_reason, "end_turn", "stop_reason");
  }
});

await check("messages.stream: text events and finalMessage", async () => {
  const stream = train.messages.stream({ model, max_tokens: maxTokens, messages: user("one two three four") });
  let deltas = "", pieces = 0;
  stream.on("text", (t) => { deltas += t; pieces += 1; });
  const final = await stream.finalMessage();
  messageOk(final);
  eq(textOf(final), deltas, "finalMessage text = text events");
  if (echo) {
    eq(deltas, "one two three four", "streamed text");
    expect(pieces > 1, `token by token (got ${pieces} text events)`);
  }
});

await check("create({stream: true}): the raw event order", async () => {
  const stream = await evalClient.messages.create({ model, max_tokens: maxTokens, stream: true, messages: user("raw events") });
  const types = [];
  for await (const event of stream) types.push(event.type);
  eq(types.slice(0, 2), ["message_start", "content_block_start"], "first events");
  eq(types.slice(-3), ["content_block_stop", "message_delta", "message_stop"], "last events");
});

await check("tool_use (non-streaming) and the tool_result turn", async () => {
  const m = await train.messages.create({ model, max_tokens: maxTokens, tools, messages: user(echo ? TOOL_CALL : "use a tool") });
  messageOk(m);
  if (!echo) return;
  eq(m.stop_reason, "tool_use", "stop_reason");
  const use = m.content.find((b) => b.type === "tool_use");
  expect(use, `a tool_use block in ${JSON.stringify(m.content)}`);
  eq(use.name, "calculator", "name");
  eq(use.input, { expression: "6*7" }, "input");
  const next = await train.messages.create({
    model, max_tokens: maxTokens, tools,
    messages: [
      { role: "user", content: "compute 6*7" },
      { role: "assistant", content: m.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "42" }] },
    ],
  });
  messageOk(next);
  expect(textOf(next).includes("42"), `the echoed tool result: ${textOf(next)}`);
});

await check("tool_use (streaming, SDK accumulation of input_json_delta)", async () => {
  const stream = train.messages.stream({ model, max_tokens: maxTokens, tools, messages: user(echo ? TOOL_CALL : "use a tool") });
  const final = await stream.finalMessage();
  messageOk(final);
  if (!echo) return;
  eq(final.stop_reason, "tool_use", "stop_reason");
  const use = final.content.find((b) => b.type === "tool_use");
  expect(use, `a tool_use block in ${JSON.stringify(final.content)}`);
  eq(use.input, { expression: "6*7" }, "input parsed from the streamed JSON");
});

await check("stop_sequences", async () => {
  const m = await evalClient.messages.create({
    model, max_tokens: maxTokens, stop_sequences: ["STOP"], messages: user(echo ? "keep this STOP not this" : "hi"),
  });
  messageOk(m);
  if (echo) {
    eq(textOf(m), "keep this ", "text cut before the sequence");
    eq(m.stop_reason, "stop_sequence", "stop_reason");
    eq(m.stop_sequence, "STOP", "stop_sequence");
  }
});

await check("errors become typed SDK exceptions", async () => {
  const forged = new Anthropic({ baseURL, apiKey: "sk-ajet-" + Buffer.from('{"episode_uuid":"x"}').toString("base64"), maxRetries: 0 });
  try {
    await forged.messages.create({ model, max_tokens: 8, messages: user("x") });
    throw new Error("a forged key was accepted");
  } catch (e) {
    expect(e instanceof Anthropic.AuthenticationError, `forged key: ${e?.constructor?.name} ${e?.status}`);
    eq(e.status, 401, "status");
  }
  try {
    // (A system message is accepted since issue 39: Claude Code sends them.)
    await train.messages.create({ model, max_tokens: 8, messages: [{ role: "tool", content: "x" }] });
    throw new Error("a malformed body was accepted");
  } catch (e) {
    expect(e instanceof Anthropic.BadRequestError, `malformed body: ${e?.constructor?.name} ${e?.status}`);
    expect(/messages\[0\]\.role/.test(e.message), `the error names the field: ${e.message}`);
    // Anthropic's envelope, as the SDK keeps it in `error`.
    eq(e.error?.type, "error", "envelope type");
    eq(e.error?.error?.type, "invalid_request_error", "error type");
  }
  try {
    await train.messages.create({ model, max_tokens: 8, stop_sequences: [""], messages: user("x") });
    throw new Error("an empty stop sequence was accepted");
  } catch (e) {
    expect(e instanceof Anthropic.BadRequestError, `empty stop sequence: ${e?.constructor?.name} ${e?.status}`);
    expect(/stop_sequences\[0\]/.test(e.error?.error?.message), `the error names the field sent: ${e.message}`);
  }
  try {
    await train.messages.create({
      model, max_tokens: 8,
      messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_none", content: "42" }] }],
    });
    throw new Error("a tool_result answering no tool_use was accepted");
  } catch (e) {
    expect(e instanceof Anthropic.BadRequestError, `orphan tool_result: ${e?.constructor?.name} ${e?.status}`);
    expect(/messages\[0\]\.content\[0\]\.tool_use_id/.test(e.error?.error?.message),
      `the error names the block: ${e.message}`);
  }
});

report();
