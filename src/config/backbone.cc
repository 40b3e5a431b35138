#include "config/backbone.h"

#include "common/error.h"
#include "config/config.h"

namespace ajet::config {

std::string_view backbone_name(Backbone backbone) {
  switch (backbone) {
    case Backbone::kTorch: return "torch";
    case Backbone::kAsync: return "async";
    case Backbone::kDebug: return "debug";
  }
  return "torch";
}

Backbone parse_backbone(std::string_view name) {
  if (name == "torch" || name == "verl") return Backbone::kTorch;
  if (name == "async" || name == "trinity") return Backbone::kAsync;
  if (name == "debug") return Backbone::kDebug;
  invalid_argument("ajet.backbone must be torch, async or debug, got '" + std::string(name) + "'");
}

Backbone backbone_of(const Config& config) { return parse_backbone(config.backbone); }

}  // namespace ajet::config
