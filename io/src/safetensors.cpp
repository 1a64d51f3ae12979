#include "hla/io/safetensors.hpp"

#include "hla/io/atomic_file.hpp"
#include "hla/io/float_bits.hpp"
#include "hla/io/printable.hpp"
#include "hla/parallel.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <limits>
#include <set>

#include <fcntl.h>
#include <unistd.h>

namespace hla::io {
namespace {

using json = nlohmann::json;

struct StInfo {
  StDType t;
  const char* name;
  std::size_t size;
};
constexpr StInfo kStDTypes[] = {
    {StDType::BOOL, "BOOL", 1},       {StDType::U8, "U8", 1},   {StDType::I8, "I8", 1},   {StDType::I16, "I16", 2},
    {StDType::U16, "U16", 2},         {StDType::I32, "I32", 4}, {StDType::U32, "U32", 4}, {StDType::I64, "I64", 8},
    {StDType::U64, "U64", 8},         {StDType::F8_E4M3, "F8_E4M3", 1},                   {StDType::F8_E5M2, "F8_E5M2", 1},
    {StDType::F16, "F16", 2},         {StDType::BF16, "BF16", 2},                         {StDType::F32, "F32", 4},
    {StDType::F64, "F64", 8}};

const StInfo& info(StDType t) {
  for (const auto& i : kStDTypes)
    if (i.t == t) return i;
  return kStDTypes[0];
}

std::string known_dtypes() {
  std::string s;
  for (const auto& i : kStDTypes) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

std::uint64_t load_le(const char* p, std::size_t n) {
  std::uint64_t x = 0;
  for (std::size_t i = 0; i < n; ++i) x |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return x;
}

void store_le(std::string& out, std::uint64_t x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

std::string number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Rejects duplicate keys in any object of the header (nlohmann keeps the last).
struct DuplicateKeyCheck {
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  bool operator()(int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) open.emplace_back();
    else if (ev == json::parse_event_t::object_end) open.pop_back();
    else if (ev == json::parse_event_t::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  }
};

// Before JSON parsing: only text (no NUL or other control byte; JSON allows
// none outside whitespace), nesting at most kMaxHeaderDepth (a safetensors
// header needs 3), so that parsing costs at most a few times the header size.
template <class Fail> void check_header_text(std::string_view header, Fail&& fail) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < header.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(header[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02x", c);
      throw fail("header holds the control byte " + std::string(buf) + " at offset " + std::to_string(i) +
                 " (a safetensors header is JSON text padded with spaces)");
    }
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxHeaderDepth)
        throw fail("header nests JSON deeper than " + std::to_string(kMaxHeaderDepth) + " levels (offset " +
                   std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

std::string to_string(StDType t) { return info(t).name; }

std::optional<StDType> parse_st_dtype(std::string_view s) {
  for (const auto& i : kStDTypes)
    if (s == i.name) return i.t;
  return std::nullopt;
}

std::size_t st_dtype_size(StDType t) { return info(t).size; }

StDType st_dtype(DType t) { return *parse_st_dtype(hla::info(t).safetensors_name); }

std::optional<DType> float_dtype(StDType t) {
  for (const hla::DTypeInfo& d : kDTypes)
    if (d.safetensors_name == info(t).name) return d.id;
  return std::nullopt;
}

std::optional<std::uint64_t> shape_elements(const std::vector<std::int64_t>& shape) {
  std::uint64_t p = 1;
  for (std::int64_t s : shape) {
    if (s < 0 || __builtin_mul_overflow(p, static_cast<std::uint64_t>(s), &p)) return std::nullopt;
  }
  return p;
}

std::uint64_t Tensor::elements() const { return shape_elements(shape).value_or(0); }

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
// A file's header parsed and checked against a data buffer of `buffer` bytes:
// the metadata, the tensors (their bytes not yet filled) and where each
// tensor's bytes lie, in order.
struct Span {
  std::uint64_t begin, end;
  std::string name;
};
struct FileLayout {
  SafetensorsFile file;
  std::vector<Span> spans;
};
FileLayout parse_file_layout(std::string_view header, std::uint64_t buffer, const std::string& source);

// fill(span, its tensor's bytes) for every tensor of the layout, tensors in
// parallel once the data is large (a good layout: no two spans share a tensor).
template <class Fill> SafetensorsFile filled(FileLayout l, Fill&& fill) {
  std::uint64_t data = 0;
  for (const Span& s : l.spans) data += s.end - s.begin;
  parallel_for(l.spans.size(), data > (std::uint64_t{1} << 22) ? worker_threads() : 1,
               [&](std::size_t i) { fill(l.spans[i], l.file.tensors.at(l.spans[i].name).bytes); });
  return std::move(l.file);
}
}  // namespace

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source) {
  auto fail = [&](const std::string& what) { return InputError(source + ": " + what); };
  if (bytes.size() < 8)
    throw fail("truncated: " + std::to_string(bytes.size()) +
               " bytes, too short for the 8-byte header length of a safetensors file");
  const std::uint64_t n = load_le(bytes.data(), 8);
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
               " bytes");
  if (n > bytes.size() - 8)
    throw fail("truncated: header length " + std::to_string(n) + " exceeds the " + std::to_string(bytes.size() - 8) +
               " bytes that follow it");
  const std::string_view header = bytes.substr(8, n);
  const std::uint64_t buffer = bytes.size() - 8 - n;
  // The data, copied tensor by tensor once the layout is known good.
  return filled(parse_file_layout(header, buffer, source),
                [&](const Span& s, std::string& out) { out.assign(bytes.substr(8 + n + s.begin, s.end - s.begin)); });
}

namespace {
template <class Fail> void parse_metadata(const json& entry, SafetensorsFile& out, Fail&& fail) {
  if (!entry.is_object())
    throw fail(std::string("__metadata__ must be an object of strings, got ") + entry.type_name());
  for (const auto& [k, v] : entry.items()) {
    if (!v.is_string())
      throw fail("__metadata__ value of '" + printable(k) + "' must be a string, got " + v.type_name() + " " + printable(v.dump()));
    out.metadata[k] = v.get<std::string>();
  }
}

// One tensor's header entry: its dtype and shape, and in `span` the bytes of
// the data buffer (`buffer` bytes long) it takes, checked against the shape.
template <class Fail>
Tensor parse_tensor_entry(const std::string& name, const json& entry, std::uint64_t buffer, Span& span, Fail&& fail) {
  const std::string shown = printable(name);
  auto bad = [&](const std::string& what) { return fail("tensor '" + shown + "': " + what); };
  if (name.empty() || has_control_bytes(name)) throw bad("a tensor name must be non-empty text without control bytes");
  if (!entry.is_object()) throw bad(std::string("entry must be an object, got ") + entry.type_name());
  for (const auto& [k, v] : entry.items()) {
    (void)v;
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      throw bad("unknown key '" + printable(k) + "' (expected dtype, shape, data_offsets)");
  }
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(k)) throw bad(std::string("missing key '") + k + "'");

  const json& jd = entry["dtype"];
  if (!jd.is_string()) throw bad(std::string("dtype must be a string, got ") + printable(jd.dump()));
  const auto dtype = parse_st_dtype(jd.get<std::string>());
  if (!dtype) throw bad("unknown dtype '" + printable(jd.get<std::string>()) + "' (known: " + known_dtypes() + ")");

  Tensor t;
  t.dtype = *dtype;
  const json& js = entry["shape"];
  if (!js.is_array()) throw bad("shape must be an array, got " + printable(js.dump()));
  if (js.size() > kMaxRank) throw bad("shape has " + std::to_string(js.size()) + " dimensions, more than " + std::to_string(kMaxRank));
  for (const json& s : js) {
    if (!s.is_number_integer() || (s.is_number_integer() && !s.is_number_unsigned() && s.get<std::int64_t>() < 0))
      throw bad("shape " + printable(js.dump()) + " must hold non-negative integers");
    if (s.is_number_unsigned() && s.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      throw bad("shape " + printable(js.dump()) + " has an entry too large");
    t.shape.push_back(s.get<std::int64_t>());
  }

  const json& jo = entry["data_offsets"];
  if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
    throw bad("data_offsets must be [begin, end], two non-negative integers, got " + printable(jo.dump()));
  const std::uint64_t b = jo[0].get<std::uint64_t>(), e = jo[1].get<std::uint64_t>();
  if (b > e) throw bad("data_offsets " + jo.dump() + " end before they begin");
  if (e > buffer)
    throw bad("data_offsets " + jo.dump() + " lie outside the data buffer of " + std::to_string(buffer) + " bytes");
  const auto elems = shape_elements(t.shape);
  std::uint64_t want = 0;
  if (!elems || __builtin_mul_overflow(*elems, std::uint64_t{st_dtype_size(t.dtype)}, &want))
    throw bad("shape " + shape_string(t.shape) + " overflows 64 bits");
  if (want != e - b)
    throw bad("shape " + shape_string(t.shape) + " of " + to_string(t.dtype) + " needs " + std::to_string(want) +
              " bytes but data_offsets " + jo.dump() + " give " + std::to_string(e - b));
  span = {b, e, name};
  return t;
}

// The tensors' spans (sorted here) tile the data buffer: no overlap, no gap, no trailing byte.
template <class Fail> void check_spans(std::vector<Span>& spans, std::uint64_t buffer, Fail&& fail) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& x, const Span& y) { return std::tie(x.begin, x.end, x.name) < std::tie(y.begin, y.end, y.name); });
  std::uint64_t at = 0;
  std::string prev;
  for (const Span& s : spans) {
    if (s.begin < at)
      throw fail("tensor '" + s.name + "' (bytes " + std::to_string(s.begin) + ".." + std::to_string(s.end) +
                 ") overlaps tensor '" + prev + "' (which ends at " + std::to_string(at) + ")");
    if (s.begin > at)
      throw fail("gap in the data buffer: bytes " + std::to_string(at) + ".." + std::to_string(s.begin) +
                 " before tensor '" + s.name + "' belong to no tensor");
    at = s.end;
    prev = s.name;
  }
  if (at != buffer)
    throw fail("trailing bytes: the data buffer holds " + std::to_string(buffer) + " bytes but the tensors cover " +
               std::to_string(at) + " (file length must be exactly 8 + header + data)");
}

FileLayout parse_file_layout(std::string_view header, std::uint64_t buffer, const std::string& source) {
  auto fail = [&](const std::string& what) { return InputError(source + ": " + what); };
  check_header_text(header, fail);

  DuplicateKeyCheck dup;
  json h;
  try {
    h = json::parse(header.begin(), header.end(), std::ref(dup));
  } catch (const json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!dup.duplicate.empty()) throw fail("header has the key '" + printable(dup.duplicate) + "' twice (duplicate names)");
  if (!h.is_object()) throw fail(std::string("header must be a JSON object, got ") + h.type_name());

  FileLayout layout;
  for (const auto& [name, entry] : h.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, layout.file, fail);
      continue;
    }
    Span span{};
    Tensor t = parse_tensor_entry(name, entry, buffer, span, fail);
    layout.spans.push_back(std::move(span));
    layout.file.tensors.emplace(name, std::move(t));
  }
  check_spans(layout.spans, buffer, fail);
  return layout;
}

// Where the data buffer ends by the header: where its furthest tensor ends
// (the full parse checks the rest).
template <class Fail> std::uint64_t declared_data_end(std::string_view header, Fail&& fail) {
  check_header_text(header, fail);
  json h;
  try {
    h = json::parse(header.begin(), header.end());
  } catch (const json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  }
  std::uint64_t end = 0;
  if (h.is_object())
    for (const auto& [name, entry] : h.items()) {
      if (name == "__metadata__" || !entry.is_object() || !entry.contains("data_offsets")) continue;
      const json& jo = entry["data_offsets"];
      if (jo.is_array() && jo.size() == 2 && jo[1].is_number_unsigned()) end = std::max(end, jo[1].get<std::uint64_t>());
    }
  return end;
}

// Reads out.size() bytes of fd from offset `at` into out.
template <class Fail> void pread_all(int fd, std::string& out, std::uint64_t at, const std::string& source, const std::string& name, Fail&& fail) {
  for (std::uint64_t got = 0; got < out.size();) {
    const ssize_t r = ::pread(fd, out.data() + got, std::min<std::uint64_t>(out.size() - got, std::uint64_t{1} << 24),
                              static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw InputError("cannot read '" + source + "': " + std::strerror(errno));
    if (r == 0) throw fail("the file shrank while it was read (tensor '" + printable(name) + "')");
    got += static_cast<std::uint64_t>(r);
  }
}
}  // namespace

// Reads no more than the file declares: the 8-byte length, a header of at most
// kMaxHeaderBytes, then exactly the data buffer its tensors span, in pieces
// (so that a file declaring more than it holds costs only what it holds).
// Only regular files: a device (/dev/zero) or FIFO is refused up front.
SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  const std::string source = path.string();
  auto fail = [&](const std::string& what) { return InputError(source + ": " + what); };
  const int fd = open_regular_file(path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string bytes;
  auto read_more = [&](std::uint64_t want) {  // appends up to `want` bytes; returns how many arrived
    std::uint64_t got = 0;
    while (got < want) {
      const std::uint64_t step = std::min<std::uint64_t>(want - got, std::uint64_t{1} << 24);
      const std::size_t at = bytes.size();
      bytes.resize(at + step);
      const ssize_t r = ::read(fd, bytes.data() + at, step);
      if (r < 0 && errno == EINTR) {
        bytes.resize(at);
        continue;
      }
      if (r < 0) throw InputError("cannot read '" + source + "': " + std::strerror(errno));
      bytes.resize(at + static_cast<std::size_t>(r));
      got += static_cast<std::uint64_t>(r);
      if (r == 0) break;
    }
    return got;
  };
  if (read_more(8) < 8) return parse_safetensors(bytes, source);  // names the truncation
  const std::uint64_t n = load_le(bytes.data(), 8);
  if (n > kMaxHeaderBytes) return parse_safetensors(bytes, source);  // names the limit
  if (read_more(n) < n) return parse_safetensors(bytes, source);
  const std::uint64_t end = declared_data_end(std::string_view(bytes.data() + 8, n), fail);
  if (end > kMaxDataBytes)
    throw fail("tensors span " + std::to_string(end) + " bytes of data, more than the limit of " + std::to_string(kMaxDataBytes));
  if (const std::uint64_t size = open_file_size(fd); size >= 8 + n + end) {
    // The file holds what the header declares: every check on the header and
    // a buffer of what the whole read below would see (end, or one byte more
    // showing trailing bytes), then each tensor's bytes read straight into it,
    // tensors in parallel (no copy of the file in memory).
    SafetensorsFile file = filled(parse_file_layout(std::string_view(bytes).substr(8, n), std::min(size - 8 - n, end + 1), source),
                                  [&](const Span& s, std::string& out) {
                                    out.resize(s.end - s.begin);
                                    pread_all(fd, out, 8 + n + s.begin, source, s.name, fail);
                                  });
    char extra;
    if (::pread(fd, &extra, 1, static_cast<off_t>(8 + n + end)) > 0)
      throw fail("the file grew while it was read (trailing bytes after the " + std::to_string(end) + " bytes its tensors cover)");
    return file;
  }
  // Room for what the header declares, grown only as bytes arrive: a file
  // claiming more than it holds costs what it holds (the reserve is capped).
  bytes.reserve(static_cast<std::size_t>(8 + n + 1 + std::min<std::uint64_t>(end, open_file_size(fd))));
  read_more(end);
  // One byte more than declared shows trailing bytes (named by the parser).
  read_more(1);
  return parse_safetensors(bytes, source);
}

namespace {
// The file's bytes in order (the 8-byte header length, the header, every
// tensor's data), handed to sink piece by piece: a large file is written
// without a second copy of it in memory.
void serialize_to(const SafetensorsFile& file, const ByteSink& sink) {
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, t] : file.tensors) {
    if (name == "__metadata__") throw InputError("a tensor may not be called __metadata__");
    const auto elems = shape_elements(t.shape);
    std::uint64_t want = 0;
    if (!elems || __builtin_mul_overflow(*elems, std::uint64_t{st_dtype_size(t.dtype)}, &want) ||
        want != t.bytes.size())
      throw InputError("tensor '" + name + "': " + std::to_string(t.bytes.size()) + " bytes do not fit shape " +
                       shape_string(t.shape) + " of " + to_string(t.dtype));
    order.emplace_back(&name, &t);
  }
  // Largest element first keeps every tensor aligned to its element size.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return st_dtype_size(a.second->dtype) > st_dtype_size(b.second->dtype);
  });

  json h = json::object();
  std::uint64_t at = 0;
  for (const auto& [name, t] : order) {
    h[*name] = {{"dtype", to_string(t->dtype)}, {"shape", t->shape}, {"data_offsets", {at, at + t->bytes.size()}}};
    at += t->bytes.size();
  }
  if (!file.metadata.empty()) h["__metadata__"] = file.metadata;
  std::string text;
  try {
    text = h.dump();  // std::map keys: sorted; no whitespace
  } catch (const json::exception& e) {
    throw InputError(std::string("safetensors header cannot be written: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string length;
  store_le(length, text.size(), 8);
  sink(length.data(), length.size());
  sink(text.data(), text.size());
  for (const auto& [name, t] : order) sink(t->bytes.data(), t->bytes.size());
}
}  // namespace

std::string serialize_safetensors(const SafetensorsFile& file) {
  std::string out;
  serialize_to(file, [&out](const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file) {
  write_file_atomically(path, [&file](const ByteSink& sink) { serialize_to(file, sink); });
}

Tensor float_tensor(DType t, std::vector<std::int64_t> shape, const std::vector<double>& values,
                    const std::string& what) {
  Tensor out;
  out.dtype = st_dtype(t);
  out.shape = std::move(shape);
  if (shape_elements(out.shape) != values.size())
    throw InputError(what + ": " + std::to_string(values.size()) + " values do not fill shape " +
                     shape_string(out.shape));
  const std::size_t size = dtype_size(t);
  if (t == DType::f64 && std::endian::native == std::endian::little) {
    // Every double is an F64 value, stored as its own bytes (NaN payloads included).
    out.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
    return out;
  }
  // Encoded as first_where scans, on every core; the first value that is not
  // exactly representable (encode_float: none; representable() agrees) is named.
  out.bytes.resize(values.size() * size);
  const std::size_t i = first_where(values.size(), [&](std::size_t j) {
    const auto bits = encode_float(t, values[j]);
    if (bits)
      for (std::size_t b = 0; b < size; ++b) out.bytes[j * size + b] = static_cast<char>((*bits >> (8 * b)) & 0xff);
    return !bits;
  });
  if (i < values.size())
    throw InputError(what + ": element " + std::to_string(i) + " = " + number(values[i]) + " is not exactly representable in " +
                     to_string(out.dtype));
  return out;
}

Tensor i64_tensor(std::vector<std::int64_t> shape, const std::vector<std::int64_t>& values) {
  Tensor out;
  out.dtype = StDType::I64;
  out.shape = std::move(shape);
  if (shape_elements(out.shape) != values.size())
    throw InputError(std::to_string(values.size()) + " values do not fill shape " + shape_string(out.shape));
  for (std::int64_t v : values) store_le(out.bytes, static_cast<std::uint64_t>(v), 8);
  return out;
}

Tensor u8_tensor(std::vector<std::int64_t> shape, const std::vector<std::uint8_t>& values) {
  Tensor out;
  out.dtype = StDType::U8;
  out.shape = std::move(shape);
  if (shape_elements(out.shape) != values.size())
    throw InputError(std::to_string(values.size()) + " values do not fill shape " + shape_string(out.shape));
  out.bytes.assign(values.begin(), values.end());
  return out;
}

std::vector<double> float_values(const Tensor& t, const std::string& what) {
  const auto ft = float_dtype(t.dtype);
  if (!ft) throw InputError(what + " has dtype " + to_string(t.dtype) + "; expected a float dtype (F64, F32, BF16, F16)");
  const std::size_t size = dtype_size(*ft);
  std::vector<double> out(t.bytes.size() / size);
  if (*ft == DType::f64 && std::endian::native == std::endian::little) {
    if (!out.empty()) std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(double));  // F64 bytes are the doubles
    return out;
  }
  parallel_slices(out.size(), std::size_t{1} << 18, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) out[i] = decode_float(*ft, load_le(t.bytes.data() + i * size, size));
  });
  return out;
}

std::vector<std::int64_t> i64_values(const Tensor& t, const std::string& what) {
  if (t.dtype != StDType::I64) throw InputError(what + " has dtype " + to_string(t.dtype) + "; expected I64");
  std::vector<std::int64_t> out(t.bytes.size() / 8);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int64_t>(load_le(t.bytes.data() + 8 * i, 8));
  return out;
}

std::vector<std::uint8_t> u8_values(const Tensor& t, const std::string& what) {
  if (t.dtype != StDType::U8) throw InputError(what + " has dtype " + to_string(t.dtype) + "; expected U8");
  return std::vector<std::uint8_t>(t.bytes.begin(), t.bytes.end());
}

}  // namespace hla::io
