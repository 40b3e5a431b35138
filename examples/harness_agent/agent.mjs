// An agent the harness runs in a sandbox per episode (docs/agents.md, "Harness for CLI agents"): the
// official openai SDK, a calculator tool that the sandbox's shell evaluates, and the answer left in
// answer.txt for the verifier (verify.py). Env: OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL, AJET_TASK
// (a task line: prompt, answer), AJET_SAMPLING (validation's sampling parameters, passed on).
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import OpenAI from "openai";

const SYSTEM = "Use the calculator tool, then reply <answer>N</answer>.";
const TOOL = { type: "function", function: { name: "calculator", description: "Evaluate an integer expression.",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] } } };
function calculator(expression) {  // digits, + - * / and parentheses, evaluated by sh in the sandbox
  if (typeof expression !== "string" || !/^[\d\s+\-*/()]+$/.test(expression)) return "error: bad expression";
  try { return execFileSync("sh", ["-c", `echo $(( ${expression} ))`], { timeout: 5000 }).toString().trim(); }
  catch { return "error: bad expression"; }
}

const env = process.env, task = JSON.parse(env.AJET_TASK), sampling = JSON.parse(env.AJET_SAMPLING || "{}");
const openai = new OpenAI({ baseURL: env.OPENAI_BASE_URL, apiKey: env.OPENAI_API_KEY, maxRetries: 0 });
const messages = [{ role: "system", content: SYSTEM }, { role: "user", content: task.prompt }];
for (let turn = 0, calls = 0; turn < 4 && calls <= 3; turn++) {
  const reply = (await openai.chat.completions.create({ model: env.OPENAI_MODEL, messages, tools: [TOOL], ...sampling }))
    .choices[0].message;
  messages.push(reply);
  if (!reply.tool_calls?.length) {
    const answer = /<answer>\s*(-?\d+)\s*<\/answer>/.exec(reply.content ?? "")?.[1];
    if (answer !== undefined) writeFileSync("answer.txt", answer + "\n");
    break;
  }
  for (const call of reply.tool_calls) {
    calls++;
    let expression; try { expression = JSON.parse(call.function.arguments).expression; } catch {}
    messages.push({ role: "tool", tool_call_id: call.id, content: calculator(expression) });
  }
}
