// Renders chat conversations with a real Jinja engine (@huggingface/jinja), the reference that
// tests/text/chat_template_jinja_test.cc compares src/text/chat_template.cc against byte for byte.
//
// usage: node render_chat_template.mjs NODE_MODULES TEMPLATE CASES_JSON
//   TEMPLATE: a tokenizer_config.json (its "chat_template" is used) or a raw Jinja file.
//   CASES_JSON: {"cases": [{"name", "messages", "tools"?}, ...]}
// Prints {"results": [{"name", "variant", "text"} | {"name", "variant", "error"}, ...]} on stdout.
//
// Before rendering, messages get the same normalisation the C++ side documents in
// src/text/messages.h (what an OpenAI-compatible server such as vLLM does before applying a
// template): "developer" -> "system"; null/absent content -> ""; a list of text parts -> their texts
// joined with "\n"; a tool call's `arguments` JSON string that parses to an object -> that object.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, templatePath, casesPath] = process.argv.slice(2);
if (!nodeModules || !templatePath || !casesPath) {
  console.error("usage: node render_chat_template.mjs NODE_MODULES TEMPLATE CASES_JSON");
  process.exit(2);
}
const jinjaUrl = pathToFileURL(path.join(nodeModules, "@huggingface/jinja/dist/index.js")).href;
const { Template } = await import(jinjaUrl);

let source = fs.readFileSync(templatePath, "utf8");
if (templatePath.endsWith(".json")) {
  source = JSON.parse(source).chat_template;
  if (typeof source !== "string") throw new Error(`${templatePath}: no string chat_template`);
}
const template = new Template(source);

function normaliseContent(content) {
  if (content === null || content === undefined) return "";
  if (Array.isArray(content)) return content.map((part) => part.text).join("\n");
  return content;
}

function normaliseMessage(message) {
  const out = { ...message };
  if (out.role === "developer") out.role = "system";
  out.content = normaliseContent(out.content);
  if (Array.isArray(out.tool_calls)) {
    out.tool_calls = out.tool_calls.map((call) => {
      const fn = { ...call.function };
      if (typeof fn.arguments === "string") {
        try {
          const parsed = JSON.parse(fn.arguments);
          if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) fn.arguments = parsed;
        } catch (e) {
          // not JSON: the template sees the string
        }
      }
      return { ...call, function: fn };
    });
  }
  return out;
}

// The same three variants the C++ test renders.
const variants = [
  { name: "no_generation_prompt", vars: { add_generation_prompt: false } },
  { name: "generation_prompt", vars: { add_generation_prompt: true } },
  { name: "generation_prompt_no_thinking", vars: { add_generation_prompt: true, enable_thinking: false } },
];

const cases = JSON.parse(fs.readFileSync(casesPath, "utf8")).cases;
const results = [];
for (const c of cases) {
  const messages = c.messages.map(normaliseMessage);
  for (const v of variants) {
    const vars = { messages, bos_token: "", eos_token: "<|im_end|>", ...v.vars };
    if (c.tools !== undefined) vars.tools = c.tools;
    try {
      results.push({ name: c.name, variant: v.name, text: template.render(vars) });
    } catch (e) {
      results.push({ name: c.name, variant: v.name, error: String(e && e.message ? e.message : e) });
    }
  }
}
process.stdout.write(JSON.stringify({ results }));
