// A calculator agent trained through an AgentJet swarm server, with the official openai SDK.
// Each episode: claim, ask the model an arithmetic question with a `calculator` tool, run its tool
// calls, report reward 1 for a correct final number (else 0).
//
//   node agent.mjs --swarm-url http://127.0.0.1:10086 --episodes 8 --repeat 2 [--tasks tasks.jsonl]
import fs from "node:fs";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { evaluate } from "./calculator.mjs";
import { Swarm } from "./swarm.mjs";

const { values: opt } = parseArgs({
  options: {
    "swarm-url": { type: "string", default: process.env.AJET_SWARM_URL ?? "http://127.0.0.1:10086" },
    tasks: { type: "string" },
    episodes: { type: "string", default: "8" },
    repeat: { type: "string", default: "2" },
    parallel: { type: "string", default: "4" },
    "max-turns": { type: "string", default: "4" },
  },
});

const SYSTEM = "You solve arithmetic questions. Call the calculator tool for any computation, " +
  "then answer with the final number only.";
const tools = [{
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluates an arithmetic expression such as (3 + 4) * 5",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  },
}];
const tasks = opt.tasks
  ? fs.readFileSync(opt.tasks, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l))
  : [
    { task_id: "add-1", question: "What is 17 + 25?", answer: 42 },
    { task_id: "mul-1", question: "What is 6 * 7?", answer: 42 },
    { task_id: "mix-1", question: "What is (3 + 4) * 5?", answer: 35 },
  ];

function runTool(call) {
  let content;
  try {
    const args = JSON.parse(call.function.arguments || "{}");
    content = call.function.name === "calculator" ? String(evaluate(args.expression)) : "unknown tool";
  } catch (e) {
    content = `error: ${e.message}`;
  }
  return { role: "tool", tool_call_id: call.id, content };
}

function finalNumber(text) {
  const all = (text ?? "").match(/-?\d+(\.\d+)?/g);
  return all ? Number(all[all.length - 1]) : null;
}

async function rollout(swarm, task) {
  const { episodeUuid, baseURL, apiKey } = await swarm.claimEpisode({ discardEpisodeTimeout: 120 });
  const openai = new OpenAI({ baseURL, apiKey, maxRetries: 2 });
  const messages = [{ role: "system", content: SYSTEM }, { role: "user", content: task.question }];
  let toolCalls = 0, answer = null;
  try {
    for (let turn = 0; turn < Number(opt["max-turns"]); turn++) {
      const r = await openai.chat.completions.create({ model: "agentjet", messages, tools, max_tokens: 128 });
      const message = r.choices[0].message;
      messages.push(message);
      if (!message.tool_calls?.length) {
        answer = finalNumber(message.content);
        break;
      }
      for (const call of message.tool_calls) {
        toolCalls += 1;
        messages.push(runTool(call));
      }
    }
  } catch (e) { // e.g. the engine stopped: give the slot back
    await swarm.abortEpisode(episodeUuid);
    return { episode_uuid: episodeUuid, task_id: task.task_id, aborted: e.message };
  }
  const reward = answer !== null && Math.abs(answer - Number(task.answer)) < 1e-6 ? 1 : 0;
  await swarm.endEpisode(task.task_id, episodeUuid, reward, { is_success: reward > 0 });
  return { episode_uuid: episodeUuid, task_id: task.task_id, reward, tool_calls: toolCalls, answer };
}

const swarm = new Swarm(opt["swarm-url"]);
const repeat = Number(opt.repeat);
// Each task `repeat` times in a row, so GRPO groups fill up together.
const schedule = Array.from({ length: Number(opt.episodes) }, (_, i) => tasks[Math.floor(i / repeat) % tasks.length]);
let next = 0;
async function worker() {
  while (next < schedule.length) {
    const task = schedule[next++];
    console.log(JSON.stringify(await rollout(swarm, task)));
  }
}
await Promise.all(Array.from({ length: Number(opt.parallel) }, worker));
