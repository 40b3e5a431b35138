// Arithmetic for the example agents. `evaluate`: a loose evaluator (numbers, + - * / %, parentheses,
// unary minus; never eval) for the agents' own questions. The rest is the built-in `calc` task on the
// client side, following docs/tasks.md: the `calculator` tool (exact integer arithmetic, errors as
// text for the model) and the judge (exactly one <answer>N</answer> in the final reply, N a plain
// integer equal to the true value). src/tasks (`ajet tasks judge`) is the reference and
// tests/examples checks that they agree; this copy lets an agent run without `ajet`.

export function evaluate(expression) {
  const src = String(expression);
  if (src.length > 200) throw new Error("expression too long");
  let i = 0;
  const peek = () => { while (src[i] === " ") i++; return src[i]; };
  const number = () => {
    const m = /^\d+(\.\d+)?/.exec(src.slice(i));
    if (!m) throw new Error(`number expected at ${i} in ${JSON.stringify(src)}`);
    i += m[0].length;
    return Number(m[0]);
  };
  const factor = () => {
    const c = peek();
    if (c === "-") { i++; return -factor(); }
    if (c === "+") { i++; return factor(); }
    if (c === "(") {
      i++;
      const v = sum();
      if (peek() !== ")") throw new Error(`')' expected at ${i}`);
      i++;
      return v;
    }
    return number();
  };
  const product = () => {
    let v = factor();
    for (let c = peek(); c === "*" || c === "/" || c === "%"; c = peek()) {
      i++;
      const r = factor();
      v = c === "*" ? v * r : c === "/" ? v / r : v % r;
    }
    return v;
  };
  const sum = () => {
    let v = product();
    for (let c = peek(); c === "+" || c === "-"; c = peek()) {
      i++;
      v = c === "+" ? v + product() : v - product();
    }
    return v;
  };
  const v = sum();
  if (peek() !== undefined) throw new Error(`unexpected ${JSON.stringify(src[i])} at ${i}`);
  return v;
}

// The tool exactly as `ajet tasks generate --task calc` writes it into metadata.tools (sorted keys:
// the chat template prints it byte for byte, so every client shows the model the same prompt).
export const CALCULATOR_TOOL = {
  function: {
    description: "Evaluate an integer expression.",
    name: "calculator",
    parameters: { properties: { expression: { type: "string" } }, required: ["expression"], type: "object" },
  },
  type: "function",
};
export const SYSTEM_PROMPT = "Use the calculator tool, then reply <answer>N</answer>.";
export const MAX_TOOL_CALLS = 3;

const kMaxLength = 256; // bytes
const kMaxDepth = 32;
const kMaxDigits = 18;
const kMax = (1n << 63n) - 1n;

class ExprError extends Error {}

// An exact fraction {num, den}, den > 0, reduced; "number too large (overflow)" past int64.
function rational(num, den) {
  if (den === 0n) throw new ExprError("division by zero");
  if (den < 0n) [num, den] = [-num, -den];
  let a = num < 0n ? -num : num, b = den;
  while (b !== 0n) [a, b] = [b, a % b];
  if (a > 1n) [num, den] = [num / a, den / a];
  if (num > kMax || num < -kMax || den > kMax) throw new ExprError("number too large (overflow)");
  return { num, den };
}

// Recursive descent over the bytes of the text, as src/tasks/expression.cc: the whole text is parsed
// first (a syntax error anywhere wins), the first arithmetic error is remembered and reported after.
function evaluateExact(text) {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length > kMaxLength) throw new ExprError(`expression too long (${bytes.length} bytes, at most ${kMaxLength})`);
  let pos = 0, arithmeticError = null;
  const ch = (i) => String.fromCharCode(bytes[i]);
  const failAt = (what) => { throw new ExprError(`${what} at column ${pos + 1}`); };
  const skipSpace = () => { while (pos < bytes.length && " \t\n\r".includes(ch(pos))) pos++; };
  const eat = (c) => {
    skipSpace();
    if (pos < bytes.length && ch(pos) === c) { pos++; return true; }
    return false;
  };
  const guarded = (f) => {
    if (arithmeticError !== null) return { num: 0n, den: 1n };
    try {
      return f();
    } catch (e) {
      if (!(e instanceof ExprError)) throw e;
      arithmeticError = e.message;
      return { num: 0n, den: 1n };
    }
  };
  const expr = (depth) => {
    let v = term(depth);
    for (;;) {
      if (eat("+")) { const r = term(depth); v = guarded(() => rational(v.num * r.den + r.num * v.den, v.den * r.den)); }
      else if (eat("-")) { const r = term(depth); v = guarded(() => rational(v.num * r.den - r.num * v.den, v.den * r.den)); }
      else return v;
    }
  };
  const term = (depth) => {
    let v = unary(depth);
    for (;;) {
      if (eat("*")) { const r = unary(depth); v = guarded(() => rational(v.num * r.num, v.den * r.den)); }
      else if (eat("/")) {
        const r = unary(depth);
        v = guarded(() => {
          if (r.num === 0n) throw new ExprError("division by zero");
          return rational(v.num * r.den, v.den * r.num);
        });
      } else return v;
    }
  };
  const unary = (depth) => {
    if (eat("-")) {
      if (depth >= kMaxDepth) failAt("nested too deeply");
      const r = unary(depth + 1);
      return guarded(() => rational(-r.num, r.den));
    }
    return primary(depth);
  };
  const primary = (depth) => {
    skipSpace();
    if (pos >= bytes.length) failAt("expected a number");
    const c = ch(pos);
    if (c === "(") {
      if (depth >= kMaxDepth) failAt("nested too deeply");
      pos++;
      const v = expr(depth + 1);
      if (!eat(")")) {
        skipSpace();
        failAt(pos < bytes.length ? `expected ')' but found '${ch(pos)}'` : "missing ')'");
      }
      return v;
    }
    if (c >= "0" && c <= "9") {
      const begin = pos;
      while (pos < bytes.length && ch(pos) >= "0" && ch(pos) <= "9") pos++;
      if (pos - begin > kMaxDigits) {
        pos = begin;
        failAt("number too long");
      }
      if (pos < bytes.length && (ch(pos) === "." || ch(pos) === ",")) failAt(`only integers are allowed, found '${ch(pos)}'`);
      return { num: BigInt(bytes.subarray(begin, pos).toString("latin1")), den: 1n };
    }
    failAt(`expected a number, found '${c}'`);
  };
  const v = expr(0);
  skipSpace();
  if (pos < bytes.length) failAt(`unexpected '${ch(pos)}'`);
  if (arithmeticError !== null) throw new ExprError(arithmeticError);
  return v;
}

// The calculator's answer to `expression`: the integer as text ("163", "-12"), or "error: <reason>"
// (the same text as the server-side tool; never throws).
export function calculator(expression) {
  try {
    const v = evaluateExact(String(expression ?? ""));
    if (v.den !== 1n) return `error: result is not an integer (${v.num}/${v.den})`;
    return String(v.num);
  } catch (e) {
    if (e instanceof ExprError) return `error: ${e.message}`;
    throw e;
  }
}

// The task's true value: metadata.answer, else the value of metadata.expression.
export function expectedAnswer(task) {
  const m = task.metadata ?? {};
  if (Number.isInteger(m.answer)) return BigInt(m.answer);
  if (typeof m.answer === "string" && /^-?\d+$/.test(m.answer)) return BigInt(m.answer);
  if (typeof m.expression === "string") {
    const v = calculator(m.expression);
    if (!v.startsWith("error")) return BigInt(v);
  }
  throw new Error(`task ${task.task_id}: metadata needs an integer 'answer' or an 'expression'`);
}

// {reward, is_success, reason, answer?} for one final reply (the rules of `ajet tasks judge`).
export function judgeAnswer(task, text) {
  const open = "<answer>", close = "</answer>";
  const s = String(text ?? "");
  let count = 0, first = null;
  for (let pos = 0; ;) {
    const b = s.indexOf(open, pos);
    if (b < 0) break;
    const e = s.indexOf(close, b + open.length);
    if (e < 0) break;
    count++;
    if (first === null) first = s.slice(b + open.length, e);
    pos = e + close.length;
  }
  const no = (reason, answer) => ({ reward: 0, is_success: false, reason, ...(answer !== undefined && { answer }) });
  if (first === null) return no("no_answer");
  const given = first.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  if (count > 1) return no("multiple_answers", given);
  // A plain integer: optional '-', no leading zeros, no "-0", at most 18 digits.
  if (!/^-?(0|[1-9]\d{0,17})$/.test(given) || given === "-0") return no("bad_answer_format", given);
  if (BigInt(given) !== expectedAnswer(task)) return no("wrong_answer", given);
  return { reward: 1, is_success: true, reason: "correct", answer: given };
}

// Judges a whole conversation (OpenAI messages) as the built-in agent would: the last assistant
// reply must be a final answer; a conversation that ends on a tool call has none.
export function judgeEpisode(task, messages) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m.role !== "assistant") continue;
    if (m.tool_calls?.length) break;
    return judgeAnswer(task, typeof m.content === "string" ? m.content : "");
  }
  return { reward: 0, is_success: false, reason: "no_answer" };
}
