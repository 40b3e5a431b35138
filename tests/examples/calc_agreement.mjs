// Checks the calc task of examples/node_agent/calculator.mjs against the reference, src/tasks through
// the ajet binary: (1) its calculator against every tool result in `ajet tasks demos` (correct demos
// and ones that call the tool with a perturbed expression); (2) its judge against `ajet tasks judge`
// on generated tasks and answers of every kind. Prints one JSON line: {"ok", counts, mismatches}.
//
//   node tests/examples/calc_agreement.mjs build/bin/ajet
import { execFileSync } from "node:child_process";
import { calculator, judgeAnswer, judgeEpisode } from "../../examples/node_agent/calculator.mjs";

const ajet = process.argv[2];
const run = (args, input) => execFileSync(ajet, args, { encoding: "utf8", input, maxBuffer: 256 << 20 });
const jsonl = (text) => text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const mismatches = [];

// (1) The calculator. bad_expr demos call it with near-miss expressions (a digit changed, an operator
// swapped, the last operand dropped: "37*4+" is an error).
const demos = jsonl(run(["tasks", "demos", "--task", "calc", "--n", "300", "--correct-ratio", "0.3",
  "--error-mix", "4,1,1", "--seed", "11"]));
let toolResults = 0, toolErrors = 0;
for (const demo of demos) {
  const results = new Map(demo.messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.content]));
  for (const m of demo.messages) {
    for (const call of m.tool_calls ?? []) {
      const expression = JSON.parse(call.function.arguments).expression;
      const expected = results.get(call.id);
      if (expected === undefined) continue;
      toolResults++;
      if (expected.startsWith("error:")) toolErrors++;
      const got = calculator(expression);
      if (got !== expected) mismatches.push({ what: "calculator", expression, expected, got });
    }
  }
}
// Demos never hold a failed call: the error texts docs/tasks.md documents.
for (const [expression, expected] of [["7/2", "error: result is not an integer (7/2)"],
  ["2**3", "error: expected a number, found '*' at column 3"]]) {
  toolResults++;
  toolErrors++;
  const got = calculator(expression);
  if (got !== expected) mismatches.push({ what: "calculator (docs/tasks.md)", expression, expected, got });
}

// (2) The judge, on answers of every kind for generated tasks (training and validation splits).
const tasks = [
  ...jsonl(run(["tasks", "generate", "--task", "calc", "--n", "12", "--seed", "5"])),
  ...jsonl(run(["tasks", "generate", "--task", "calc", "--n", "4", "--seed", "5", "--split", "val"])),
];
const requests = [];
for (const task of tasks) {
  const a = BigInt(task.metadata.answer);
  const abs = a < 0n ? -a : a;
  for (const text of [
    `<answer>${a}</answer>`, `<answer> ${a}\n</answer>`, `The result is <answer>${a + 1n}</answer>.`,
    `<answer>+${abs}</answer>`, `<answer>${a}.0</answer>`, `<answer>0${abs}</answer>`, `<answer>-0</answer>`,
    `<answer>${a}</answer> or <answer>${a}</answer>`, `${a}`, `<answer>${a}`, `<answer></answer>`,
    `<answer>1,000</answer>`, `<answer>${-a}</answer>`,
  ]) requests.push({ task, answer: text });
  requests.push({ task, messages: [
    { role: "user", content: task.main_query },
    { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function",
      function: { name: "calculator", arguments: JSON.stringify({ expression: task.metadata.expression }) } }] },
  ] });
  requests.push({ task, messages: [
    { role: "user", content: task.main_query },
    { role: "assistant", content: `<answer>${a}</answer>` },
  ] });
}
const verdicts = jsonl(run(["tasks", "judge"], requests.map((r) => JSON.stringify(r)).join("\n") + "\n"));
if (verdicts.length !== requests.length) {
  mismatches.push({ what: "judge", detail: `${requests.length} requests, ${verdicts.length} verdicts` });
}
const reasons = new Set();
verdicts.forEach((v, i) => {
  const r = requests[i];
  const got = r.messages ? judgeEpisode(r.task, r.messages) : judgeAnswer(r.task, r.answer);
  reasons.add(v.reason);
  if (got.reward !== v.reward || got.reason !== v.reason || got.is_success !== v.is_success) {
    mismatches.push({ what: "judge", request: r.answer ?? r.messages, expected: v, got });
  }
});

console.log(JSON.stringify({
  ok: mismatches.length === 0, tool_results: toolResults, tool_errors: toolErrors, verdicts: verdicts.length,
  reasons: [...reasons].sort(), mismatches: mismatches.slice(0, 20),
}));
process.exit(mismatches.length === 0 ? 0 : 1);
