"""A safe arithmetic evaluator for the calculator tool: numbers, + - * / ** %, parentheses, unary
minus. Uses Python's own parser (ast) and evaluates only those nodes, never eval()."""

import ast
import operator
import re
from fractions import Fraction

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(expression: str, exact: bool = False):
    """The value of `expression` (exact: a Fraction); ValueError naming what is not allowed."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return Fraction(node.value) if exact else node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        raise ValueError(f"not allowed in an arithmetic expression: {ast.dump(node)[:60]}")

    if len(expression) > 200:
        raise ValueError("expression too long")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot parse {expression!r}") from e
    return walk(tree)


# The built-in `calc` task (docs/tasks.md) on the client side: the calculator's reply (exact values,
# a fraction is an error; error texts are Python's, not src/tasks') and the judge of the final reply
# (exactly one <answer>N</answer>, N a plain integer). `ajet tasks judge` is the reference.
CALC_SYSTEM_PROMPT = "Use the calculator tool, then reply <answer>N</answer>."
CALC_TOOL = {"function": {"description": "Evaluate an integer expression.", "name": "calculator",
                          "parameters": {"properties": {"expression": {"type": "string"}}, "required": ["expression"],
                                         "type": "object"}}, "type": "function"}
CALC_MAX_TOOL_CALLS = 3
_PLAIN_INTEGER = re.compile(r"-?(0|[1-9][0-9]{0,17})")


def calc_tool_result(expression) -> str:
    """The calculator's reply to one call: the integer as text, or "error: …"."""
    try:
        value = evaluate(str(expression), exact=True)
    except (ValueError, ZeroDivisionError) as e:
        return f"error: {'division by zero' if isinstance(e, ZeroDivisionError) else e}"
    if value.denominator != 1:
        return f"error: result is not an integer ({value.numerator}/{value.denominator})"
    return str(value.numerator)


def judge_calc_answer(task, text):
    """{"reward", "is_success", "reason"} for a final reply, by the rules of `ajet tasks judge`."""
    inner = re.findall(r"<answer>(.*?)</answer>", text or "", flags=re.S)
    if not inner:
        return {"reward": 0.0, "is_success": False, "reason": "no_answer"}
    given = inner[0].strip(" \t\r\n")
    if len(inner) > 1:
        return {"reward": 0.0, "is_success": False, "reason": "multiple_answers"}
    if not _PLAIN_INTEGER.fullmatch(given) or given == "-0":
        return {"reward": 0.0, "is_success": False, "reason": "bad_answer_format"}
    if int(given) != int(task["metadata"]["answer"]):
        return {"reward": 0.0, "is_success": False, "reason": "wrong_answer"}
    return {"reward": 1.0, "is_success": True, "reason": "correct"}


def judge_calc_episode(task, messages):
    """Judges a conversation: the last assistant reply must be a final answer (not a tool call)."""
    for m in reversed(messages):
        if m.get("role") != "assistant":
            continue
        if m.get("tool_calls"):
            break
        return judge_calc_answer(task, m.get("content") if isinstance(m.get("content"), str) else "")
    return {"reward": 0.0, "is_success": False, "reason": "no_answer"}
