#include "research/notebook.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/fs.h"
#include "common/time_text.h"
#include "research/controller.h"

namespace ajet::research {
namespace fs = std::filesystem;
namespace {

// Eight colours that stay apart on white (Okabe-Ito plus two); series past eight repeat them.
const char* const kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                "#E69F00", "#56B4E9", "#000000", "#999999"};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// Markdown table cells: a pipe or a newline would break the row.
std::string cell(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else
      out.push_back(c);
  }
  return out;
}

std::string num(double v) { return fmt::format("{:.4g}", v); }

struct Frame {
  double x0, x1, y0, y1;
  bool log_x = false;
  static constexpr double kW = 640, kH = 360, kLeft = 60, kRight = 170, kTop = 30, kBottom = 45;
  double px(double x) const {
    const double a = log_x ? std::log10(x0) : x0, b = log_x ? std::log10(x1) : x1;
    const double v = log_x ? std::log10(x) : x;
    return kLeft + (b > a ? (v - a) / (b - a) : 0.5) * (kW - kLeft - kRight);
  }
  double py(double y) const {
    return kTop + (y1 > y0 ? (y1 - y) / (y1 - y0) : 0.5) * (kH - kTop - kBottom);
  }
};

std::string svg_frame(const Frame& f, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<std::string>& categories) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"18\" font-size=\"13\">{3}</text>\n",
      Frame::kW, Frame::kH, Frame::kLeft, xml_escape(title));
  const double bottom = Frame::kH - Frame::kBottom, right = Frame::kW - Frame::kRight;
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333\"/>\n",
                   Frame::kLeft, bottom, right);
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\"/>\n",
                   Frame::kLeft, Frame::kTop, bottom);
  for (int i = 0; i <= 4; ++i) {
    const double y = f.y0 + (f.y1 - f.y0) * i / 4;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                     Frame::kLeft - 4, f.py(y) + 4, num(y));
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#eee\"/>\n",
                     Frame::kLeft, f.py(y), right, f.py(y));
  }
  if (!categories.empty()) {
    for (size_t i = 0; i < categories.size(); ++i) {
      std::string c = categories[i].size() > 14 ? categories[i].substr(0, 13) + "…" : categories[i];
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       f.px(double(i)), bottom + 14, xml_escape(c));
    }
  } else {
    for (int i = 0; i <= 4; ++i) {
      const double x =
          f.log_x ? std::pow(10.0, std::log10(f.x0) + (std::log10(f.x1) - std::log10(f.x0)) * i / 4)
                  : f.x0 + (f.x1 - f.x0) * i / 4;
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", f.px(x),
                       bottom + 14, num(x));
    }
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                   (Frame::kLeft + right) / 2, Frame::kH - 8, xml_escape(x_label));
  s += fmt::format(
      "<text x=\"14\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
      "{:.1f})\">{}</text>\n",
      (Frame::kTop + bottom) / 2, (Frame::kTop + bottom) / 2, xml_escape(y_label));
  return s;
}

Frame fit(const std::vector<Series>& series, bool log_x, size_t categories) {
  Frame f{0, 1, 0, 1, log_x};
  bool any = false;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      if (log_x && x <= 0) continue;
      if (!any) {
        f.x0 = f.x1 = x;
        f.y0 = f.y1 = y;
        any = true;
      }
      f.x0 = std::min(f.x0, x);
      f.x1 = std::max(f.x1, x);
      f.y0 = std::min(f.y0, y);
      f.y1 = std::max(f.y1, y);
    }
  }
  if (categories > 0) {
    f.x0 = -0.5;
    f.x1 = double(categories) - 0.5;
  }
  if (f.y1 - f.y0 < 1e-9) {
    f.y0 -= 0.05;
    f.y1 += 0.05;
  }
  if (f.x1 - f.x0 < 1e-12) {
    if (log_x) {
      f.x0 /= 2;
      f.x1 *= 2;
    } else {
      f.x0 -= 1;
      f.x1 += 1;
    }
  }
  return f;
}

// Series 8 and on reuse the 8 colours, dashed (then dotted), so no two lines of a chart look alike.
std::string dash(size_t i) {
  switch ((i / 8) % 3) {
    case 0: return "";
    case 1: return " stroke-dasharray=\"6 3\"";
    default: return " stroke-dasharray=\"2 2\"";
  }
}

std::string legend(const std::vector<Series>& series) {
  std::string s;
  for (size_t i = 0; i < series.size() && i < 20; ++i) {
    const double y = Frame::kTop + 14.0 * double(i);
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"2.5\"{}/>",
        Frame::kW - Frame::kRight + 8, y + 5, Frame::kW - Frame::kRight + 22, y + 5,
        kColours[i % 8], dash(i));
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", Frame::kW - Frame::kRight + 26,
                     y + 9, xml_escape(series[i].name));
  }
  return s;
}

std::string params_text(const TrialRow& t, const TrialRow* base) {
  if (t.role == "base") return "(base)";
  std::vector<std::string> diff;
  for (const auto& [name, value] : t.params) {
    if (base && base->params.count(name) && base->params.at(name) == value) continue;
    diff.push_back(name + "=" + value_text(value));
  }
  return diff.empty() ? "(same as base)" : fmt::format("{}", fmt::join(diff, ", "));
}

std::string plan_section(const Study& study, Journal& journal, const Params& base_values) {
  std::string md = "## Plan\n\n";
  md += fmt::format("**Objective:** {} `{}` at RL step {} (validation every {} steps).\n\n",
                    study.objective.maximize ? "maximise" : "minimise", study.objective.metric,
                    study.objective.step, validation_interval(study));
  const Json plan = parse_json(journal.meta("plan").value_or("{}"), "journal plan");
  if (plan.contains("runner"))
    md += "**Trials run as:** " + plan.value("runner", std::string()) + ".\n\n";
  md += "| parameter | config key | space | base |\n|:--|:--|:--|:--|\n";
  for (const Param& p : study.space) {
    std::string space;
    if (p.kind == Param::Kind::kChoice) {
      std::vector<std::string> vs;
      for (const Json& v : p.choices) vs.push_back(value_text(v));
      space = "choice: " + fmt::format("{}", fmt::join(vs, " / "));
    } else {
      space = fmt::format("{} [{}, {}]",
                          p.kind == Param::Kind::kLogUniform ? "log-uniform"
                          : p.kind == Param::Kind::kInt      ? "int"
                                                             : "uniform",
                          num(p.low), num(p.high));
    }
    const auto b = base_values.find(p.name);
    md += fmt::format("| {} | `{}` | {} | {} |\n", cell(p.name), p.key, cell(space),
                      b == base_values.end() ? "-" : cell(value_text(b->second)));
  }
  if (!study.fixed.empty()) {
    md += "\nFixed for every trial:";
    for (const auto& [k, v] : study.fixed) md += fmt::format(" `{}={}`", k, value_text(v));
    md += "\n";
  }
  md += "\n**Hypotheses** (" + plan.value("proposer", std::string("built-in")) + "):\n\n";
  for (const Json& h : plan.value("hypotheses", Json::array()))
    md += fmt::format("- {}\n", h.get<std::string>());
  const auto& s = study.stopping;
  md += "\n**Decision tree:**\n\n";
  md += fmt::format(
      "1. Round 1: the base config and {} candidates, each on seed {}, at most {} at a time.\n",
      std::max<int64_t>(0, std::min(study.round_size, study.budget.trials) - 1), study.search_seed,
      study.parallel);
  if (s.rungs.empty()) {
    md += "2. No rungs: every trial runs to the objective step.\n";
  } else {
    md += fmt::format(
        "2. At each rung (steps {}), a trial continues when it ranks among the top max(1, n/{}) of "
        "the n "
        "trials that reached that rung so far; otherwise it is stopped.\n",
        fmt::join(s.rungs, ", "), s.eta);
  }
  if (s.plateau_patience > 0) {
    md += fmt::format(
        "3. Plateau: a trial whose best of its last {} validations does not beat its earlier best "
        "by more "
        "than {} is stopped.\n",
        s.plateau_patience, s.plateau_min_delta);
  } else {
    md += "3. No plateau rule.\n";
  }
  md += fmt::format(
      "4. A crashed trial (or one whose trial server did not answer) continues from its newest "
      "checkpoint, "
      "at most {} launches; then it is recorded as failed with its log tail.\n",
      study.budget.max_attempts);
  md += fmt::format(
      "5. Further rounds of {} while the trial budget ({}) and the wall budget ({:.0f} s) allow: "
      "half local "
      "moves around the two best trials, half random points.\n",
      study.round_size, study.budget.trials, study.budget.wall_seconds);
  if (study.confirm_seeds.empty()) {
    md += "6. No confirmation seeds: the best of the search is reported unconfirmed.\n\n";
  } else {
    md += fmt::format(
        "6. The best of the search and the base config run again on fresh seeds {}; the best is "
        "called "
        "best only when it beats the base on every one of them (and so on their mean).\n\n",
        fmt::join(study.confirm_seeds, ", "));
  }
  return md;
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series) {
  const Frame f = fit(series, false, 0);
  std::string s = svg_frame(f, title, x_label, y_label, {});
  for (size_t i = 0; i < series.size(); ++i) {
    std::string pts;
    for (const auto& [x, y] : series[i].points)
      pts += fmt::format("{:.1f},{:.1f} ", f.px(x), f.py(y));
    s += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>\n",
        kColours[i % 8], dash(i), pts);
    for (const auto& [x, y] : series[i].points) {
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", f.px(x),
                       f.py(y), kColours[i % 8]);
    }
  }
  return s + legend(series) + "</svg>\n";
}

std::string svg_scatter(const std::string& title, const std::string& x_label,
                        const std::string& y_label, const std::vector<Series>& series, bool log_x,
                        const std::vector<std::string>& categories) {
  const Frame f = fit(series, log_x, categories.size());
  std::string s = svg_frame(f, title, x_label, y_label, categories);
  for (size_t i = 0; i < series.size(); ++i) {
    for (const auto& [x, y] : series[i].points) {
      if (log_x && x <= 0) continue;
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" stroke=\"{}\" "
          "stroke-width=\"1.5\"/>\n",
          f.px(x), f.py(y), series[i].hollow ? "none" : kColours[i % 8], kColours[i % 8]);
    }
  }
  return s + legend(series) + "</svg>\n";
}

void write_notebook(const fs::path& dir, const Study& study, Journal& journal, double wall_s) {
  const std::vector<TrialRow> trials = journal.trials();
  const std::vector<Point> points = journal.points();
  const std::vector<Decision> decisions = journal.decisions();
  const TrialRow* base = nullptr;
  for (const TrialRow& t : trials) {
    if (t.role == "base") base = &t;
  }
  std::map<int64_t, std::map<int64_t, double>> by_trial;
  std::set<int64_t> steps;
  for (const Point& p : points) {
    by_trial[p.trial][p.step] = p.value;
    steps.insert(p.step);
  }
  const std::string phase = journal.meta("phase").value_or(kPhaseSearch);

  // Plots: every trial's curve, and the objective against each searched parameter.
  fs::create_directories(dir / "plots");
  std::vector<Series> curves;
  for (const TrialRow& t : trials) {
    Series s{t.name, {}};
    for (const auto& [step, v] : by_trial[t.id]) s.points.emplace_back(double(step), v);
    if (!s.points.empty()) curves.push_back(std::move(s));
  }
  write_file_atomic(dir / "plots" / "curves.svg",
                    svg_line_chart("Every trial's " + study.objective.metric, "RL step",
                                   study.objective.metric, curves));
  std::vector<std::string> plots = {"curves.svg"};
  for (const Param& p : study.space) {
    // Completed trials at the objective step (filled), stopped ones at their last value (open).
    Series done{"completed", {}}, stopped{"stopped early (last value)", {}, true};
    std::vector<std::string> categories;
    if (p.kind == Param::Kind::kChoice) {
      for (const Json& c : p.choices) categories.push_back(value_text(c));
    }
    for (const TrialRow& t : trials) {
      if (t.role == "confirm") continue;
      const auto it = t.params.find(p.name);
      if (it == t.params.end() || by_trial[t.id].empty()) continue;
      double x = 0;
      if (p.kind == Param::Kind::kChoice) {
        const auto c = std::find(p.choices.begin(), p.choices.end(), it->second);
        if (c == p.choices.end()) continue;
        x = double(c - p.choices.begin());
      } else if (it->second.is_number()) {
        x = it->second.get<double>();
      } else {
        continue;
      }
      if (t.status == kCompleted && t.result) {
        done.points.emplace_back(x, *t.result);
      } else if (t.status != kPending) {
        stopped.points.emplace_back(x, by_trial[t.id].rbegin()->second);
      }
    }
    const std::string file = "param_" + p.name + ".svg";
    write_file_atomic(dir / "plots" / file,
                      svg_scatter(study.objective.metric + " against " + p.name,
                                  p.name + " (" + p.key + ")", study.objective.metric,
                                  {done, stopped}, p.kind == Param::Kind::kLogUniform, categories));
    plots.push_back(file);
  }

  std::string md = "# Research notebook";
  if (!study.question.empty()) md += ": " + study.question;
  md += "\n\n";
  int64_t search_used = 0;
  for (const TrialRow& t : trials) search_used += t.role != "confirm" ? 1 : 0;
  md += fmt::format(
      "Study `{}`; base config `{}`; trials run in `{}`. Phase **{}**; {} of {} search trials; "
      "wall time "
      "{:.0f} of {:.0f} s. Updated {}.\n\n",
      study.file.string(), study.base.string(), study.workdir.string(), phase, search_used,
      study.budget.trials, wall_s, study.budget.wall_seconds, local_time_text("%Y-%m-%d %H:%M:%S"));
  if (const auto c = journal.meta("conclusion")) {
    md += "## Conclusion\n\n" + *c + "\n\n";
    if (const auto prose = journal.meta("conclusion_prose")) md += *prose + "\n\n";
  }
  md += plan_section(study, journal, base ? base->params : Params{});

  md += "## Trials\n\n| trial | round | config (diff from base) | seed | status |";
  for (int64_t s : steps) md += fmt::format(" step {} |", s);
  md += " time s | note |\n|:--|--:|:--|--:|:--|";
  for (size_t i = 0; i < steps.size(); ++i) md += "--:|";
  md += "--:|:--|\n";
  for (const TrialRow& t : trials) {
    std::string config = params_text(t, base);
    if (t.role == "confirm") {
      for (const TrialRow& of : trials) {
        if (t.confirms && of.id == *t.confirms) config = "confirms " + of.name;
      }
    }
    md += fmt::format("| {} | {} | {} | {} | {} |", t.name,
                      t.round == 0 ? "-" : std::to_string(t.round), cell(config), t.seed, t.status);
    for (int64_t s : steps) {
      const auto it = by_trial[t.id].find(s);
      md += it == by_trial[t.id].end() ? std::string(" |") : fmt::format(" {} |", num(it->second));
    }
    md += fmt::format(
        " {:.0f} | {} |\n", t.runtime_s,
        cell(t.reason + (t.attempts > 0 ? fmt::format(" (failed attempts: {})", t.attempts) : "")));
  }
  md += "\n## Plots\n\n";
  for (const std::string& p : plots) md += "![" + p + "](plots/" + p + ")\n\n";

  md += "## Decision log\n\n| # | time | decision | trial | reason |\n|--:|:--|:--|:--|:--|\n";
  std::map<int64_t, std::string> names;
  for (const TrialRow& t : trials) names[t.id] = t.name;
  for (const Decision& d : decisions) {
    md += fmt::format("| {} | {} | {} | {} | {} |\n", d.id, d.time, d.kind,
                      d.trial ? names[*d.trial] : "", cell(d.reason));
  }
  bool any_failed = false;
  for (const TrialRow& t : trials) {
    if (t.error.empty()) continue;
    if (!any_failed) md += "\n## Crashes and unreachable servers: log tails\n";
    any_failed = true;
    md += fmt::format("\n### {} ({}, {})\n\n```\n{}\n```\n", t.name, t.status, t.reason, t.error);
  }
  write_file_atomic(dir / "notebook.md", md);
}

std::string status_text(const Study& study, Journal& journal) {
  const std::vector<TrialRow> trials = journal.trials();
  std::map<std::string, int64_t> count;
  int64_t search_used = 0;
  const TrialRow* best = nullptr;
  std::vector<std::string> running;
  for (const TrialRow& t : trials) {
    count[t.status] += 1;
    search_used += t.role != "confirm" ? 1 : 0;
    if (t.status == kRunning) running.push_back(t.name);
    if (t.role != "confirm" && t.status == kCompleted && t.result &&
        (!best ||
         (study.objective.maximize ? *t.result > *best->result : *t.result < *best->result))) {
      best = &t;
    }
  }
  const double wall = journal.meta_double("wall_s").value_or(0);
  std::string out = fmt::format("study: {}\nphase: {}\n",
                                study.question.empty() ? study.file.string() : study.question,
                                journal.meta("phase").value_or(kPhaseSearch));
  out += fmt::format(
      "trials: {} running{}, {} pending, {} completed, {} stopped, {} failed\n", count[kRunning],
      running.empty() ? "" : " (" + fmt::format("{}", fmt::join(running, ", ")) + ")",
      count[kPending], count[kCompleted], count[kStopped], count[kFailed]);
  if (best) {
    std::string diff;
    for (const auto& [k, v] : best->params)
      diff += (diff.empty() ? "" : ", ") + k + "=" + value_text(v);
    out += fmt::format("best so far: {} ({}) {} = {} at step {}\n", best->name,
                       best->role == "base" ? "base" : diff, study.objective.metric,
                       num(*best->result), study.objective.step);
  } else {
    out += "best so far: none yet\n";
  }
  out += fmt::format("budget left: {} of {} search trials, {:.0f} of {:.0f} s wall time\n",
                     std::max<int64_t>(0, study.budget.trials - search_used), study.budget.trials,
                     std::max(0.0, study.budget.wall_seconds - wall), study.budget.wall_seconds);
  for (const TrialRow& t : trials) {
    if (t.status == kFailed) out += fmt::format("failed: {}: {}\n", t.name, t.reason);
  }
  if (const auto c = journal.meta("conclusion")) out += "conclusion: " + *c + "\n";
  return out;
}

}  // namespace ajet::research
