// Your own agent, trained by AgentJet: arithmetic with a calculator tool, with the official openai SDK.
// `ajet --conf examples/first_agent/config.yaml` runs it for each episode. Per episode (the default):
// env OPENAI_BASE_URL, OPENAI_API_KEY, AJET_TASK (a line of train.jsonl), AJET_SAMPLING; the result
// JSON on the last stdout line. As a worker (AJET_WORKFLOW_MODE=worker): one JSON line per episode on
// stdin, one result line on stdout each (docs/classic.md, "Any command").
import readline from "node:readline";
import OpenAI from "openai";

const SYSTEM = "Use the calculator tool, then reply <answer>N</answer>.";
const TOOL = { function: { description: "Evaluate an integer expression.", name: "calculator",
  parameters: { properties: { expression: { type: "string" } }, required: ["expression"], type: "object" } },
type: "function" };
function calculator(expression) {  // digits, + - * / and parentheses only
  try {
    const v = /^[\d\s+\-*/()]+$/.test(expression) ? Function(`return (${expression})`)() : NaN;
    return Number.isInteger(v) ? String(v) : "error: not an integer expression";
  } catch { return "error: bad expression"; }
}

async function episode({ base_url, api_key, model = "agentjet", task, sampling = {} }) {
  const openai = new OpenAI({ baseURL: base_url, apiKey: api_key, maxRetries: 0 });
  const messages = [{ role: "system", content: SYSTEM }, { role: "user", content: task.main_query }];
  for (let calls = 0, turn = 0; turn < 4; turn++) {
    // `sampling` (AJET_SAMPLING) is empty in training and says how to sample in validation: pass it on.
    const reply = (await openai.chat.completions.create({ model, messages, tools: [TOOL], ...sampling })).choices[0].message;
    messages.push(reply);
    if (!reply.tool_calls?.length) {
      const answer = /<answer>\s*(-?\d+)\s*<\/answer>/.exec(reply.content ?? "")?.[1];
      const correct = answer !== undefined && Number(answer) === task.metadata.answer;
      return { reward: correct ? 1 : 0, is_success: correct, log_metrics: { llm_calls: turn + 1 } };
    }
    for (const call of reply.tool_calls) {
      if (++calls > 3) return { reward: 0, is_success: false, metadata: { termination: "max_tool_calls" } };
      let expression; try { expression = JSON.parse(call.function.arguments).expression; } catch {}
      messages.push({ role: "tool", tool_call_id: call.id, content: calculator(expression) });
    }
  }
  return { reward: 0, is_success: false, metadata: { termination: "max_turns" } };
}

if (process.env.AJET_WORKFLOW_MODE === "worker") {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const result = await episode(JSON.parse(line)).catch((e) => ({ reward: 0, metadata: { error: String(e) } }));
    console.log(JSON.stringify(result));
  }
} else {
  const env = process.env;
  console.log(JSON.stringify(await episode({ base_url: env.OPENAI_BASE_URL, api_key: env.OPENAI_API_KEY,
    task: JSON.parse(env.AJET_TASK), sampling: JSON.parse(env.AJET_SAMPLING || "{}") })));
}
