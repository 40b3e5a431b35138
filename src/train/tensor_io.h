// Float tensors <-> safetensors views for the trainer's own files (adapters, optimizer state), and the
// temp-directory-then-rename step that makes a written directory appear whole. Internal to src/train.
#pragma once

#include <torch/torch.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <span>
#include <string>

#include "common/error.h"
#include "hf/safetensors.h"

namespace ajet::train::detail {

inline hf::DType hf_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return hf::DType::kF32;
    case torch::kHalf: return hf::DType::kF16;
    case torch::kBFloat16: return hf::DType::kBF16;
    case torch::kLong: return hf::DType::kI64;
    case torch::kByte: return hf::DType::kU8;
    default: invalid_argument(std::string("cannot store a tensor of dtype ") + c10::toString(t));
  }
}

inline torch::ScalarType torch_dtype(hf::DType d, const std::string& name) {
  switch (d) {
    case hf::DType::kF32: return torch::kFloat;
    case hf::DType::kF16: return torch::kHalf;
    case hf::DType::kBF16: return torch::kBFloat16;
    case hf::DType::kI64: return torch::kLong;
    case hf::DType::kU8: return torch::kByte;
    default: invalid_argument("tensor '" + name + "' has an unsupported dtype " + std::string(hf::dtype_name(d)));
  }
}

// `t` must be a contiguous CPU tensor that outlives the view.
inline hf::TensorView view_of(const std::string& name, const torch::Tensor& t) {
  return hf::TensorView{name, hf_dtype(t.scalar_type()), t.sizes().vec(),
                        std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())};
}

// A fresh CPU tensor holding the view's bytes.
inline torch::Tensor tensor_from_view(const hf::TensorView& v) {
  auto out = torch::empty(v.shape, torch::TensorOptions().dtype(torch_dtype(v.dtype, v.name)));
  if (static_cast<size_t>(out.nbytes()) != v.data.size()) {
    fail(ErrorCode::kDataLoss, "tensor '" + v.name + "': byte size does not match its shape");
  }
  if (!v.data.empty()) std::memcpy(out.data_ptr(), v.data.data(), v.data.size());
  return out;
}

// A hidden sibling of `dir` on the same filesystem, unique to this process, for writing `dir`.
inline std::filesystem::path temp_sibling(const std::filesystem::path& dir, const std::string& tag) {
  const std::filesystem::path parent = dir.parent_path().empty() ? std::filesystem::path(".") : dir.parent_path();
  std::string name = ".";  // appended piecewise: GCC 12 warns (-Wrestrict) on "literal" + string&&
  name.append(dir.filename().string()).append(".").append(tag).append("-").append(std::to_string(::getpid()));
  return parent / name;
}

// Renames the fully written `tmp` to `dir`; an existing `dir` is moved aside first and removed after,
// so `dir` is always either whole (old or new) or absent.
inline void publish_dir(const std::filesystem::path& tmp, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path old = temp_sibling(dir, "old");
  const bool replacing = fs::exists(dir);
  if (replacing) {
    fs::remove_all(old, ec);
    fs::rename(dir, old, ec);
    if (ec) fail(ErrorCode::kIo, dir.string() + ": cannot move the existing directory aside (" + ec.message() + ")");
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    std::error_code ignored;
    if (replacing) fs::rename(old, dir, ignored);
    fail(ErrorCode::kIo, dir.string() + ": cannot rename " + tmp.string() + " into place (" + ec.message() + ")");
  }
  if (replacing) fs::remove_all(old, ec);
}

}  // namespace ajet::train::detail
