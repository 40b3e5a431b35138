// The official OpenAI JS SDK against a running ajet-swarm: every response must parse without errors,
// and (mode "echo", with ajet-echo-engine, whose answer is the last user message) carry exactly the
// expected content, tool calls, logprobs and choices. Mode "real" (the real ajet-engine with a random
// model) checks shapes only: random tokens are a good test of the streaming and logprobs encoders.
//
// usage: node openai_sdk_swarm.mjs NODE_MODULES MODE BASE_URL TRAIN_KEY EVAL_KEY
// Prints one JSON object: {"ok": bool, "checks": [{"name", "ok", "detail"?}]}; exit 0 iff every check passed.
import path from "node:path";
import { createRequire } from "node:module";

import { check, eq, expect, report } from "./checks.mjs";

const [nodeModules, mode, baseURL, trainKey, evalKey] = process.argv.slice(2);
if (!nodeModules || !["echo", "real"].includes(mode) || !baseURL || !trainKey || !evalKey) {
  console.error("usage: node openai_sdk_swarm.mjs NODE_MODULES echo|real BASE_URL TRAIN_KEY EVAL_KEY");
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, "noop.js"));
const openaiModule = require("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;

const echo = mode === "echo";
const train = new OpenAI({ baseURL, apiKey: trainKey, maxRetries: 0, timeout: 120_000 });
const evalClient = new OpenAI({ baseURL, apiKey: evalKey, maxRetries: 0, timeout: 120_000 });
const model = "agentjet";
const limit = echo ? {} : { max_tokens: 8 };
const TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>';
const tools = [{
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluates an arithmetic expression",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  },
}];
const user = (content) => [{ role: "user", content }];

function finishOk(reason) {
  expect(["stop", "length", "tool_calls"].includes(reason), `finish_reason ${reason}`);
}
function usageOk(u) {
  expect(u && u.prompt_tokens > 0 && u.completion_tokens > 0, `usage ${JSON.stringify(u)}`);
  eq(u.total_tokens, u.prompt_tokens + u.completion_tokens, "usage.total_tokens");
}
// The logprob tokens spell the content, plus at most one final end-of-turn token (the server reports
// the generated end token too; OpenAI's API leaves it out, and both parse).
function tokensSpell(tokens, content, what) {
  const joined = tokens.join("");
  const extra = tokens.length > 0 ? tokens[tokens.length - 1] : "";
  expect(joined === content || (joined === content + extra && tokens.slice(0, -1).join("") === content),
    `${what}: tokens ${JSON.stringify(tokens)} do not spell ${JSON.stringify(content)}`);
}
function logprobsOk(lp, k) {
  expect(lp && Array.isArray(lp.content) && lp.content.length > 0, `logprobs ${JSON.stringify(lp)}`);
  for (const t of lp.content) {
    expect(typeof t.token === "string" && typeof t.logprob === "number" && t.logprob <= 0, `token ${JSON.stringify(t)}`);
    expect(t.bytes === null || Array.isArray(t.bytes), "bytes");
    expect(Array.isArray(t.top_logprobs) && t.top_logprobs.length === k, `top_logprobs of ${JSON.stringify(t)}`);
  }
}

await check("non-streaming chat", async () => {
  const r = await train.chat.completions.create({ model, messages: user("hello swarm"), ...limit });
  eq(r.object, "chat.completion", "object");
  expect(typeof r.id === "string" && r.id.length > 0 && typeof r.created === "number", "id/created");
  eq(r.choices.length, 1, "choices");
  eq(r.choices[0].message.role, "assistant", "role");
  finishOk(r.choices[0].finish_reason);
  usageOk(r.usage);
  if (echo) {
    eq(r.choices[0].message.content, "hello swarm", "content");
    eq(r.choices[0].finish_reason, "stop", "finish_reason");
  } else {
    expect(typeof r.choices[0].message.content === "string", "content is a string");
  }
});

await check("streaming chat with usage", async () => {
  const stream = await train.chat.completions.create({
    model, messages: user("one two three four"), stream: true, stream_options: { include_usage: true }, ...limit,
  });
  let text = "", contentChunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    eq(chunk.object, "chat.completion.chunk", "chunk.object");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) {
        text += c.delta.content;
        contentChunks += 1;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  finishOk(finish);
  usageOk(usage);
  if (echo) {
    eq(text, "one two three four", "streamed content");
    expect(contentChunks > 1, `token-by-token chunks (got ${contentChunks})`);
  }
});

await check("stream helper finalChatCompletion", async () => {
  const runner = train.chat.completions.stream({ model, messages: user("stream helper"), ...limit });
  let deltas = "";
  runner.on("content", (delta) => { deltas += delta; });
  const final = await runner.finalChatCompletion();
  eq(final.choices[0].message.content ?? "", deltas, "assembled content = deltas");
  if (echo) eq(deltas, "stream helper", "content");
});

await check("tool call (non-streaming) and the tool result turn", async () => {
  const r = await train.chat.completions.create({ model, messages: user(TOOL_CALL), tools, ...limit });
  const m = r.choices[0].message;
  if (!echo) return;
  eq(r.choices[0].finish_reason, "tool_calls", "finish_reason");
  eq(m.tool_calls.length, 1, "tool_calls");
  const call = m.tool_calls[0];
  eq(call.type, "function", "type");
  eq(call.function.name, "calculator", "name");
  eq(JSON.parse(call.function.arguments), { expression: "6*7" }, "arguments");
  expect(typeof call.id === "string" && call.id.length > 0, "call id");
  const next = await train.chat.completions.create({
    model, tools,
    messages: [...user(TOOL_CALL), m, { role: "tool", tool_call_id: call.id, content: "42" }, ...user("the answer is 42")],
  });
  eq(next.choices[0].message.content, "the answer is 42", "after the tool result");
});

await check("tool call (streaming, SDK accumulation)", async () => {
  const runner = train.chat.completions.stream({ model, messages: user(TOOL_CALL), tools, ...limit });
  const final = await runner.finalChatCompletion();
  if (!echo) return;
  const call = final.choices[0].message.tool_calls[0];
  eq(call.function.name, "calculator", "name");
  eq(JSON.parse(call.function.arguments), { expression: "6*7" }, "arguments");
  eq(final.choices[0].finish_reason, "tool_calls", "finish_reason");
});

await check("logprobs + top_logprobs (non-streaming)", async () => {
  const r = await evalClient.chat.completions.create({
    model, messages: user("log probs"), logprobs: true, top_logprobs: 2, ...limit,
  });
  logprobsOk(r.choices[0].logprobs, 2);
  if (echo) {
    eq(r.choices[0].message.content, "log probs", "content");
    tokensSpell(r.choices[0].logprobs.content.map((t) => t.token), "log probs", "logprobs");
  }
});

await check("logprobs (streaming)", async () => {
  const stream = await evalClient.chat.completions.create({
    model, messages: user("streamed log probs"), logprobs: true, top_logprobs: 1, stream: true, ...limit,
  });
  const tokens = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.logprobs?.content) {
        logprobsOk(c.logprobs, 1);
        tokens.push(...c.logprobs.content.map((t) => t.token));
      }
    }
  }
  expect(tokens.length > 0, "streamed logprobs");
  if (echo) tokensSpell(tokens, "streamed log probs", "streamed logprobs");
});

await check("n choices (non-streaming)", async () => {
  const r = await evalClient.chat.completions.create({ model, messages: user("three of them"), n: 3, ...limit });
  eq(r.choices.map((c) => c.index).sort(), [0, 1, 2], "choice indexes");
  for (const c of r.choices) {
    finishOk(c.finish_reason);
    if (echo) eq(c.message.content, "three of them", `choice ${c.index}`);
  }
});

await check("n choices (streaming, SDK accumulation)", async () => {
  const runner = evalClient.chat.completions.stream({ model, messages: user("two streams"), n: 2, ...limit });
  const final = await runner.finalChatCompletion();
  eq(final.choices.length, 2, "choices");
  if (echo) for (const c of final.choices) eq(c.message.content, "two streams", `choice ${c.index}`);
});

await check("models.list", async () => {
  const page = await train.models.list();
  expect(page.data.length > 0 && typeof page.data[0].id === "string", JSON.stringify(page.data));
});

await check("completions (legacy)", async () => {
  const r = await evalClient.completions.create({ model, prompt: "plain prompt", max_tokens: 8 });
  eq(r.object, "text_completion", "object");
  expect(typeof r.choices[0].text === "string", "text");
  finishOk(r.choices[0].finish_reason);
});

await check("errors become typed SDK exceptions", async () => {
  const forged = new OpenAI({ baseURL, apiKey: "sk-ajet-" + Buffer.from('{"episode_uuid":"x"}').toString("base64"), maxRetries: 0 });
  try {
    await forged.chat.completions.create({ model, messages: user("x") });
    throw new Error("a forged key was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.AuthenticationError, `forged key: ${e?.constructor?.name} ${e?.status}`);
    eq(e.status, 401, "status");
  }
  try {
    await train.chat.completions.create({ model, messages: "not a list" });
    throw new Error("a malformed body was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.BadRequestError, `malformed body: ${e?.constructor?.name} ${e?.status}`);
    expect(/messages/.test(e.message), `the error names the field: ${e.message}`);
  }
  try {
    await train.chat.completions.create({
      model, messages: [...user("x"), { role: "tool", tool_call_id: "call_none", content: "42" }],
    });
    throw new Error("a tool message answering no tool call was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.BadRequestError, `orphan tool message: ${e?.constructor?.name} ${e?.status}`);
    expect(/messages\[1\]\.tool_call_id/.test(e.message), `the error names the message: ${e.message}`);
  }
});

report();
