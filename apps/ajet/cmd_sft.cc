// `ajet sft ...`: the supervised warm-up is tensor work, so this runs `ajet-engine sft ...` (found
// next to this binary) with the same arguments; `ajet` itself never links libtorch. Typical use
// (docs/sft.md):
//   ajet tasks demos --task calc --n 2000 --out demos.jsonl
//   ajet sft --model tiny --demos demos.jsonl --out tiny-sft --steps 150 --eval-task calc
#include "command.h"

namespace ajet::cli {
namespace {

const CommandRegistration kSft("sft", [](CLI::App& app) {
  add_engine_forward(app, "sft",
                     "Supervised warm-up on chat demonstrations, e.g. from `ajet tasks demos` "
                     "(runs ajet-engine sft ...)");
});

}  // namespace
}  // namespace ajet::cli
