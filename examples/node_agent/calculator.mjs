// A safe arithmetic evaluator for the calculator tool (recursive descent; never eval):
// numbers, + - * / %, parentheses, unary minus.
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
