// The parameters, cursor and JSON of an episode page (the SQL is in store_list.cc).
#include "store/episode_list.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/encoding.h"
#include "common/error.h"
#include "common/strings.h"
#include "store/records.h"

namespace ajet::store {

namespace {

[[noreturn]] void bad_parameter(const std::string& name, const std::string& value,
                                const std::string& why) {
  invalid_argument("GET /episodes parameter '" + name + "': " + why + " (got '" + value + "')");
}

int64_t parse_int_parameter(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno == ERANGE ||
      std::isspace(static_cast<unsigned char>(value[0]))) {
    bad_parameter(name, value, "must be an integer");
  }
  return v;
}

double parse_number_parameter(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v) ||
      std::isspace(static_cast<unsigned char>(value[0]))) {
    bad_parameter(name, value, "must be a finite number");
  }
  return v;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

[[noreturn]] void bad_cursor(const std::string& cursor) {
  invalid_argument("GET /episodes parameter 'cursor': not a cursor this server gave out (got '" +
                   cursor.substr(0, 80) + "'); start again without one");
}

}  // namespace

const std::vector<std::string>& episode_page_parameter_names() {
  static const std::vector<std::string> names = {"limit", "cursor",     "uuid",       "step",
                                                 "task",  "client",     "agent",      "status",
                                                 "type",  "reward_min", "reward_max", "success"};
  return names;
}

EpisodePageRequest episode_page_request_from_params(
    const std::map<std::string, std::string>& params) {
  EpisodePageRequest out;
  const std::vector<std::string>& known = episode_page_parameter_names();
  for (const auto& [name, value] : params) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      std::string hint;
      if (const std::string near = closest_name(name, known); !near.empty())
        hint = " (did you mean '" + near + "'?)";
      invalid_argument("GET /episodes: unknown parameter '" + name + "'" + hint +
                       "; known: " + list);
    }
    if (value.empty()) continue;
    EpisodeFilter& f = out.filter;
    if (name == "limit") {
      const int64_t limit = parse_int_parameter(name, value);
      if (limit < 1 || limit > kEpisodePageMaxLimit) {
        bad_parameter(name, value, "must be between 1 and " + std::to_string(kEpisodePageMaxLimit));
      }
      out.limit = static_cast<int>(limit);
    } else if (name == "cursor") {
      decode_episode_cursor(
          value);  // fails here, naming the parameter, rather than deep in the query
      out.cursor = value;
    } else if (name == "uuid") {
      f.uuid = value;
    } else if (name == "step") {
      f.global_step = parse_int_parameter(name, value);
      if (*f.global_step < 0) bad_parameter(name, value, "must be a global step (0 or more)");
    } else if (name == "task") {
      f.task_id = value;
    } else if (name == "client") {
      f.client_uuid = value;
    } else if (name == "agent") {
      f.agent_name = value;
    } else if (name == "status") {
      static const std::vector<std::string> statuses = {kEpisodeClaimed,   kEpisodePrepared,
                                                        kEpisodeFinished,  kEpisodeAborted,
                                                        kEpisodeReclaimed, kEpisodeDropped};
      if (std::find(statuses.begin(), statuses.end(), value) == statuses.end()) {
        bad_parameter(name, value,
                      "must be one of claimed, prepared, finished, aborted, reclaimed, dropped");
      }
      f.status = value;
    } else if (name == "type") {
      if (value != "train" && value != "eval") bad_parameter(name, value, "must be train or eval");
      f.episode_type = value;
    } else if (name == "reward_min") {
      f.reward_min = parse_number_parameter(name, value);
    } else if (name == "reward_max") {
      f.reward_max = parse_number_parameter(name, value);
    } else if (name == "success") {
      if (value != "true" && value != "false") bad_parameter(name, value, "must be true or false");
      f.is_success = value == "true";
    }
  }
  return out;
}

std::string encode_episode_cursor(double claimed_at, const std::string& uuid) {
  uint64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(claimed_at));
  std::memcpy(&bits, &claimed_at, sizeof(bits));
  char head[17];
  std::snprintf(head, sizeof(head), "%016llx", static_cast<unsigned long long>(bits));
  // Hex all through: safe in a query string without escaping ('+' would arrive as a space).
  return std::string(head) + hex_encode(uuid);
}

EpisodeCursor decode_episode_cursor(const std::string& cursor) {
  if (cursor.size() < 16 || cursor.size() % 2 != 0 || cursor.size() > 16 + 2 * 512)
    bad_cursor(cursor);
  for (char c : cursor) {
    if (hex_digit(c) < 0) bad_cursor(cursor);
  }
  uint64_t bits = 0;
  for (size_t i = 0; i < 16; ++i) bits = (bits << 4) | static_cast<uint64_t>(hex_digit(cursor[i]));
  EpisodeCursor out;
  std::memcpy(&out.claimed_at, &bits, sizeof(bits));
  if (!std::isfinite(out.claimed_at)) bad_cursor(cursor);
  for (size_t i = 16; i < cursor.size(); i += 2) {
    out.uuid.push_back(static_cast<char>(hex_digit(cursor[i]) * 16 + hex_digit(cursor[i + 1])));
  }
  return out;
}

Json episode_summary_json(const EpisodeSummary& s) {
  return Json{{"uuid", s.uuid},
              {"task_id", s.task_id},
              {"client_uuid", s.client_uuid},
              {"episode_type", s.episode_type},
              {"status", s.status},
              {"reward", s.reward ? Json(*s.reward) : Json(nullptr)},
              {"is_success", s.is_success ? Json(*s.is_success) : Json(nullptr)},
              {"claimed_at", s.claimed_at},
              {"ended_at", s.ended_at ? Json(*s.ended_at) : Json(nullptr)},
              {"batch_id", s.batch_id ? Json(*s.batch_id) : Json(nullptr)},
              {"global_step", s.global_step ? Json(*s.global_step) : Json(nullptr)},
              {"llm_calls", s.llm_calls},
              {"llm_calls_not_retained", s.llm_calls_not_retained},
              {"agents", s.agents},
              {"prompt_tokens", s.prompt_tokens},
              {"completion_tokens", s.completion_tokens}};
}

Json episode_page_json(const EpisodePage& page) {
  Json episodes = Json::array();
  for (const EpisodeSummary& s : page.episodes) episodes.push_back(episode_summary_json(s));
  return Json{{"episodes", std::move(episodes)},
              {"next_cursor", page.next_cursor ? Json(*page.next_cursor) : Json(nullptr)},
              {"total", page.total},
              {"total_is_lower_bound", page.total_is_lower_bound}};
}

}  // namespace ajet::store
