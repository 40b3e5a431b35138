// A calculator agent trained through an AgentJet swarm server, with the official openai SDK.
// Each episode: claim, ask the model an arithmetic question with a `calculator` tool, run its tool
// calls, report reward 1 for a correct answer (else 0). Tasks are its own questions
// ({task_id, question, answer}: the last number of the reply counts) or built-in `calc` tasks
// (docs/tasks.md: their messages and tool, <answer>N</answer>, judged like `ajet tasks judge`).
//
//   node agent.mjs --swarm-url http://127.0.0.1:10086 --episodes 8 --repeat 2 [--tasks tasks.jsonl]
//   node agent.mjs ... --ajet ../../build/bin/ajet --generate 16   # calc tasks and judge from `ajet tasks`
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { CALCULATOR_TOOL, MAX_TOOL_CALLS, SYSTEM_PROMPT, calculator, evaluate, judgeEpisode } from "./calculator.mjs";
import { Swarm } from "./swarm.mjs";

const { values: opt } = parseArgs({
  options: {
    "swarm-url": { type: "string", default: process.env.AJET_SWARM_URL ?? "http://127.0.0.1:10086" },
    tasks: { type: "string" },
    ajet: { type: "string", default: process.env.AJET_BIN },  // the `ajet` binary: calc judge (and --generate)
    generate: { type: "string" },                    // N calc tasks from `ajet tasks generate --task calc`
    seed: { type: "string", default: "1" },
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
const tasksText = opt.generate
  ? execFileSync(opt.ajet ?? "ajet", ["tasks", "generate", "--task", "calc", "--n", opt.generate, "--seed", opt.seed],
    { encoding: "utf8", maxBuffer: 256 << 20 })
  : opt.tasks ? fs.readFileSync(opt.tasks, "utf8") : null;
const tasks = tasksText
  ? tasksText.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l))
  : [
    { task_id: "add-1", question: "What is 17 + 25?", answer: 42 },
    { task_id: "mul-1", question: "What is 6 * 7?", answer: 42 },
    { task_id: "mix-1", question: "What is (3 + 4) * 5?", answer: 35 },
  ];

// A built-in calc task (docs/tasks.md) rather than one of our own questions.
const isCalcTask = (task) => task.question === undefined;

function runTool(call, task) {
  let content;
  try {
    const args = JSON.parse(call.function.arguments || "{}");
    if (call.function.name !== "calculator") content = "unknown tool";
    else content = isCalcTask(task) ? calculator(args.expression) : String(evaluate(args.expression));
  } catch (e) {
    content = `error: ${e.message}`;
  }
  return { role: "tool", tool_call_id: call.id, content };
}

// `ajet tasks judge` on one conversation: the reference judge of the built-in task.
function ajetJudge(task, messages) {
  const out = execFileSync(opt.ajet, ["tasks", "judge"], { encoding: "utf8", input: JSON.stringify({ task, messages }) + "\n" });
  return JSON.parse(out.trim().split("\n").pop());
}

function finalNumber(text) {
  const all = (text ?? "").match(/-?\d+(\.\d+)?/g);
  return all ? Number(all[all.length - 1]) : null;
}

async function rollout(swarm, task) {
  const { episodeUuid, baseURL, apiKey } = await swarm.claimEpisode({ discardEpisodeTimeout: 120 });
  const openai = new OpenAI({ baseURL, apiKey, maxRetries: 2 });
  const calc = isCalcTask(task);
  const messages = !calc ? [{ role: "system", content: SYSTEM }, { role: "user", content: task.question }]
    : task.init_messages?.length ? structuredClone(task.init_messages)
      : [{ role: "system", content: SYSTEM_PROMPT }, { role: "user", content: task.main_query }];
  const taskTools = calc ? task.metadata?.tools ?? [CALCULATOR_TOOL] : tools;
  const maxToolCalls = calc ? task.metadata?.max_tool_calls ?? MAX_TOOL_CALLS : Infinity;
  let toolCalls = 0, answer = null;
  try {
    for (let turn = 0; turn < Number(opt["max-turns"]) && toolCalls <= maxToolCalls; turn++) {
      const r = await openai.chat.completions.create({ model: "agentjet", messages, tools: taskTools, max_tokens: 128 });
      const message = r.choices[0].message;
      messages.push(message);
      if (!message.tool_calls?.length) {
        answer = finalNumber(message.content);
        break;
      }
      for (const call of message.tool_calls) {
        toolCalls += 1;
        if (toolCalls > maxToolCalls) { // the call past the limit ends the episode (reward 0)
          messages.push({ role: "tool", tool_call_id: call.id, content: `error: tool call limit reached (${maxToolCalls})` });
          break;
        }
        messages.push(runTool(call, task));
      }
    }
  } catch (e) { // e.g. the engine stopped: give the slot back
    await swarm.abortEpisode(episodeUuid);
    return { episode_uuid: episodeUuid, task_id: task.task_id, aborted: e.message };
  }
  if (calc) {
    const local = judgeEpisode(task, messages);
    const judged = opt.ajet ? ajetJudge(task, messages) : local;
    await swarm.endEpisode(task.task_id, episodeUuid, judged.reward, {
      is_success: judged.is_success, metadata: { task_id: task.task_id, env_type: "calc", judge_reason: judged.reason },
    });
    return {
      episode_uuid: episodeUuid, task_id: task.task_id, reward: judged.reward, reason: judged.reason,
      judge: opt.ajet ? "ajet" : "local", local_reason: local.reason, tool_calls: toolCalls,
    };
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
