// Fuzz target: arbitrary bytes as a safetensors file. Rejection must be an ajet::Error; every
// accepted file must give in-bounds views and survive a write/read round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "hf/safetensors.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ajet::hf;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  std::optional<SafetensorsFile> file;
  try {
    file.emplace(SafetensorsFile::parse(bytes, "fuzz input"));
  } catch (const ajet::Error&) {
    return 0;
  }

  std::vector<TensorView> views;
  uint8_t checksum = 0;
  for (const TensorInfo& info : file->tensors()) {
    check(file->find(info.name) == &info);
    TensorView view = file->view(info);
    check(view.data.size() == static_cast<size_t>(info.numel()) * dtype_size(info.dtype));
    for (std::byte b : view.data)
      checksum ^= std::to_integer<uint8_t>(b);  // touch every byte (ASan)
    views.push_back(view);
  }
  (void)checksum;

  // Anything we accept, we can write, and reading that back gives the same tensors.
  std::string again = serialize_safetensors(views, file->metadata());
  auto reread = SafetensorsFile::parse(
      {reinterpret_cast<const std::byte*>(again.data()), again.size()}, "round trip");
  check(reread.metadata() == file->metadata());
  check(reread.tensors().size() == views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    TensorView v = reread.view(reread.tensors()[i]);
    check(v.name == views[i].name && v.dtype == views[i].dtype && v.shape == views[i].shape);
    check(v.data.size() == views[i].data.size() &&
          (v.data.empty() || std::memcmp(v.data.data(), views[i].data.data(), v.data.size()) == 0));
  }
  return 0;
}
