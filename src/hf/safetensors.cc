#include "hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>
#include <unordered_set>

#include "common/error.h"
#include "common/json.h"

namespace ajet::hf {

// Tensor bytes are little-endian in the file and handed out as they are: a big-endian host would
// need byte swapping everywhere downstream, so we refuse to build there instead.
static_assert(std::endian::native == std::endian::little,
              "safetensors views assume a little-endian host");

namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr std::string_view kMetadataKey = "__metadata__";

[[noreturn]] void corrupt(std::string_view source, const std::string& message) {
  fail(ErrorCode::kDataLoss, std::string(source) + ": " + message);
}

[[noreturn]] void corrupt_tensor(std::string_view source, std::string_view tensor,
                                 const std::string& message) {
  fail(ErrorCode::kDataLoss,
       std::string(source) + ": tensor '" + std::string(tensor) + "': " + message);
}

std::optional<DType> dtype_from_name(std::string_view name) {
  static constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI64,
                                   DType::kI32, DType::kU8,  DType::kBool};
  for (DType d : kAll) {
    if (dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

// numel(shape) * element_size, or nullopt on overflow of 64 bits.
std::optional<uint64_t> checked_byte_size(const std::vector<int64_t>& shape, size_t element_size) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(element_size), &n)) return std::nullopt;
  return n;
}

// A JSON integer >= 0 (floats such as 2.0 are not integers in this format).
std::optional<uint64_t> as_unsigned(const OrderedJson& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// The header JSON as nlohmann's DOM builder reads it, also recording the first duplicate key of any
// object (JSON parsers keep the last value silently; the format forbids duplicates, and a silent
// pick could hide a corrupt file).
class HeaderReader final : public nlohmann::json_sax<OrderedJson> {
 public:
  explicit HeaderReader(OrderedJson& root) : dom_(root, true) {}
  std::string duplicate;

  bool null() override { return dom_.null(); }
  bool boolean(bool v) override { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) override { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) override { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) override {
    return dom_.number_float(v, s);
  }
  bool string(string_t& v) override { return dom_.string(v); }
  bool binary(binary_t& v) override { return dom_.binary(v); }
  bool start_object(std::size_t n) override {
    return open_objects_.emplace_back(), dom_.start_object(n);
  }
  bool key(string_t& k) override {
    if (!open_objects_.back().insert(k).second && duplicate.empty()) duplicate = k;
    return dom_.key(k);
  }
  bool end_object() override { return open_objects_.pop_back(), dom_.end_object(); }
  bool start_array(std::size_t n) override { return dom_.start_array(n); }
  bool end_array() override { return dom_.end_array(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // not called: sax_parse_json reports syntax errors itself
  }

 private:
  nlohmann::detail::json_sax_dom_parser<OrderedJson> dom_;
  std::vector<std::set<std::string>> open_objects_;
};

// Parses the header JSON with the project's bounded parser (kMaxJsonDepth: the parser is iterative,
// what later walks the value is not).
OrderedJson parse_header_json(std::string_view header, std::string_view source) {
  OrderedJson json;
  HeaderReader reader(json);
  try {
    sax_parse_json(header, "header", reader);
  } catch (const Error& e) {
    corrupt(source, e.what());  // "header: invalid JSON at <path>: <reason>"
  }
  if (!reader.duplicate.empty())
    corrupt(source, "header repeats the key '" + reader.duplicate + "'");
  if (!json.is_object()) corrupt(source, "header must be a JSON object");
  return json;
}

std::map<std::string, std::string> parse_metadata(const OrderedJson& value,
                                                  std::string_view source) {
  if (!value.is_object()) corrupt(source, "'__metadata__' must be an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) corrupt(source, "'__metadata__' entry '" + key + "' must be a string");
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

TensorInfo parse_tensor_entry(const std::string& name, const OrderedJson& entry, uint64_t data_size,
                              std::string_view source) {
  if (!entry.is_object()) corrupt_tensor(source, name, "entry must be an object");
  TensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string())
    corrupt_tensor(source, name, "missing string field 'dtype'");
  std::string dtype = dtype_it->get<std::string>();
  auto parsed_dtype = dtype_from_name(dtype);
  if (!parsed_dtype) {
    corrupt_tensor(
        source, name,
        "unsupported dtype '" + dtype + "' (supported: F32, F16, BF16, I64, I32, U8, BOOL)");
  }
  info.dtype = *parsed_dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array())
    corrupt_tensor(source, name, "missing array field 'shape'");
  for (const auto& d : *shape_it) {
    auto dim = as_unsigned(d);
    if (!dim || *dim > static_cast<uint64_t>(INT64_MAX)) {
      corrupt_tensor(source, name,
                     "shape " + shape_it->dump() + " must hold non-negative integers");
    }
    info.shape.push_back(static_cast<int64_t>(*dim));
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    corrupt_tensor(source, name, "missing field 'data_offsets' = [begin, end]");
  }
  auto begin = as_unsigned((*offsets_it)[0]);
  auto end = as_unsigned((*offsets_it)[1]);
  if (!begin || !end || *begin > *end) {
    corrupt_tensor(source, name,
                   "data_offsets " + offsets_it->dump() + " must be integers 0 <= begin <= end");
  }
  if (*end > data_size) {
    corrupt_tensor(source, name,
                   "data_offsets " + offsets_it->dump() + " run past the data section (" +
                       std::to_string(data_size) + " bytes)");
  }
  info.begin = static_cast<size_t>(*begin);
  info.end = static_cast<size_t>(*end);

  auto bytes = checked_byte_size(info.shape, dtype_size(info.dtype));
  if (!bytes)
    corrupt_tensor(source, name, "shape " + shape_it->dump() + " overflows 64-bit byte size");
  if (*bytes != *end - *begin) {
    corrupt_tensor(source, name,
                   "shape " + shape_it->dump() + " x " + dtype + " needs " +
                       std::to_string(*bytes) + " bytes but data_offsets " + offsets_it->dump() +
                       " hold " + std::to_string(*end - *begin));
  }
  return info;
}

// Validated header + tensor table over `bytes` (which the caller keeps alive).
struct Parsed {
  std::vector<TensorInfo> tensors;  // by data offset
  std::map<std::string, std::string> metadata;
  std::span<const std::byte> data;
};

Parsed parse_bytes(std::span<const std::byte> bytes, std::string_view source) {
  if (bytes.size() < 8) {
    corrupt(source, "file is " + std::to_string(bytes.size()) +
                        " bytes, too small for the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(bytes[i]);
  if (header_len < 2)
    corrupt(source, "header length " + std::to_string(header_len) + " is too small for '{}'");
  if (header_len > kMaxHeaderBytes) {
    corrupt(source, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  if (header_len > bytes.size() - 8) {
    corrupt(source, "header length " + std::to_string(header_len) + " exceeds the " +
                        std::to_string(bytes.size() - 8) + " bytes after the length field");
  }
  std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  if (header.front() != '{') corrupt(source, "header must start with '{'");

  Parsed out;
  out.data = bytes.subspan(8 + header_len);
  OrderedJson json = parse_header_json(header, source);
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      out.metadata = parse_metadata(value, source);
    } else {
      out.tensors.push_back(parse_tensor_entry(key, value, out.data.size(), source));
    }
  }

  // The tensors must tile the data section exactly: sorted by offsets, each starts where the
  // previous ended, and the last ends at the end of the file (the reference implementation's rule).
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) {
                     return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
                   });
  size_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : out.tensors) {
    if (t.begin < expected) {
      corrupt_tensor(source, t.name,
                     "bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                         ") overlap tensor '" + previous->name + "' [" +
                         std::to_string(previous->begin) + ", " + std::to_string(previous->end) +
                         ")");
    }
    if (t.begin > expected) {
      corrupt_tensor(
          source, t.name,
          "starts at byte " + std::to_string(t.begin) + " of the data section, leaving a gap of " +
              std::to_string(t.begin - expected) + " bytes after byte " + std::to_string(expected));
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != out.data.size()) {
    corrupt(source, "data section is " + std::to_string(out.data.size()) +
                        " bytes but the tensors cover only " + std::to_string(expected));
  }
  return out;
}

// Header JSON (padded with spaces to a multiple of 8 bytes) for tensors laid out in order.
std::string build_header(const std::vector<TensorView>& tensors,
                         const std::map<std::string, std::string>& metadata,
                         std::string_view destination) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::unordered_set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    auto where = std::string(destination) + ": tensor '" + t.name + "'";
    if (t.name == kMetadataKey) invalid_argument(where + ": the name is reserved");
    if (!seen.insert(t.name).second) invalid_argument(where + ": name given twice");
    auto bytes = checked_byte_size(t.shape, dtype_size(t.dtype));
    if (!bytes) invalid_argument(where + ": shape has a negative or overflowing dimension");
    if (*bytes != t.data.size()) {
      invalid_argument(where + ": shape x " + std::string(dtype_name(t.dtype)) + " needs " +
                       std::to_string(*bytes) + " bytes, got " + std::to_string(t.data.size()));
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const OrderedJson::exception& e) {
    invalid_argument(std::string(destination) +
                     ": cannot encode header (tensor names must be UTF-8): " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::string length_prefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// Writes a file as a sequence of chunks to `path.tmp-<pid>-<n>`, fsyncs, then renames over `path`.
void write_chunks_atomic(const std::filesystem::path& path,
                         const std::vector<std::span<const std::byte>>& chunks) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorCode::kIo, tmp.string() + ": cannot create (" + std::strerror(errno) + ")");
  auto abandon = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    std::filesystem::remove(tmp);
    fail(ErrorCode::kIo, tmp.string() + ": " + what + " (" + std::strerror(err) + ")");
  };
  for (auto chunk : chunks) {
    const std::byte* p = chunk.data();
    size_t left = chunk.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) abandon("write failed");
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) abandon("fsync failed");
  if (::close(fd) != 0) {
    std::filesystem::remove(tmp);
    fail(ErrorCode::kIo, tmp.string() + ": close failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    fail(ErrorCode::kIo, path.string() + ": rename failed (" + ec.message() + ")");
  }
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct SafetensorsFile::Impl {
  std::string source;
  void* mapping = nullptr;  // owned mmap when opened from a file
  size_t mapping_size = 0;
  std::span<const std::byte> data;  // the data section
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> by_name;
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (mapping != nullptr) ::munmap(mapping, mapping_size);
  }

  void load(std::span<const std::byte> bytes) {
    Parsed parsed = parse_bytes(bytes, source);
    data = parsed.data;
    tensors = std::move(parsed.tensors);
    metadata = std::move(parsed.metadata);
    for (size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
  }
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->source = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
         impl->source + ": cannot open (" + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::kIo, impl->source + ": not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(ErrorCode::kIo, impl->source + ": mmap failed (" + std::strerror(err) + ")");
    }
    impl->mapping = p;
    impl->mapping_size = size;
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  impl->load({static_cast<const std::byte*>(impl->mapping), size});
  return SafetensorsFile(std::move(impl));
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes,
                                       std::string_view source_name) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(source_name);
  impl->load(bytes);
  return SafetensorsFile(std::move(impl));
}

const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return impl_->tensors; }

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
  return TensorView{info.name, info.dtype, info.shape,
                    impl_->data.subspan(info.begin, info.end - info.begin)};
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

const std::string& SafetensorsFile::source() const { return impl_->source; }

std::string serialize_safetensors(const std::vector<TensorView>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string header = build_header(tensors, metadata, "safetensors buffer");
  std::string out = length_prefix(header.size()) + header;
  for (const TensorView& t : tensors)
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string header = build_header(tensors, metadata, path.string());
  std::string prefix = length_prefix(header.size());
  std::vector<std::span<const std::byte>> chunks = {as_bytes(prefix), as_bytes(header)};
  for (const TensorView& t : tensors) chunks.push_back(t.data);
  write_chunks_atomic(path, chunks);
}

}  // namespace ajet::hf
