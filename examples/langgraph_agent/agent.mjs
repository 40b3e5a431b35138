// A LangGraph agent for the built-in `calc` task, trained through an AgentJet swarm server.
// Each episode: claim it, build a ChatOpenAI model on the episode's base URL and key, run a two-node
// graph (model ⇄ calculator) until the model answers, judge the conversation, end the episode with
// the reward. The graph is ordinary LangGraph: nothing in it knows about training.
//
//   node agent.mjs --swarm-url http://127.0.0.1:10086 --episodes 8 --repeat 2 [--tasks calc.jsonl]
//   node agent.mjs ... --ajet ../../build/bin/ajet --generate 16   # tasks and judge from `ajet tasks`
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import { parseArgs } from "node:util";
import { AIMessage, HumanMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { ChatOpenAI } from "@langchain/openai";
import { Swarm } from "../node_agent/swarm.mjs";
import { CALCULATOR_TOOL, MAX_TOOL_CALLS, SYSTEM_PROMPT, calculator, judgeEpisode } from "../node_agent/calculator.mjs";

const { values: opt } = parseArgs({
  options: {
    "swarm-url": { type: "string", default: process.env.AJET_SWARM_URL ?? "http://127.0.0.1:10086" },
    tasks: { type: "string" },                       // JSONL in the task format of docs/tasks.md
    ajet: { type: "string", default: process.env.AJET_BIN },  // the `ajet` binary: judge (and --generate)
    generate: { type: "string" },                    // N: tasks from `ajet tasks generate --task calc`
    seed: { type: "string", default: "1" },
    episodes: { type: "string", default: "8" },
    repeat: { type: "string", default: "2" },
    parallel: { type: "string", default: "4" },
    "max-turns": { type: "string", default: "4" },
    "max-tokens": { type: "string", default: "128" },
  },
});

const DEFAULT_TASKS = [
  { task_id: "lg-add", main_query: "What is 17 + 25?", metadata: { answer: 42 } },
  { task_id: "lg-mul", main_query: "37*4+15=?", metadata: { answer: 163 } },
  { task_id: "lg-word", main_query: "Ann buys 12 bags of 7 pens. How many pens in total?", metadata: { answer: 84 } },
];

function loadTasks() {
  let text;
  if (opt.generate) {
    if (!opt.ajet) throw new Error("--generate needs --ajet PATH (or AJET_BIN)");
    text = execFileSync(opt.ajet, ["tasks", "generate", "--task", "calc", "--n", opt.generate, "--seed", opt.seed],
      { encoding: "utf8", maxBuffer: 256 << 20 });
  } else if (opt.tasks) {
    text = fs.readFileSync(opt.tasks, "utf8");
  } else {
    return DEFAULT_TASKS;
  }
  return text.split("\n").filter((l) => l.trim()).map((l, i) => {
    const task = JSON.parse(l);
    if (task.task_id === undefined) throw new Error(`tasks line ${i + 1}: field 'task_id' is missing`);
    task.task_id = String(task.task_id);
    return task;
  });
}

// The opening conversation of a task as LangChain messages (init_messages, else main_query).
function openingMessages(task) {
  const init = task.init_messages?.length ? task.init_messages
    : [{ role: "system", content: SYSTEM_PROMPT }, { role: "user", content: task.main_query }];
  return init.map((m) => {
    if (m.role === "system") return new SystemMessage(m.content);
    if (m.role === "user") return new HumanMessage(m.content);
    if (m.role === "assistant") return new AIMessage(m.content ?? "");
    throw new Error(`task ${task.task_id}: init_messages role '${m.role}' is not supported here`);
  });
}

// LangChain messages back to OpenAI chat messages, for the judge.
function toOpenAI(m) {
  const type = m.getType();
  const content = typeof m.content === "string" ? m.content : m.content.map((p) => p.text ?? "").join("");
  if (type === "system") return { role: "system", content };
  if (type === "human") return { role: "user", content };
  if (type === "tool") return { role: "tool", tool_call_id: m.tool_call_id, content };
  const out = { role: "assistant", content };
  if (m.tool_calls?.length) {
    out.tool_calls = m.tool_calls.map((c) => ({
      id: c.id, type: "function", function: { name: c.name, arguments: JSON.stringify(c.args ?? {}) },
    }));
  }
  return out;
}

// The conversation, appended to. (MessagesAnnotation would merge messages by id, and a server may
// reuse a completion id: a transcript for training must keep every message.)
const Conversation = Annotation.Root({
  messages: Annotation({ reducer: (left, right) => left.concat(right), default: () => [] }),
});

// The graph: "model" calls the LLM; "tools" runs its calculator calls; the episode ends at the first
// reply without tool calls, at the tool-call limit, or after max-turns replies.
function buildGraph(model, { maxToolCalls, maxTurns }) {
  const toolCallsSoFar = (messages) => messages.filter((m) => m.getType() === "tool").length;
  const replies = (messages) => messages.filter((m) => m.getType() === "ai").length;
  const limitHit = (m) => m.getType() === "tool" && String(m.content).startsWith("error: tool call limit reached");

  const callModel = async (state) => ({ messages: [await model.invoke(state.messages)] });
  const runTools = async (state) => {
    const last = state.messages[state.messages.length - 1];
    let used = toolCallsSoFar(state.messages);
    const out = [];
    for (const call of last.tool_calls) {
      used += 1;
      let content;
      if (used > maxToolCalls) content = `error: tool call limit reached (${maxToolCalls})`;
      else if (call.name !== "calculator") content = `error: unknown tool '${call.name}'`;
      else content = calculator(call.args?.expression);
      out.push(new ToolMessage({ content, tool_call_id: call.id ?? "", name: call.name }));
      if (used > maxToolCalls) break;
    }
    return { messages: out };
  };
  return new StateGraph(Conversation)
    .addNode("model", callModel)
    .addNode("tools", runTools)
    .addEdge(START, "model")
    .addConditionalEdges("model", (state) => {
      const last = state.messages[state.messages.length - 1];
      return last.tool_calls?.length && replies(state.messages) < maxTurns ? "tools" : END;
    }, ["tools", END])
    .addConditionalEdges("tools", (state) => (limitHit(state.messages[state.messages.length - 1]) ? END : "model"),
      ["model", END])
    .compile();
}

// `ajet tasks judge` on one conversation: the reference judge of the built-in task.
function ajetJudge(task, messages) {
  return new Promise((resolve, reject) => {
    const child = spawn(opt.ajet, ["tasks", "judge"], { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d) => { out += d; });
    child.on("error", reject);
    child.on("close", (code) => {
      try {
        const result = JSON.parse(out.trim().split("\n").pop());
        if (code !== 0 || result.error) throw new Error(result.error ?? `exit ${code}`);
        resolve(result);
      } catch (e) {
        reject(new Error(`ajet tasks judge: ${e.message}: ${out}`));
      }
    });
    child.stdin.end(JSON.stringify({ task, messages }) + "\n");
  });
}

async function rollout(swarm, task) {
  const { episodeUuid, baseURL, apiKey } = await swarm.claimEpisode({ discardEpisodeTimeout: 120 });
  const model = new ChatOpenAI({
    model: "agentjet", apiKey, configuration: { baseURL }, maxTokens: Number(opt["max-tokens"]), maxRetries: 2,
  }).bindTools(task.metadata?.tools ?? [CALCULATOR_TOOL]);
  const graph = buildGraph(model, {
    maxToolCalls: task.metadata?.max_tool_calls ?? MAX_TOOL_CALLS, maxTurns: Number(opt["max-turns"]),
  });
  let final;
  try {
    final = await graph.invoke({ messages: openingMessages(task) }, { recursionLimit: 4 * Number(opt["max-turns"]) + 4 });
  } catch (e) { // e.g. the engine stopped: give the slot back, nothing is learned from it
    await swarm.abortEpisode(episodeUuid);
    return { episode_uuid: episodeUuid, task_id: task.task_id, aborted: e.message };
  }
  const messages = final.messages.map(toOpenAI);
  const local = judgeEpisode(task, messages);
  const judged = opt.ajet ? await ajetJudge(task, messages) : local;
  const toolCalls = messages.filter((m) => m.role === "tool").length;
  const turns = messages.filter((m) => m.role === "assistant").length;
  const metadata = {
    task_id: task.task_id, env_type: "calc", turns, tool_calls: toolCalls, judge_reason: judged.reason,
    ...((judged.details?.answer ?? judged.answer) !== undefined && { answer: judged.details?.answer ?? judged.answer }),
  };
  const ended = await swarm.endEpisode(task.task_id, episodeUuid, judged.reward, {
    is_success: judged.is_success, metadata,
    log_metrics: { success: judged.is_success ? 1 : 0, turns, tool_calls: toolCalls, used_tool: toolCalls > 0 ? 1 : 0 },
  });
  return {
    episode_uuid: episodeUuid, task_id: task.task_id, reward: judged.reward, reason: judged.reason,
    judge: opt.ajet ? "ajet" : "local", local_reason: local.reason, tool_calls: toolCalls, turns, ended,
  };
}

const tasks = loadTasks();
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
