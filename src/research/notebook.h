// The study's lab notebook (notebook.md, plots/*.svg in the study directory) and the status text of
// `ajet research status`, both made from the journal alone: the plan, the trials' table, the
// curves, the objective against each searched parameter, the decision log and the conclusion. Files
// are written atomically (a reader never sees half a notebook); nothing here changes the journal.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "research/journal.h"
#include "research/study.h"

namespace ajet::research {

void write_notebook(const std::filesystem::path& dir, const Study& study, Journal& journal,
                    double wall_s);

// Progress for a terminal: phase, trials running / done / failed, the best so far, budgets left.
std::string status_text(const Study& study, Journal& journal);

// SVG charts (self-contained, no scripts). A series is a name and (x, y) points.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool hollow = false;  // drawn as open markers (trials stopped before the objective step)
};
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series);
// x: numbers (log scale when `log_x`), or categories when `categories` is not empty (x = index).
std::string svg_scatter(const std::string& title, const std::string& x_label,
                        const std::string& y_label, const std::vector<Series>& series, bool log_x,
                        const std::vector<std::string>& categories);

}  // namespace ajet::research
