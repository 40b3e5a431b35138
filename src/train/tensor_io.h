// Float tensors <-> safetensors views for the trainer's own files (adapters, optimizer state).
// Internal to src/train. (Directories appear whole through common/fs.h's temp_sibling +
// publish_dir.)
#pragma once

#include <torch/torch.h>

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
    default:
      invalid_argument("tensor '" + name + "' has an unsupported dtype " +
                       std::string(hf::dtype_name(d)));
  }
}

// `t` must be a contiguous CPU tensor that outlives the view.
inline hf::TensorView view_of(const std::string& name, const torch::Tensor& t) {
  return hf::TensorView{
      name, hf_dtype(t.scalar_type()), t.sizes().vec(),
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

}  // namespace ajet::train::detail
