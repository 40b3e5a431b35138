#include "tasks/drills.h"

#include <string>

#include "common/error.h"
#include "tasks/rng.h"

namespace ajet::tasks {

namespace {

constexpr const char* kSystem = "Repeat the user's text exactly.";

void validate(const CopyDrillOptions& o) {
  if (o.count < 0)
    invalid_argument("copy drills: count must be >= 0, got " + std::to_string(o.count));
  if (o.min_terms < 1)
    invalid_argument("copy drills: min_terms must be >= 1, got " + std::to_string(o.min_terms));
  if (o.max_terms < o.min_terms || o.max_terms > 64) {
    invalid_argument("copy drills: max_terms must be in [min_terms, 64], got " +
                     std::to_string(o.max_terms));
  }
  if (o.max_number < 1)
    invalid_argument("copy drills: max_number must be >= 1, got " + std::to_string(o.max_number));
}

}  // namespace

std::vector<Demo> copy_drills(const CopyDrillOptions& options) {
  validate(options);
  static const std::vector<char> kOps = {'+', '-', '*'};
  std::vector<Demo> out;
  out.reserve(static_cast<size_t>(options.count));
  for (int64_t i = 0; i < options.count; ++i) {
    Rng rng(mix_seed(options.seed, static_cast<uint64_t>(i)));
    const int64_t terms = rng.uniform_int(options.min_terms, options.max_terms);
    std::string text = std::to_string(rng.uniform_int(1, options.max_number));
    for (int64_t t = 1; t < terms; ++t) {
      text += rng.pick(kOps);
      text += std::to_string(rng.uniform_int(1, options.max_number));
    }
    Demo d;
    d.task_id = "copy-" + std::to_string(i);
    d.env_type = "copy_drill";
    d.kind = "copy";
    d.messages = {text::ChatMessage{.role = text::Role::kSystem, .content = kSystem},
                  text::ChatMessage{.role = text::Role::kUser, .content = text},
                  text::ChatMessage{.role = text::Role::kAssistant, .content = text}};
    d.judgement.reward = 1.0;
    d.judgement.is_success = true;
    d.judgement.reason = "correct";
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace ajet::tasks
