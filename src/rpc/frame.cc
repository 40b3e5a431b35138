#include "rpc/frame.h"

#include <algorithm>
#include <array>
#include <limits>

namespace ajet::rpc {
namespace {

constexpr int kMaxHeaderDepth = 64;  // nesting of the header JSON; deeper is refused while parsing
constexpr size_t kMaxNameBytes = 128;  // method and array names

constexpr std::array<std::pair<FrameKind, std::string_view>, 7> kKindNames{{
    {FrameKind::kRequest, "request"},
    {FrameKind::kReply, "reply"},
    {FrameKind::kDone, "done"},
    {FrameKind::kError, "error"},
    {FrameKind::kAbort, "abort"},
    {FrameKind::kClose, "close"},
    {FrameKind::kHello, "hello"},
}};

constexpr std::array<std::pair<DType, std::string_view>, 4> kDTypeNames{{
    {DType::kI32, "i32"},
    {DType::kF32, "f32"},
    {DType::kI64, "i64"},
    {DType::kU8, "u8"},
}};

constexpr std::array<ErrorCode, 10> kAllCodes{
    ErrorCode::kInvalidArgument,   ErrorCode::kUnauthenticated,    ErrorCode::kPermissionDenied,
    ErrorCode::kNotFound,          ErrorCode::kFailedPrecondition, ErrorCode::kUnavailable,
    ErrorCode::kResourceExhausted, ErrorCode::kDataLoss,           ErrorCode::kIo,
    ErrorCode::kInternal};

[[noreturn]] void bad_frame(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "rpc frame: " + message);
}
[[noreturn]] void too_big(const std::string& message) {
  throw Error(ErrorCode::kResourceExhausted, "rpc frame: " + message);
}

void put_u32(std::string& out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void put_u64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

std::string dump_json(const Json& j) {
  // `replace`: an invalid UTF-8 byte in a message must not turn into an exception while replying.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

uint64_t get_u64(const Json& obj, std::string_view key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end()) bad_frame(std::string(where) + ": missing '" + std::string(key) + "'");
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  bad_frame(std::string(where) + ": '" + std::string(key) +
            "' must be a non-negative integer, got " +
            (it->is_number_integer() ? it->dump() : std::string(json_type_name(*it))));
}

DType parse_dtype(const Json& v, std::string_view where) {
  if (!v.is_string())
    bad_frame(std::string(where) + ": 'dtype' must be a string, got " +
              std::string(json_type_name(v)));
  const auto& s = v.get_ref<const std::string&>();
  for (const auto& [d, name] : kDTypeNames) {
    if (name == s) return d;
  }
  bad_frame(std::string(where) + ": unknown dtype '" + s.substr(0, 32) +
            "' (expected i32, f32, i64 or u8)");
}

void check_error_body(const Json& body, std::string_view kind) {
  for (const char* key : {"code", "message"}) {
    auto it = body.find(key);
    if (it == body.end() || !it->is_string()) {
      bad_frame(std::string(kind) + " frame: body needs a string '" + key + "'");
    }
  }
}

// Checks id/method/body rules that depend on the kind; shared by encode (our bugs) and decode
// (peer's).
void check_kind_rules(FrameKind kind, uint64_t id, const std::string& method, const Json& body) {
  auto kind_name = std::string(frame_kind_name(kind));
  if (kind == FrameKind::kClose || kind == FrameKind::kHello) {
    if (id != 0) bad_frame(kind_name + " frame must have id 0, got " + std::to_string(id));
  } else if (id == 0) {
    bad_frame(kind_name + " frame must have an id >= 1");
  }
  if (kind == FrameKind::kRequest) {
    if (method.empty()) bad_frame("request " + std::to_string(id) + ": missing 'method'");
    if (method.size() > kMaxNameBytes)
      bad_frame("request " + std::to_string(id) + ": method name longer than 128 bytes");
  } else if (!method.empty()) {
    bad_frame(kind_name + " frame must not carry a 'method'");
  }
  if (!body.is_object())
    bad_frame(kind_name + " frame: 'body' must be an object, got " +
              std::string(json_type_name(body)));
  if (kind == FrameKind::kError || kind == FrameKind::kClose) check_error_body(body, kind_name);
}

}  // namespace

std::string_view frame_kind_name(FrameKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::string_view dtype_name(DType dtype) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kI32: return 4;
    case DType::kF32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 1;
}

void Frame::add_array_bytes(std::string_view name, DType dtype, uint64_t count,
                            std::span<const std::byte> bytes) {
  if (name.empty() || name.size() > kMaxNameBytes)
    invalid_argument("rpc frame: array name must be 1-128 bytes");
  if (find_array(name) != nullptr)
    invalid_argument("rpc frame: duplicate array '" + std::string(name) + "'");
  if (bytes.size() != count * dtype_size(dtype)) {
    invalid_argument("rpc frame: array '" + std::string(name) + "' has " +
                     std::to_string(bytes.size()) + " bytes for " + std::to_string(count) + " " +
                     std::string(dtype_name(dtype)));
  }
  size_t offset = (payload.size() + kArrayAlignment - 1) / kArrayAlignment * kArrayAlignment;
  payload.resize(offset + bytes.size());
  if (!bytes.empty()) std::memcpy(payload.data() + offset, bytes.data(), bytes.size());
  arrays.push_back(ArrayDesc{std::string(name), dtype, count, offset});
}

const ArrayDesc* Frame::find_array(std::string_view name) const {
  for (const auto& a : arrays) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

void Frame::missing_array(std::string_view name, std::string_view where) {
  invalid_argument(std::string(where) + ": missing required array '" + std::string(name) + "'");
}

void Frame::check_dtype(const ArrayDesc& a, DType want, std::string_view where) {
  if (a.dtype != want) {
    invalid_argument(std::string(where) + ": array '" + a.name + "' must be " +
                     std::string(dtype_name(want)) + ", got " + std::string(dtype_name(a.dtype)));
  }
}

EncodedFrame encode_frame(Frame frame, const FrameLimits& limits) {
  check_kind_rules(frame.kind, frame.id, frame.method, frame.body);
  if (frame.arrays.size() > limits.max_arrays) {
    too_big(std::to_string(frame.arrays.size()) + " arrays exceed the limit of " +
            std::to_string(limits.max_arrays));
  }
  if (frame.payload.size() > limits.max_payload_bytes) {
    too_big("payload of " + std::to_string(frame.payload.size()) + " bytes exceeds the limit of " +
            std::to_string(limits.max_payload_bytes) + " bytes (max_payload_bytes)");
  }
  Json header = {{"kind", frame_kind_name(frame.kind)}, {"id", frame.id}};
  if (frame.kind == FrameKind::kRequest) header["method"] = frame.method;
  if (!frame.body.empty()) header["body"] = std::move(frame.body);
  if (!frame.arrays.empty()) {
    Json arrays = Json::array();
    for (const auto& a : frame.arrays) {
      if (a.offset > frame.payload.size() ||
          a.count > (frame.payload.size() - a.offset) / dtype_size(a.dtype)) {
        invalid_argument("rpc frame: array '" + a.name + "' lies outside the payload");
      }
      arrays.push_back({{"name", a.name},
                        {"dtype", dtype_name(a.dtype)},
                        {"count", a.count},
                        {"offset", a.offset}});
    }
    header["arrays"] = std::move(arrays);
  }
  std::string json = dump_json(header);
  if (json.size() > limits.max_header_bytes) {
    too_big("header of " + std::to_string(json.size()) + " bytes exceeds the limit of " +
            std::to_string(limits.max_header_bytes) + " bytes (max_header_bytes)");
  }
  EncodedFrame out;
  out.head.reserve(kPrefixBytes + json.size());
  put_u32(out.head, kMagic);
  put_u32(out.head, static_cast<uint32_t>(json.size()));
  put_u64(out.head, frame.payload.size());
  out.head += json;
  out.payload = std::move(frame.payload);
  return out;
}

Prefix decode_prefix(std::span<const std::byte, kPrefixBytes> prefix, const FrameLimits& limits) {
  uint32_t magic = 0;
  Prefix p;
  std::memcpy(&magic, prefix.data(), 4);
  std::memcpy(&p.header_bytes, prefix.data() + 4, 4);
  std::memcpy(&p.payload_bytes, prefix.data() + 8, 8);
  if ((magic & 0x00FFFFFFu) == (kMagic & 0x00FFFFFFu) && magic != kMagic) {
    bad_frame("unsupported protocol version " + std::to_string(magic >> 24) +
              " (this build speaks version " + std::to_string(kProtocolVersion) + ")");
  }
  if (magic != kMagic) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", magic);
    bad_frame(std::string("bad magic ") + hex +
              " (expected 'AJR' + version byte): the peer does not speak the engine RPC");
  }
  if (p.header_bytes == 0) bad_frame("header length is 0");
  if (p.header_bytes > limits.max_header_bytes) {
    too_big("header of " + std::to_string(p.header_bytes) + " bytes exceeds the limit of " +
            std::to_string(limits.max_header_bytes) + " bytes (max_header_bytes)");
  }
  if (p.payload_bytes > limits.max_payload_bytes) {
    too_big("payload of " + std::to_string(p.payload_bytes) + " bytes exceeds the limit of " +
            std::to_string(limits.max_payload_bytes) + " bytes (max_payload_bytes)");
  }
  return p;
}

Frame decode_frame(std::string_view header_text, std::vector<std::byte> payload,
                   const FrameLimits& limits) {
  Json header;
  try {
    header = parse_json(header_text, "header", kMaxHeaderDepth);
  } catch (const Error& e) {
    bad_frame(e.what());
  }
  if (!header.is_object())
    bad_frame("header must be a JSON object, got " + std::string(json_type_name(header)));

  Frame f;
  auto kind_it = header.find("kind");
  if (kind_it == header.end() || !kind_it->is_string()) bad_frame("header needs a string 'kind'");
  const auto& kind = kind_it->get_ref<const std::string&>();
  auto k = std::find_if(kKindNames.begin(), kKindNames.end(),
                        [&](const auto& p) { return p.second == kind; });
  if (k == kKindNames.end()) bad_frame("unknown frame kind '" + kind.substr(0, 32) + "'");
  f.kind = k->first;
  f.id = get_u64(header, "id", "header");
  if (auto m = header.find("method"); m != header.end()) {
    if (!m->is_string())
      bad_frame("'method' must be a string, got " + std::string(json_type_name(*m)));
    f.method = m->get<std::string>();
  }
  if (auto b = header.find("body"); b != header.end()) f.body = std::move(*b);
  check_kind_rules(f.kind, f.id, f.method, f.body);

  if (auto arrays = header.find("arrays"); arrays != header.end()) {
    if (!arrays->is_array())
      bad_frame("'arrays' must be an array, got " + std::string(json_type_name(*arrays)));
    if (arrays->size() > limits.max_arrays) {
      too_big(std::to_string(arrays->size()) + " arrays exceed the limit of " +
              std::to_string(limits.max_arrays));
    }
    f.arrays.reserve(arrays->size());
    for (size_t i = 0; i < arrays->size(); ++i) {
      const Json& d = (*arrays)[i];
      std::string where = "arrays[" + std::to_string(i) + "]";
      if (!d.is_object()) bad_frame(where + " must be an object");
      auto name = d.find("name");
      if (name == d.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
        bad_frame(where + " needs a non-empty string 'name'");
      }
      ArrayDesc a;
      a.name = name->get<std::string>();
      if (a.name.size() > kMaxNameBytes) bad_frame(where + ": name longer than 128 bytes");
      where += " '" + a.name + "'";
      auto dt = d.find("dtype");
      if (dt == d.end()) bad_frame(where + ": missing 'dtype'");
      a.dtype = parse_dtype(*dt, where);
      a.count = get_u64(d, "count", where);
      a.offset = get_u64(d, "offset", where);
      size_t size = dtype_size(a.dtype);
      if (a.offset % size != 0) {
        bad_frame(where + ": offset " + std::to_string(a.offset) + " is not a multiple of the " +
                  std::string(dtype_name(a.dtype)) + " size " + std::to_string(size));
      }
      if (a.offset > payload.size() || a.count > (payload.size() - a.offset) / size) {
        bad_frame(where + ": " + std::to_string(a.count) + " x " +
                  std::string(dtype_name(a.dtype)) + " at offset " + std::to_string(a.offset) +
                  " lies outside the payload of " + std::to_string(payload.size()) + " bytes");
      }
      if (f.find_array(a.name) != nullptr) bad_frame(where + ": duplicate array name");
      f.arrays.push_back(std::move(a));
    }
  }
  f.payload = std::move(payload);
  return f;
}

Frame decode_frame_bytes(std::span<const std::byte> bytes, const FrameLimits& limits) {
  if (bytes.size() < kPrefixBytes) {
    bad_frame("truncated: " + std::to_string(bytes.size()) + " bytes, a frame needs at least 16");
  }
  Prefix p = decode_prefix(bytes.first<kPrefixBytes>(), limits);
  uint64_t have = bytes.size() - kPrefixBytes;
  if (have < p.header_bytes || have - p.header_bytes < p.payload_bytes) {
    bad_frame("truncated: prefix announces " + std::to_string(p.header_bytes) + " header + " +
              std::to_string(p.payload_bytes) + " payload bytes, only " + std::to_string(have) +
              " follow");
  }
  if (have - p.header_bytes > p.payload_bytes) {
    bad_frame(std::to_string(have - p.header_bytes - p.payload_bytes) +
              " trailing bytes after the frame");
  }
  auto header = bytes.subspan(kPrefixBytes, p.header_bytes);
  auto payload = bytes.subspan(kPrefixBytes + p.header_bytes);
  return decode_frame(std::string_view(reinterpret_cast<const char*>(header.data()), header.size()),
                      std::vector<std::byte>(payload.begin(), payload.end()), limits);
}

std::vector<std::byte> flatten(const EncodedFrame& frame) {
  std::vector<std::byte> out(frame.size());
  std::memcpy(out.data(), frame.head.data(), frame.head.size());
  if (!frame.payload.empty())
    std::memcpy(out.data() + frame.head.size(), frame.payload.data(), frame.payload.size());
  return out;
}

Frame make_error_frame(uint64_t id, ErrorCode code, std::string_view message) {
  Frame f;
  f.kind = FrameKind::kError;
  f.id = id;
  f.body = {{"code", error_code_name(code)}, {"message", message}};
  return f;
}

Frame make_close_frame(ErrorCode code, std::string_view message) {
  Frame f = make_error_frame(0, code, message);
  f.kind = FrameKind::kClose;
  return f;
}

Frame make_abort_frame(uint64_t id) {
  Frame f;
  f.kind = FrameKind::kAbort;
  f.id = id;
  return f;
}

Frame make_hello_frame(std::string_view token) {
  Frame f;
  f.kind = FrameKind::kHello;
  if (!token.empty()) f.body = {{"token", token}};
  return f;
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (ErrorCode c : kAllCodes) {
    if (error_code_name(c) == name) return c;
  }
  return std::nullopt;
}

Error frame_error(const Frame& frame) {
  std::string code = "internal", message = "(no message)";
  if (frame.body.is_object()) {
    if (auto c = frame.body.find("code"); c != frame.body.end() && c->is_string())
      code = c->get<std::string>();
    if (auto m = frame.body.find("message"); m != frame.body.end() && m->is_string())
      message = m->get<std::string>();
  }
  return Error(error_code_from_name(code).value_or(ErrorCode::kInternal), message);
}

}  // namespace ajet::rpc
