// The official OpenAI JS SDK's Responses API (client.responses) against a running ajet-swarm's
// /v1/responses: every response and stream must parse without errors, and (mode "echo", with
// ajet-echo-engine, whose answer is the last user message) carry exactly the expected text and
// function calls. Mode "real" (the real ajet-engine, random model) checks shapes.
//
// usage: node openai_responses_swarm.mjs NODE_MODULES MODE BASE_URL TRAIN_KEY EVAL_KEY
// Prints one JSON object: {"ok": bool, "checks": [{"name", "ok", "detail"?}]}; exit 0 iff every check passed.
import path from "node:path";
import { createRequire } from "node:module";

import { check, eq, expect, report } from "./checks.mjs";

const [nodeModules, mode, baseURL, trainKey, evalKey] = process.argv.slice(2);
if (!nodeModules || !["echo", "real"].includes(mode) || !baseURL || !trainKey || !evalKey) {
  console.error("usage: node openai_responses_swarm.mjs NODE_MODULES echo|real BASE_URL TRAIN_KEY EVAL_KEY");
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, "noop.js"));
const openaiModule = require("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default;

const echo = mode === "echo";
const train = new OpenAI({ baseURL, apiKey: trainKey, maxRetries: 0, timeout: 120_000 });
const evalClient = new OpenAI({ baseURL, apiKey: evalKey, maxRetries: 0, timeout: 120_000 });
const model = "agentjet";
const limit = echo ? {} : { max_output_tokens: 8 };
const TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>';
const tools = [{
  type: "function",
  name: "calculator",
  description: "Evaluates an arithmetic expression",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  strict: false,
}];

function responseOk(r) {
  eq(r.object, "response", "object");
  expect(typeof r.id === "string" && r.id.startsWith("resp_"), `id ${r.id}`);
  expect(["completed", "incomplete"].includes(r.status), `status ${r.status}`);
  expect(Array.isArray(r.output) && r.output.length > 0, `output ${JSON.stringify(r.output)}`);
  expect(r.usage && r.usage.input_tokens > 0 && r.usage.output_tokens > 0, `usage ${JSON.stringify(r.usage)}`);
  eq(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens, "usage.total_tokens");
}
const textOf = (r) => r.output.filter((i) => i.type === "message").flatMap((i) => i.content).map((c) => c.text).join("");

await check("responses.create with a string input", async () => {
  const r = await train.responses.create({ model, input: "hello swarm", ...limit });
  responseOk(r);
  if (echo) {
    eq(r.output_text, "hello swarm", "output_text");
    eq(r.status, "completed", "status");
  }
});

await check("instructions and message items", async () => {
  const r = await evalClient.responses.create({
    model, instructions: "Be brief.", ...limit,
    input: [{ role: "user", content: [{ type: "input_text", text: "items work" }] }],
  });
  responseOk(r);
  if (echo) eq(r.output_text, "items work", "output_text");
});

await check("stream: true, the raw event order", async () => {
  const stream = await train.responses.create({ model, input: "one two three four", stream: true, ...limit });
  const types = [];
  let text = "", final = null, last = -1;
  for await (const event of stream) {
    types.push(event.type);
    expect(event.sequence_number > last, `sequence_number ${event.sequence_number} after ${last}`);
    last = event.sequence_number;
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response;
  }
  eq(types.slice(0, 2), ["response.created", "response.in_progress"], "first events");
  expect(final, `a final response event in ${types.join(", ")}`);
  if (echo) {
    eq(text, "one two three four", "streamed text");
    eq(types[types.length - 1], "response.completed", "last event");
  }
});

await check("responses.stream helper finalResponse", async () => {
  const stream = train.responses.stream({ model, input: "stream helper", ...limit });
  let deltas = "";
  stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const final = await stream.finalResponse();
  // The SDK takes the final object from response.completed; after response.incomplete (real mode,
  // max_output_tokens) it keeps its own in_progress snapshot, as it does with OpenAI's API.
  expect(["completed", "incomplete", "in_progress"].includes(final.status), `status ${final.status}`);
  eq(textOf(final), deltas, "final text = deltas");
  if (echo) {
    eq(final.status, "completed", "status");
    eq(textOf(final), "stream helper", "text");
  }
});

await check("function call and the function_call_output turn", async () => {
  const r = await train.responses.create({ model, tools, input: echo ? TOOL_CALL : "use a tool", ...limit });
  responseOk(r);
  if (!echo) return;
  const call = r.output.find((i) => i.type === "function_call");
  expect(call, `a function_call item in ${JSON.stringify(r.output)}`);
  eq(call.name, "calculator", "name");
  eq(JSON.parse(call.arguments), { expression: "6*7" }, "arguments");
  const next = await train.responses.create({
    model, tools,
    input: [{ role: "user", content: "compute 6*7" }, ...r.output, { type: "function_call_output", call_id: call.call_id, output: "42" }],
  });
  responseOk(next);
  expect(next.output_text.includes("42"), `the echoed function output: ${next.output_text}`);
});

await check("function call (streaming helper)", async () => {
  const stream = train.responses.stream({ model, tools, input: echo ? TOOL_CALL : "use a tool", ...limit });
  const final = await stream.finalResponse();
  if (!echo) return;
  const call = final.output.find((i) => i.type === "function_call");
  expect(call, `a function_call item in ${JSON.stringify(final.output)}`);
  eq(JSON.parse(call.arguments), { expression: "6*7" }, "arguments");
});

await check("max_output_tokens makes the response incomplete", async () => {
  const r = await evalClient.responses.create({ model, input: "a long answer that does not fit", max_output_tokens: 2 });
  eq(r.status, "incomplete", "status");
  eq(r.incomplete_details?.reason, "max_output_tokens", "incomplete_details.reason");
});

await check("errors become typed SDK exceptions", async () => {
  const forged = new OpenAI({ baseURL, apiKey: "sk-ajet-" + Buffer.from('{"episode_uuid":"x"}').toString("base64"), maxRetries: 0 });
  try {
    await forged.responses.create({ model, input: "x" });
    throw new Error("a forged key was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.AuthenticationError, `forged key: ${e?.constructor?.name} ${e?.status}`);
  }
  try {
    await train.responses.create({ model, input: "x", previous_response_id: "resp_123" });
    throw new Error("previous_response_id was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.BadRequestError, `previous_response_id: ${e?.constructor?.name} ${e?.status}`);
    expect(/previous_response_id/.test(e.message), `the error names the field: ${e.message}`);
  }
  try {
    await train.responses.create({
      model,
      input: [{ role: "user", content: "x" }, { type: "function_call_output", call_id: "call_none", output: "42" }],
    });
    throw new Error("a function_call_output answering no function_call was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.BadRequestError, `orphan output: ${e?.constructor?.name} ${e?.status}`);
    expect(/input\[1\]\.call_id/.test(e.message), `the error names the item: ${e.message}`);
  }
  try {
    await train.responses.create({ model, input: "x", max_output_tokens: 0 });
    throw new Error("max_output_tokens 0 was accepted");
  } catch (e) {
    expect(e instanceof OpenAI.BadRequestError, `max_output_tokens 0: ${e?.constructor?.name} ${e?.status}`);
    expect(/max_output_tokens/.test(e.message), `the error names the field sent: ${e.message}`);
  }
});

report();
