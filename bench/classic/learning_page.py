#!/usr/bin/env python3
"""Draws the record of fresh runs of the main command (bench/records/fresh_runs.jsonl) as one static
page, docs/learning.html, so that a commit that made RL learn less shows at a glance.

Two charts of inline SVG, one column per commit (runs of an unknown or dirty tree: one column per
fresh_runs.sh invocation), in commit order (the commit's date; the run's date where the commit is
unknown): the held-out T=1 success after RL of every run, and the RL gain of every run, each with the
median per column and the target of issue 13 (median final T=1 >= 90 %, every gain >= 25 points).
Below them, a table of the columns. The page needs no script and fetches nothing: it works opened
from file://. The records are also embedded as JSON (<script type="application/json"
id="fresh-runs">) for whoever wants the numbers.

  learning_page.py [--records bench/records/fresh_runs.jsonl] [--out docs/learning.html]

A malformed record line stops it with the file, the line and what is wrong (exit 2). Python 3
standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import html
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import learning_record  # noqa: E402

PAGE = os.path.join("docs", "learning.html")  # relative to the repository root
FINAL_TARGET = 90.0  # median final T=1 success, percent (issue 13)
GAIN_TARGET = 25.0  # every run's RL gain, points (issue 13)


def _instant(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


class Column:
    """The runs of one commit (or of one invocation, when the commit is unknown or the tree dirty)."""

    def __init__(self, key: str, first_index: int):
        self.key = key
        self.first_index = first_index
        self.runs: list[dict] = []

    @property
    def commit(self) -> str | None:
        return self.runs[0]["commit"]

    @property
    def dirty(self) -> bool:
        return any(r["dirty"] for r in self.runs)

    @property
    def when(self) -> datetime.datetime:
        first = self.runs[0]
        return _instant(first["commit_date"]) or _instant(first["date"])

    @property
    def name(self) -> str:
        if not self.commit:
            return "unknown"
        return self.commit[:7] + ("*" if self.dirty else "")

    @property
    def dates(self) -> list[str]:
        return sorted({r["date"][:10] for r in self.runs})

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(r["label"] for r in self.runs))

    def median(self, field: str) -> float:
        return statistics.median(r[field] for r in self.runs)

    @property
    def final_met(self) -> bool:
        return self.median("t1_after") >= FINAL_TARGET

    @property
    def gain_met(self) -> bool:
        return all(r["gain"] >= GAIN_TARGET for r in self.runs)


def columns(records: list[dict]) -> list[Column]:
    """The records grouped by commit (by invocation where it is unknown or dirty), in commit order."""
    by_key: dict[str, Column] = {}
    for i, r in enumerate(records):
        key = "commit " + r["commit"] if r["commit"] and not r["dirty"] else "batch " + r["batch"]
        by_key.setdefault(key, Column(key, i)).runs.append(r)
    return sorted(by_key.values(), key=lambda c: (c.when, c.first_index))


def _run_title(r: dict) -> str:
    commit = r["commit"][:7] + ("*" if r["dirty"] else "") if r["commit"] else "commit unknown"
    secs = f", {r['seconds_after_build']} s after the build" if r["seconds_after_build"] is not None else ""
    kind = ", backfilled from docs/benchmarks.md" if r["backfilled"] else ""
    return (f"seed {r['seed']}, {r['label']}, {commit}, {r['date'][:10]}: T=1 {r['t1_before']:.1f} → "
            f"{r['t1_after']:.1f} ({r['gain']:+.1f}), greedy {r['greedy_before']:.0f} → {r['greedy_after']:.0f}{secs}{kind}")


def _chart(cols: list[Column], field: str, title: str, target: float, target_text: str,
           low: float, high: float, run_below_target: bool) -> str:
    """One SVG chart: a column per Column, every run a dot, the median a bar, the target a line.
    `run_below_target`: colour each run below the target (gain); else the median (final)."""
    slot, left, right, top, bottom = 64, 48, 16, 28, 44
    plot_h = 200
    width = left + slot * max(len(cols), 1) + right
    height = top + plot_h + bottom
    y = lambda v: top + plot_h * (high - v) / (high - low)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">',
           f'<text x="{left}" y="16" class="title">{html.escape(title)}</text>']
    tick = 10 if high - low <= 120 else 20
    v = low
    while v <= high + 1e-9:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{y(v) + 3:.1f}" class="tick" text-anchor="end">{v:g}</text>')
        v += tick
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(target):.1f}" y2="{y(target):.1f}" class="target"/>'
               f'<text x="{width - right}" y="{y(target) - 4:.1f}" class="target-text" text-anchor="end">'
               f'{html.escape(target_text)}</text>')
    medians = []
    for i, col in enumerate(cols):
        cx = left + slot * i + slot / 2
        n = len(col.runs)
        for j, r in enumerate(col.runs):
            dx = (j - (n - 1) / 2) * min(8, slot * 0.6 / max(n, 1))
            below = run_below_target and r[field] < target
            cls = ("dot below" if below else "dot") + (" backfilled" if r["backfilled"] else "")
            out.append(f'<circle cx="{cx + dx:.1f}" cy="{y(r[field]):.1f}" r="3.5" class="{cls}">'
                       f'<title>{html.escape(_run_title(r))}</title></circle>')
        m = col.median(field)
        medians.append((cx, y(m)))
        bad = not col.final_met if not run_below_target else not col.gain_met
        out.append(f'<line x1="{cx - slot * 0.32:.1f}" x2="{cx + slot * 0.32:.1f}" y1="{y(m):.1f}" y2="{y(m):.1f}" '
                   f'class="median{" below" if bad else ""}"><title>median {m:.1f} over {n} run'
                   f'{"s" if n > 1 else ""}</title></line>')
        out.append(f'<text x="{cx:.1f}" y="{top + plot_h + 16}" class="col" text-anchor="middle">'
                   f'{html.escape(col.name)}</text>'
                   f'<text x="{cx:.1f}" y="{top + plot_h + 30}" class="col-date" text-anchor="middle">'
                   f'{html.escape(col.dates[0][5:])}</text>')
    if len(medians) > 1:
        points = " ".join(f"{x:.1f},{yy:.1f}" for x, yy in medians)
        out.append(f'<polyline points="{points}" class="median-path"/>')
    out.append("</svg>")
    return "\n".join(out)


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b1f24; max-width: 1200px; }
h1 { font-size: 20px; } .scroll { overflow-x: auto; }
svg .title { font-weight: 600; font-size: 13px; } svg .tick, svg .col-date { font-size: 10px; fill: #57606a; }
svg .col { font-size: 10px; font-family: ui-monospace, monospace; }
svg .grid { stroke: #e6e8eb; } svg .target { stroke: #cf222e; stroke-dasharray: 5 4; }
svg .target-text { font-size: 11px; fill: #cf222e; }
svg .dot { fill: #0969da; fill-opacity: 0.75; } svg .dot.backfilled { fill: #fff; stroke: #0969da; stroke-width: 1.5; }
svg .dot.below { fill: #cf222e; } svg .dot.below.backfilled { fill: #fff; stroke: #cf222e; }
svg .median { stroke: #1b1f24; stroke-width: 2.5; } svg .median.below { stroke: #cf222e; }
svg .median-path { fill: none; stroke: #1b1f24; stroke-opacity: 0.35; }
table { border-collapse: collapse; margin-top: 12px; } td, th { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; }
td.date { white-space: nowrap; } td.num { text-align: right; font-variant-numeric: tabular-nums; } .miss { color: #cf222e; font-weight: 600; }
code { font-family: ui-monospace, monospace; }
"""


def render(records: list[dict]) -> str:
    """The whole page (deterministic: the same records give the same bytes)."""
    cols = columns(records)
    head = ['<!DOCTYPE html>', '<html lang="en">', '<head>', '<meta charset="utf-8">',
            '<title>AgentJet: does RL still learn? The main command across commits</title>',
            f'<style>{_STYLE}</style>', '</head>', '<body>',
            '<h1>Does RL still learn? The main command across commits</h1>',
            '<p>Every dot is one fresh run of the main command (<code>scripts/run.sh</code> from an empty '
            'work directory, one seed) made by <code>bench/classic/fresh_runs.sh</code>: the held-out success '
            'of the calc agent at temperature 1 after RL, and how much RL added to it. One column per commit, '
            'oldest first (<code>*</code>: the tree had uncommitted changes; <em>unknown</em>: the commit was '
            'not recorded); the bar is the column\'s median. Red: below the target of issue 13 (median final '
            f'T=1 &ge; {FINAL_TARGET:g} %, every gain &ge; {GAIN_TARGET:g} points). Hollow dots were copied '
            'from the tables of docs/benchmarks.md written before the record existed. Hover a dot for its run. '
            'Source: <code>bench/records/fresh_runs.jsonl</code>; drawn by '
            '<code>bench/classic/learning_page.py</code>.</p>']
    if not cols:
        body = ['<p>No fresh runs recorded yet.</p>']
    else:
        finals = [r["t1_after"] for r in records]
        gains = [r["gain"] for r in records]
        gain_low = min(0.0, 10 * ((min(gains) - 5) // 10))
        gain_high = max(50.0, 10 * -((-(max(gains) + 5)) // 10))
        final_low = min(0.0, 10 * ((min(finals)) // 10))
        body = ['<div class="scroll">',
                _chart(cols, "t1_after", "Held-out success at T=1 after RL (%)", FINAL_TARGET,
                       f"target: median ≥ {FINAL_TARGET:g} %", final_low, 100.0, run_below_target=False),
                '</div>', '<div class="scroll">',
                _chart(cols, "gain", "RL gain in held-out T=1 success (points)", GAIN_TARGET,
                       f"target: every run ≥ +{GAIN_TARGET:g}", gain_low, gain_high, run_below_target=True),
                '</div>',
                '<table>', '<tr><th>commit</th><th>date</th><th>label</th><th>runs</th><th>median final T=1</th>'
                '<th>median gain (range)</th><th>warm-up gate</th><th>machine</th><th>learning targets</th></tr>']
        for col in cols:
            gains_c = [r["gain"] for r in col.runs]
            machines = sorted({r["cpu_model"] for r in col.runs if r["cpu_model"]})
            met = col.final_met and col.gain_met
            commit_cell = (f'<code title="{html.escape(col.commit)}">{html.escape(col.name)}</code>'
                           if col.commit else "unknown")
            body.append(
                f'<tr><td>{commit_cell}</td><td class="date">{", ".join(col.dates)}</td>'
                f'<td>{html.escape(", ".join(col.labels))}</td><td class="num">{len(col.runs)}</td>'
                f'<td class="num{"" if col.final_met else " miss"}">{col.median("t1_after"):.1f} %</td>'
                f'<td class="num{"" if col.gain_met else " miss"}">{col.median("gain"):+.1f} '
                f'({min(gains_c):+.1f} to {max(gains_c):+.1f})</td>'
                f'<td>{sum(r["gate_reached"] for r in col.runs)} of {len(col.runs)}</td>'
                f'<td>{html.escape("; ".join(machines)) or "—"}</td>'
                f'<td class="{"" if met else "miss"}">{"met" if met else "NOT met"}</td></tr>')
        body.append('</table>')
    data = json.dumps(records, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    tail = [f'<script type="application/json" id="fresh-runs">{data}</script>', '</body>', '</html>', '']
    return "\n".join(head + body + tail)


def write_page(records: list[dict], path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(render(records))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", default=os.path.join(repo, learning_record.RECORDS))
    p.add_argument("--out", default=os.path.join(repo, PAGE))
    a = p.parse_args(argv)
    try:
        records = learning_record.read_records(a.records)
    except learning_record.RecordError as e:
        print(f"learning_page: error: {e}", file=sys.stderr)
        return 2
    write_page(records, a.out)
    print(f"learning_page: {len(records)} runs in {len(columns(records))} columns → {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
