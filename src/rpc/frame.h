// Engine RPC frames: a 16-byte prefix, a small JSON header, and a binary payload of named
// little-endian arrays (token ids, logprobs, ...). Pure encode/decode: no sockets, no threads.
// Decoding validates every byte it is given and throws ajet::Error naming the problem; it must
// never crash or read out of bounds, whatever the peer sent.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace ajet::rpc {

static_assert(
    std::endian::native == std::endian::little,
    "the RPC payload is little-endian and copied as is; add byte swapping for big-endian hosts");

// Prefix: u32 magic ("AJR" + version byte), u32 header length, u64 payload length; little-endian.
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kMagic =
    0x00524A41u | (kProtocolVersion << 24);  // bytes 'A' 'J' 'R' 0x01
inline constexpr size_t kPrefixBytes = 16;
inline constexpr size_t kArrayAlignment =
    8;  // every array starts at a multiple of 8 in the payload

// Hard limits applied when decoding (and checked before sending). Oversize → kResourceExhausted.
struct FrameLimits {
  uint32_t max_header_bytes = 1u << 20;       // 1 MiB of header JSON
  uint64_t max_payload_bytes = 256ull << 20;  // 256 MiB of arrays
  size_t max_arrays = 64;                     // named arrays per frame
};

enum class FrameKind {
  kRequest,  // client → server: method + params, starts request `id`
  kReply,    // server → client: one streamed reply for request `id`
  kDone,     // server → client: final success frame for `id` (may carry a body and arrays)
  kError,    // server → client: final error frame for `id`: body {"code","message"}
  kAbort,    // client → server: cancel the in-flight request `id`
  kClose,    // either way, id 0: connection-level error {"code","message"}; the sender then closes
  kHello,    // id 0. Client → server: the first frame, body {"token"} (the shared secret);
             // server → client: the handshake's acknowledgement, empty body
};
std::string_view frame_kind_name(FrameKind kind);

enum class DType : uint8_t { kI32, kF32, kI64, kU8 };
std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, int32_t>)
    return DType::kI32;
  else if constexpr (std::is_same_v<T, float>)
    return DType::kF32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kI64;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::kU8;
  else
    static_assert(sizeof(T) == 0, "RPC arrays hold int32_t, float, int64_t or uint8_t");
}

// Where one named array lives in the payload: bytes [offset, offset + count * dtype_size).
struct ArrayDesc {
  std::string name;
  DType dtype = DType::kU8;
  uint64_t count = 0;   // elements, not bytes
  uint64_t offset = 0;  // bytes from the start of the payload
};

struct Frame {
  FrameKind kind = FrameKind::kRequest;
  uint64_t id = 0;             // request id chosen by the client (>= 1); 0 for kClose and kHello
  std::string method;          // kRequest only
  Json body = Json::object();  // params / event fields; kError and kClose: {"code", "message"}
  std::vector<ArrayDesc> arrays;
  std::vector<std::byte> payload;

  // Appends a named array (8-byte aligned). Names must be unique within a frame.
  template <class T>
  void add_array(std::string_view name, std::span<const T> values) {
    add_array_bytes(name, dtype_of<T>(), values.size(), std::as_bytes(values));
  }
  template <class T>
  void add_array(std::string_view name, const std::vector<T>& values) {
    add_array(name, std::span<const T>(values));
  }
  void add_array_bytes(std::string_view name, DType dtype, uint64_t count,
                       std::span<const std::byte> bytes);

  const ArrayDesc* find_array(std::string_view name) const;

  // A copy of a named array; throws kInvalidArgument naming the array when it is missing or of
  // another dtype. `where` prefixes the message (e.g. "generate request").
  template <class T>
  std::vector<T> array(std::string_view name, std::string_view where) const {
    auto v = optional_array<T>(name, where);
    if (!v) missing_array(name, where);
    return std::move(*v);
  }
  template <class T>
  std::optional<std::vector<T>> optional_array(std::string_view name,
                                               std::string_view where) const {
    const ArrayDesc* a = find_array(name);
    if (a == nullptr) return std::nullopt;
    check_dtype(*a, dtype_of<T>(), where);
    std::vector<T> out(a->count);
    if (a->count > 0) std::memcpy(out.data(), payload.data() + a->offset, a->count * sizeof(T));
    return out;
  }

 private:
  [[noreturn]] static void missing_array(std::string_view name, std::string_view where);
  static void check_dtype(const ArrayDesc& a, DType want, std::string_view where);
};

// A frame ready for the socket: prefix + header JSON in `head`, arrays in `payload`. Kept as two
// buffers so the payload is written with scatter-gather instead of being copied once more.
struct EncodedFrame {
  std::string head;
  std::vector<std::byte> payload;
  size_t size() const { return head.size() + payload.size(); }
};

// Encodes; throws kResourceExhausted when the frame exceeds `limits` (naming the limit), and
// kInvalidArgument for an id/kind combination the decoder would reject.
EncodedFrame encode_frame(Frame frame, const FrameLimits& limits);

// The two lengths announced by a prefix, validated against `limits`.
struct Prefix {
  uint32_t header_bytes = 0;
  uint64_t payload_bytes = 0;
};
Prefix decode_prefix(std::span<const std::byte, kPrefixBytes> prefix, const FrameLimits& limits);

// Parses and validates the header and the array descriptors against the payload.
Frame decode_frame(std::string_view header, std::vector<std::byte> payload,
                   const FrameLimits& limits);

// Whole-buffer decode (tests, tools, fuzzing): exactly one frame, no trailing bytes.
Frame decode_frame_bytes(std::span<const std::byte> bytes, const FrameLimits& limits);
// Concatenates `head` and `payload`.
std::vector<std::byte> flatten(const EncodedFrame& frame);

// Final-frame helpers.
Frame make_error_frame(uint64_t id, ErrorCode code, std::string_view message);
Frame make_close_frame(ErrorCode code, std::string_view message);
Frame make_abort_frame(uint64_t id);
// A client's hello carries `token`; the server's acknowledgement is make_hello_frame("").
Frame make_hello_frame(std::string_view token);
// The Error an kError / kClose frame carries (code parsed from its name; unknown names →
// kInternal).
Error frame_error(const Frame& frame);
std::optional<ErrorCode> error_code_from_name(std::string_view name);

}  // namespace ajet::rpc
