#include "train/sft.h"

#include <chrono>
#include <limits>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <span>
#include <thread>

#include <ATen/Parallel.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/error.h"
#include "common/json.h"
#include "common/fs.h"
#include "train/packed_forward.h"

namespace ajet::train {

using text::OrderedJson;

int64_t SftExample::trained_tokens() const {
  int64_t n = 0;
  for (uint8_t m : loss_mask) n += m;
  return n;
}

SftExample tokenize_demo(const tracking::ChatFormat& format,
                         const std::vector<text::ChatMessage>& messages,
                         const std::vector<OrderedJson>& tools, std::string source) {
  text::ChatRequest request;
  request.messages = messages;
  request.tools = tools;
  const text::RenderedChat rendered = text::render_chat(format.family, request);
  const text::TokenizedChat tokens = text::tokenize_chat(format.tok(), rendered);
  SftExample ex;
  ex.source = std::move(source);
  ex.token_ids.assign(tokens.ids.begin(), tokens.ids.end());
  ex.loss_mask.assign(tokens.ids.size(), 0);
  for (const text::TokenSpan& span : tokens.spans) {
    if (span.kind != text::SpanKind::kMessage || span.message_index < 0) continue;
    if (messages[static_cast<size_t>(span.message_index)].role != text::Role::kAssistant) continue;
    // What the model generates in an episode: the body, then the end-of-turn token that stops it.
    for (size_t i = span.body_begin; i < span.body_end; ++i) ex.loss_mask[i] = 1;
    if (span.body_end < span.end && tokens.ids[span.body_end] == format.end_of_turn)
      ex.loss_mask[span.body_end] = 1;
  }
  if (!ex.loss_mask.empty()) ex.loss_mask[0] = 0;  // nothing predicts the first token
  return ex;
}

DemoSet read_demos_jsonl(const std::filesystem::path& path, const tracking::ChatFormat& format,
                         const DemoReadOptions& options) {
  const std::string text = read_file(path);
  DemoSet set;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(line_no);
    const OrderedJson j = parse_ordered_json(line, where);
    if (!j.is_object()) invalid_argument(where + ": a demonstration must be a JSON object");
    if (auto r = j.find("reward"); r != j.end() && !r->is_null()) {
      if (!r->is_number()) invalid_argument(where + ": field 'reward' must be a number");
      if (r->get<double>() < options.min_reward) {
        ++set.skipped_reward;
        continue;
      }
    }
    auto ms = j.find("messages");
    if (ms == j.end() || !ms->is_array())
      invalid_argument(where + ": field 'messages' must be an array of chat messages");
    std::vector<text::ChatMessage> messages;
    bool has_assistant = false;
    for (size_t i = 0; i < ms->size(); ++i) {
      messages.push_back(
          text::parse_chat_message((*ms)[i], where + ": messages[" + std::to_string(i) + "]"));
      has_assistant = has_assistant || messages.back().role == text::Role::kAssistant;
    }
    if (!has_assistant)
      invalid_argument(where + ": field 'messages' has no assistant message (nothing to train)");
    std::vector<OrderedJson> tools;
    if (auto t = j.find("tools"); t != j.end() && !t->is_null())
      tools = text::parse_tools(*t, where + ": tools");
    SftExample ex = tokenize_demo(format, messages, tools, where);
    if (options.max_tokens > 0 && static_cast<int64_t>(ex.token_ids.size()) > options.max_tokens) {
      ++set.skipped_too_long;
      continue;
    }
    set.examples.push_back(std::move(ex));
  }
  return set;
}

namespace {

// Several examples side by side in one sequence: positions restart per example and block-sparse
// attention keeps each example to itself (a token's keys are its own example's earlier tokens).
// With `shared_prefix` > 0 the first `shared_prefix` tokens, identical in every example and holding
// no target, are packed once at the front and every example's own tokens attend to them (a
// one-level tree, tracking/packing.h's rule): the same loss and gradients as packing each example
// whole, since a causal prefix's hidden states do not depend on what follows it.
struct PackedBatch {
  torch::Tensor ids, positions;  // (T,) int64
  torch::Tensor rows,
      targets;  // (M,) int64: the row whose logits predict each target, the target id
  AttentionPlan plan;
  int64_t tokens = 0;
  int64_t trained = 0;
  bool demo_blocks =
      false;  // also: the last layer runs the target rows only (packed_hidden's rows)
};

// With `demo_blocks` the attention blocks start at the shared prefix and at every demo (and every
// `block_rows` rows within them); else every `block_rows` rows of the packed sequence.
PackedBatch pack(const std::vector<const SftExample*>& batch, int64_t block_rows,
                 int64_t shared_prefix, bool demo_blocks = false) {
  std::vector<int64_t> ids, pos, rows, targets, block_starts;
  std::vector<int32_t> subtree_end;
  for (int64_t i = 0; i < shared_prefix; i += block_rows) block_starts.push_back(i);
  if (shared_prefix > 0) {
    const SftExample& first = *batch.front();
    for (int64_t i = 0; i < shared_prefix; ++i) {
      ids.push_back(first.token_ids[static_cast<size_t>(i)]);
      pos.push_back(i);
      subtree_end.push_back(0);  // set below, once the packed length is known
    }
  }
  for (const SftExample* ex : batch) {
    const int64_t base =
        static_cast<int64_t>(ids.size()) - shared_prefix;  // packed index of example token 0
    const int64_t n = static_cast<int64_t>(ex->token_ids.size());
    for (int64_t i = shared_prefix; i < n; i += block_rows) block_starts.push_back(base + i);
    for (int64_t i = shared_prefix; i < n; ++i) {
      ids.push_back(ex->token_ids[static_cast<size_t>(i)]);
      pos.push_back(i);
      subtree_end.push_back(static_cast<int32_t>(base + n));
      if (i > 0 && ex->loss_mask[static_cast<size_t>(i)]) {
        // Token i is predicted by token i - 1: the shared prefix's last row when i ==
        // shared_prefix.
        rows.push_back(i - 1 < shared_prefix ? i - 1 : base + i - 1);
        targets.push_back(ex->token_ids[static_cast<size_t>(i)]);
      }
    }
  }
  for (int64_t i = 0; i < shared_prefix; ++i)
    subtree_end[static_cast<size_t>(i)] = static_cast<int32_t>(ids.size());
  PackedBatch p;
  p.tokens = static_cast<int64_t>(ids.size());
  p.trained = static_cast<int64_t>(rows.size());
  p.ids = torch::tensor(ids, torch::kLong);
  p.positions = torch::tensor(pos, torch::kLong);
  p.rows = torch::tensor(rows, torch::kLong);
  p.targets = torch::tensor(targets, torch::kLong);
  p.plan = demo_blocks ? plan_attention(subtree_end, block_starts)
                       : plan_attention(subtree_end, block_rows);
  p.demo_blocks = demo_blocks;
  return p;
}

// Index of the first target token (the example's length when it has none).
int64_t first_target(const SftExample& ex) {
  for (size_t i = 1; i < ex.loss_mask.size(); ++i) {
    if (ex.loss_mask[i]) return static_cast<int64_t>(i);
  }
  return static_cast<int64_t>(ex.token_ids.size());
}

// Length of the prefix `ex` shares with `first` that holds no target of `ex` and leaves it a token.
int64_t common_prefix(const SftExample& first, const SftExample& ex, int64_t limit) {
  const int64_t n =
      std::min({limit, first_target(ex), static_cast<int64_t>(ex.token_ids.size()) - 1});
  int64_t k = 0;
  while (k < n && first.token_ids[static_cast<size_t>(k)] == ex.token_ids[static_cast<size_t>(k)])
    ++k;
  return k;
}

// The prefix every one of `examples` shares with the first (common_prefix's rule, folded the way
// take_batch folds it); 0 for fewer than two examples, since one example alone shares nothing.
int64_t shared_prefix_of(std::span<const SftExample* const> examples) {
  if (examples.size() < 2) return 0;
  const SftExample& first = *examples.front();
  int64_t p = common_prefix(first, first, static_cast<int64_t>(first.token_ids.size()));
  for (size_t i = 1; i < examples.size(); ++i) p = common_prefix(first, *examples[i], p);
  return p;
}

// Sum of -log p(target) over the batch's trained tokens: a scalar tensor (with a graph when grad is
// on).
torch::Tensor nll_sum(model::Qwen2Model& model, const PackedBatch& p) {
  const torch::Device device = model->options().device();
  torch::Tensor hidden;  // (M, C): the rows that predict the targets
  if (p.demo_blocks) {
    hidden =
        packed_hidden(model, p.ids.to(device), p.positions.to(device), p.plan, p.rows.to(device));
  } else {
    hidden = packed_hidden(model, p.ids.to(device), p.positions.to(device), p.plan)
                 .index_select(0, p.rows.to(device));
  }
  const TokenLogprobs tl = token_logprobs(model, hidden, p.targets.to(device));
  return -tl.logprob.to(torch::kFloat).sum();
}

// Consecutive examples of `order` from `next` until the token budget is full (always at least one).
// With `share` the budget counts packed tokens: the prefix all of them share (shared_prefix_of)
// once.
std::vector<const SftExample*> take_batch(const std::vector<SftExample>& examples,
                                          const std::vector<size_t>& order, size_t& next,
                                          int64_t budget, bool share) {
  std::vector<const SftExample*> taken;
  int64_t total = 0;  // sum of example lengths
  int64_t prefix = 0;
  while (next < order.size()) {
    const SftExample& ex = examples[order[next]];
    const int64_t n = static_cast<int64_t>(ex.token_ids.size());
    int64_t p = 0;
    if (share)
      p = taken.empty() ? common_prefix(ex, ex, n) : common_prefix(*taken.front(), ex, prefix);
    const int64_t count = static_cast<int64_t>(taken.size()) + 1;
    const int64_t packed = total + n - (count - 1) * p;  // prefix p once instead of `count` times
    if (!taken.empty() && packed > budget) break;
    taken.push_back(&ex);
    total += n;
    prefix = p;
    ++next;
  }
  return taken;
}

void validate(const SftOptions& o) {
  if (o.steps < 0) invalid_argument("sft: steps must be >= 0, got " + std::to_string(o.steps));
  if (!(o.lr > 0) || !std::isfinite(o.lr)) invalid_argument("sft: lr must be a positive number");
  if (o.batch_tokens < 1) invalid_argument("sft: batch_tokens must be >= 1");
  if (o.warmup_steps < 0) invalid_argument("sft: warmup_steps must be >= 0");
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1))
    invalid_argument("sft: min_lr_ratio must be in [0, 1]");
  if (!(o.weight_decay >= 0)) invalid_argument("sft: weight_decay must be >= 0");
  if (o.attention_block < 1) invalid_argument("sft: attention_block must be >= 1");
  if (o.workers < 1)
    invalid_argument("sft: workers must be >= 1, got " + std::to_string(o.workers));
  if (!(o.max_seconds >= 0) || !std::isfinite(o.max_seconds))
    invalid_argument("sft: max_seconds must be >= 0 (0: no limit)");
  if (o.fit_schedule_to_time && o.max_seconds <= 0)
    invalid_argument("sft: fit_schedule_to_time needs max_seconds > 0");
}

// `examples` cut into at most `parts` consecutive runs of about equal token count, none empty.
std::vector<std::vector<const SftExample*>> split_parts(
    const std::vector<const SftExample*>& examples, int64_t parts) {
  int64_t total = 0;
  for (const SftExample* ex : examples) total += static_cast<int64_t>(ex->token_ids.size());
  std::vector<std::vector<const SftExample*>> out(1);
  int64_t seen = 0;
  for (const SftExample* ex : examples) {
    // Start part k + 1 once part k holds its share, while examples remain for the parts after it.
    const auto k = static_cast<int64_t>(out.size()) - 1;
    if (!out.back().empty() && k + 1 < parts && seen * parts >= (k + 1) * total) out.emplace_back();
    out.back().push_back(ex);
    seen += static_cast<int64_t>(ex->token_ids.size());
  }
  return out;
}

// Gradients of nll_sum(part) / denom with respect to `params` (undefined where a parameter is
// unused), on the calling thread with `intra_threads` OpenMP threads; also the part's nll sum.
std::vector<torch::Tensor> part_gradients(model::Qwen2Model& model, const PackedBatch& part,
                                          double denom, const std::vector<torch::Tensor>& params,
                                          int intra_threads, double& nll) {
  // The OpenMP thread count is per calling thread (OpenBLAS reads it too): give this thread its
  // share. at::set_num_threads also stores ATen's global default, which run_sft restores after the
  // step.
  at::set_num_threads(intra_threads);
  const torch::Tensor sum = nll_sum(model, part);
  nll = sum.item<double>();
  return torch::autograd::grad({sum / denom}, params, /*grad_outputs=*/{}, /*retain_graph=*/false,
                               /*create_graph=*/false, /*allow_unused=*/true);
}

}  // namespace

int sft_worker_threads(int64_t workers) {
  return std::max(1, at::get_num_threads() / static_cast<int>(std::max<int64_t>(1, workers)));
}

double sft_learning_rate(const SftOptions& o, int64_t step, int64_t total_steps) {
  if (step < o.warmup_steps)
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const int64_t span = (total_steps < 0 ? o.steps : total_steps) - o.warmup_steps;
  if (span <= 1) return o.lr;
  const double q = static_cast<double>(step - o.warmup_steps) / static_cast<double>(span - 1);
  const double cosine = 0.5 * (1 + std::cos(std::numbers::pi * std::min(1.0, q)));
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * cosine);
}

std::vector<SftStep> run_sft(model::Qwen2Model& model, const std::vector<SftExample>& examples,
                             const SftOptions& options,
                             const std::function<void(const SftStep&)>& on_step) {
  validate(options);
  if (examples.empty()) invalid_argument("sft: no demonstrations to train on");
  for (const SftExample& ex : examples) {
    if (ex.token_ids.size() != ex.loss_mask.size())
      invalid_argument("sft: " + ex.source + ": mask and ids differ in length");
  }
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& t : model->parameters()) {
    if (t.requires_grad()) params.push_back(t);
  }
  torch::optim::AdamWOptions adam(options.lr);
  adam.betas({0.9, 0.95}).eps(1e-8).weight_decay(options.weight_decay);
  torch::optim::AdamW optimizer(params, adam);

  // Our own Fisher-Yates over mt19937_64: std::shuffle's draws are implementation-defined.
  std::mt19937_64 rng(options.seed);
  std::vector<size_t> order(examples.size());
  auto reshuffle = [&] {
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  };
  reshuffle();
  size_t next = 0;

  std::vector<SftStep> out;
  const auto run_start = std::chrono::steady_clock::now();
  int64_t planned = options.steps;
  for (int64_t s = 0; s < options.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (options.max_seconds > 0 && s > 0) {
      const double elapsed = std::chrono::duration<double>(t0 - run_start).count();
      const double per_step = elapsed / static_cast<double>(s);
      if (elapsed + per_step > options.max_seconds) break;
      if (options.fit_schedule_to_time) {
        const auto fit =
            s + static_cast<int64_t>((options.max_seconds - elapsed) / std::max(per_step, 1e-9));
        planned = std::clamp<int64_t>(fit, s + 1, options.steps);
      }
    }
    if (next >= order.size()) {
      reshuffle();
      next = 0;
    }
    const std::vector<const SftExample*> batch =
        take_batch(examples, order, next, options.batch_tokens, options.share_prefix);
    SftStep m;
    m.step = s + 1;
    m.examples = static_cast<int64_t>(batch.size());
    m.lr = sft_learning_rate(options, s, planned);
    m.planned_steps = planned;
    optimizer.zero_grad();
    // One part (workers 1) runs on this thread with all its threads; several run side by side.
    std::vector<PackedBatch> parts;
    for (const auto& part : split_parts(batch, options.workers)) {
      const int64_t prefix = options.share_prefix ? shared_prefix_of(part) : 0;
      parts.push_back(pack(part, options.attention_block, prefix, options.demo_blocks));
      if (parts.size() == 1) m.shared_prefix = prefix;
      m.tokens += parts.back().tokens;
      m.trained_tokens += parts.back().trained;
    }
    if (parts.size() == 1) {
      if (m.trained_tokens > 0) {
        torch::Tensor loss = nll_sum(model, parts.front()) / static_cast<double>(m.trained_tokens);
        loss.backward();
        m.loss = loss.item<double>();
      }
    } else if (m.trained_tokens > 0) {  // the loss is still the mean over the whole step
      const int threads_before = at::get_num_threads();
      const int intra = sft_worker_threads(static_cast<int64_t>(parts.size()));
      const auto denom = static_cast<double>(m.trained_tokens);
      std::vector<std::vector<torch::Tensor>> grads(parts.size());
      std::vector<double> nll(parts.size(), 0.0);
      std::vector<std::exception_ptr> errors(parts.size());
      std::vector<std::thread> threads;
      for (size_t k = 0; k < parts.size(); ++k) {
        threads.emplace_back([&, k] {
          try {
            if (parts[k].trained > 0)
              grads[k] = part_gradients(model, parts[k], denom, params, intra, nll[k]);
          } catch (...) {
            errors[k] = std::current_exception();
          }
        });
      }
      for (auto& t : threads) t.join();
      at::set_num_threads(threads_before);
      for (const auto& e : errors) {
        if (e) std::rethrow_exception(e);
      }
      double total = 0;
      for (double v : nll) total += v;
      m.loss = total / denom;
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        torch::Tensor g;
        for (const auto& part : grads) {  // in part order: the same sum every run
          if (part.empty() || !part[i].defined()) continue;
          g = g.defined() ? g + part[i] : part[i];
        }
        params[i].mutable_grad() = g.defined() ? g : torch::zeros_like(params[i]);
      }
    }
    if (m.trained_tokens > 0) {
      const double max_norm =
          options.grad_clip > 0 ? options.grad_clip : std::numeric_limits<double>::infinity();
      m.grad_norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
      if (std::isfinite(m.grad_norm)) {
        for (auto& group : optimizer.param_groups()) group.options().set_lr(m.lr);
        optimizer.step();
      }
    }
    optimizer.zero_grad();
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.push_back(m);
    if (on_step) on_step(m);
    if (options.stop != nullptr && options.stop->load()) break;
  }
  return out;
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest; also ends its dynamic threshold
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
}

double sft_step_gradients(model::Qwen2Model& model, const std::vector<const SftExample*>& batch,
                          const SftOptions& options) {
  validate(options);
  if (batch.empty()) invalid_argument("sft_step_gradients: the batch is empty");
  const int64_t prefix = options.share_prefix ? shared_prefix_of(batch) : 0;
  const PackedBatch p = pack(batch, options.attention_block, prefix, options.demo_blocks);
  if (p.trained == 0) return 0;
  torch::Tensor loss = nll_sum(model, p) / static_cast<double>(p.trained);
  loss.backward();
  return loss.item<double>();
}

double sft_loss(model::Qwen2Model& model, const std::vector<SftExample>& examples,
                int64_t batch_tokens, bool share_prefix) {
  if (batch_tokens < 1) invalid_argument("sft_loss: batch_tokens must be >= 1");
  torch::NoGradGuard no_grad;
  std::vector<size_t> order(examples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  size_t next = 0;
  double total = 0;
  int64_t count = 0;
  while (next < order.size()) {
    const std::vector<const SftExample*> b =
        take_batch(examples, order, next, batch_tokens, share_prefix);
    const PackedBatch p =
        pack(b, 128, share_prefix ? shared_prefix_of(b) : 0, /*demo_blocks=*/true);
    if (p.trained == 0) continue;
    total += nll_sum(model, p).item<double>();
    count += p.trained;
  }
  if (count == 0) invalid_argument("sft_loss: the examples have no trained tokens");
  return total / static_cast<double>(count);
}

}  // namespace ajet::train
