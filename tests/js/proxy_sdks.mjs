// The official OpenAI and Anthropic JS SDKs against `ajet proxy` in front of ajet-swarm with the echo
// engine (its answer is the last user message): the application's view, which must be an ordinary
// endpoint. Chat, Responses and Messages, streamed and not, each parse and carry the echoed text.
//
// usage: node proxy_sdks.mjs NODE_MODULES BASE_URL
// Prints one JSON object: {"ok": bool, "checks": [{"name", "ok", "detail"?}]}; exit 0 iff every check passed.
import path from "node:path";
import { createRequire } from "node:module";

import { check, eq, report } from "./checks.mjs";

const [nodeModules, baseURL] = process.argv.slice(2);
if (!nodeModules || !baseURL) {
  console.error("usage: node proxy_sdks.mjs NODE_MODULES BASE_URL");
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, "noop.js"));
const openaiModule = require("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;
// An application's own key and model name: the proxy ignores both (no --api-key).
const client = new OpenAI({ baseURL, apiKey: "sk-the-apps-own-key", maxRetries: 0, timeout: 120_000 });
const anthropicModule = require("@anthropic-ai/sdk");
const Anthropic = anthropicModule.Anthropic ?? anthropicModule.default;
// Anthropic's base URL has no /v1.
const claude = new Anthropic({ baseURL: baseURL.replace(/\/v1$/, ""), apiKey: "sk-ant-the-apps-own-key",
                               maxRetries: 0, timeout: 120_000 });

await check("chat completion", async () => {
  const r = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "What is 6 * 7?" }],
  });
  eq(r.choices[0].message.content, "What is 6 * 7?", "content");
  eq(r.choices[0].finish_reason, "stop", "finish_reason");
});

await check("chat completion, streamed", async () => {
  const stream = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Stream me" }],
    stream: true,
  });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  }
  eq(text, "Stream me", "streamed text");
  eq(finish, "stop", "finish_reason");
});

await check("responses", async () => {
  const r = await client.responses.create({ model: "gpt-4o-mini", input: "Hello Responses" });
  eq(r.output_text, "Hello Responses", "output_text");
});

await check("responses, streamed", async () => {
  const stream = await client.responses.create({ model: "gpt-4o-mini", input: "Stream Responses", stream: true });
  let text = "";
  let completed = null;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed") completed = event.response;
  }
  eq(text, "Stream Responses", "streamed text");
  eq(completed?.status, "completed", "response.completed");
});

await check("messages (Anthropic SDK)", async () => {
  const m = await claude.messages.create({
    model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hello Claude" }],
  });
  eq(m.content.filter((b) => b.type === "text").map((b) => b.text).join(""), "Hello Claude", "text");
  eq(m.stop_reason, "end_turn", "stop_reason");
});

await check("messages, streamed (Anthropic SDK)", async () => {
  const stream = claude.messages.stream({
    model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Stream Claude" }],
  });
  let text = "";
  stream.on("text", (t) => { text += t; });
  const final = await stream.finalMessage();
  eq(text, "Stream Claude", "streamed text");
  eq(final.stop_reason, "end_turn", "stop_reason");
});

await check("messages.countTokens (Anthropic SDK)", async () => {
  const short = await claude.messages.countTokens({
    model: "claude-sonnet-4-5", messages: [{ role: "user", content: "Count me" }],
  });
  const long = await claude.messages.countTokens({
    model: "claude-sonnet-4-5",
    messages: [{ role: "user", content: "Count me, and these many more words after that as well" }],
  });
  if (!(short.input_tokens > 0 && long.input_tokens > short.input_tokens)) {
    throw new Error(`input_tokens ${short.input_tokens} then ${long.input_tokens}`);
  }
});

report();
