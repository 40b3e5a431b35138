// The check harness the SDK drivers share (openai_sdk_swarm.mjs, openai_responses_swarm.mjs,
// anthropic_sdk_swarm.mjs): named checks that record a failure instead of stopping, and one JSON
// report on stdout ({"ok": bool, "checks": [{"name", "ok", "detail"?}]}) for the C++ test to read.
export const checks = [];

export function expect(cond, message) {
  if (!cond) throw new Error(message);
}

export function eq(actual, expected, what) {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: expected ${e}, got ${a}`);
}

export async function check(name, fn) {
  try {
    await fn();
    checks.push({ name, ok: true });
  } catch (e) {
    checks.push({ name, ok: false, detail: `${e?.constructor?.name}: ${e?.message}\n${e?.stack ?? ""}`.slice(0, 2000) });
  }
}

// Prints the report and exits 0 iff every check passed.
export function report() {
  const ok = checks.every((c) => c.ok);
  console.log(JSON.stringify({ ok, checks }));
  process.exit(ok ? 0 : 1);
}
