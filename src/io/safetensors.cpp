#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace deepinfer::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

// Bytes of a tensor, or nullopt when a dim is negative, the size overflows, or it is not whole bytes.
std::optional<uint64_t> tensor_nbytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t bits = dtype_bits(dtype);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(bits, static_cast<uint64_t>(d), &bits)) return std::nullopt;
  if (bits % 8 != 0) return std::nullopt;
  return bits / 8;
}

// A JSON integer in [0, 2^63), else nullopt (negative, fractional, not a number, too large).
std::optional<int64_t> non_negative(const json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(v);
  }
  return std::nullopt;  // nlohmann parses every non-negative integer as unsigned
}

// A valid header nests 3 deep; refusing much deeper nesting bounds what a hostile header can cost.
json parse_header(const std::string& path, const char* begin, const char* end) {
  constexpr int kMaxDepth = 8;
  bool too_deep = false;
  auto cb = [&](int depth, json::parse_event_t, json&) {
    too_deep = too_deep || depth > kMaxDepth;
    return !too_deep;
  };
  json header = json::parse(begin, end, cb, /*allow_exceptions=*/false);
  check(!too_deep, path, ": safetensors header is nested deeper than ", kMaxDepth);
  check(!header.is_discarded(), path, ": safetensors header is not valid JSON");
  check(header.is_object(), path, ": safetensors header is not a JSON object");
  return header;
}

TensorView parse_entry(const std::string& path, const std::string& name, const json& e,
                       const uint8_t* data, uint64_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  check(e.is_object(), where, ": header entry is not an object");
  auto dt = e.find("dtype");
  check(dt != e.end() && dt->is_string(), where, ": missing or non-string 'dtype'");
  const std::optional<DType> dtype = dtype_from_name(dt->get<std::string>());
  check(dtype.has_value(), where, ": unknown dtype '", dt->get<std::string>(), "'");

  auto sh = e.find("shape");
  check(sh != e.end() && sh->is_array(), where, ": missing or non-array 'shape'");
  std::vector<int64_t> shape;
  for (const json& d : *sh) {
    const std::optional<int64_t> v = non_negative(d);
    if (!v) fail(where, ": shape has a negative or non-integer dimension ", d.dump());
    shape.push_back(*v);
  }
  const std::optional<uint64_t> nbytes = tensor_nbytes(*dtype, shape);
  if (!nbytes)
    fail(where, ": shape ", shape_str(shape), " of ", dtype_name(*dtype),
         " is too large or not a whole number of bytes");

  auto off = e.find("data_offsets");
  check(off != e.end() && off->is_array() && off->size() == 2, where,
        ": missing 'data_offsets' [begin, end]");
  const std::optional<int64_t> begin = non_negative((*off)[0]), end = non_negative((*off)[1]);
  if (!begin || !end || *begin > *end) fail(where, ": invalid data_offsets ", off->dump());
  if (static_cast<uint64_t>(*end) > data_size)
    fail(where, ": data_offsets ", off->dump(), " run past the data section (", data_size, " bytes)");
  if (static_cast<uint64_t>(*end - *begin) != *nbytes)
    fail(where, ": data_offsets ", off->dump(), " span ", *end - *begin, " bytes but ", dtype_name(*dtype),
         " ", shape_str(shape), " needs ", *nbytes);
  return TensorView{name, *dtype, std::move(shape), data + *begin, static_cast<size_t>(*nbytes), path};
}

// Non-empty tensors must not share bytes (gaps are tolerated).
void check_no_overlap(const std::string& path, const std::map<std::string, TensorView>& tensors) {
  std::vector<const TensorView*> spans;
  for (const auto& [name, t] : tensors)
    if (t.nbytes > 0) spans.push_back(&t);
  std::sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < spans.size(); ++i)
    check(spans[i]->data >= spans[i - 1]->data + spans[i - 1]->nbytes, path, ": tensors '",
          spans[i - 1]->name, "' and '", spans[i]->name, "' overlap in the data section");
}

void convert_to_f32(const TensorView& t, float* out) {
  const size_t n = static_cast<size_t>(t.numel());
  auto each = [&](auto unit, auto convert) {
    for (size_t i = 0; i < n; ++i) {
      decltype(unit) v;
      std::memcpy(&v, t.data + i * sizeof v, sizeof v);  // views may be unaligned
      out[i] = convert(v);
    }
  };
  switch (t.dtype) {
    case DType::F32: each(float{}, [](float v) { return v; }); break;
    case DType::F16: each(uint16_t{}, fp16_to_float); break;
    case DType::BF16: each(uint16_t{}, bf16_to_float); break;
    case DType::F8_E4M3: each(uint8_t{}, e4m3_to_float); break;
    case DType::F8_E8M0: each(uint8_t{}, e8m0_to_float); break;
    default:
      fail(t.file, ": tensor '", t.name, "' has dtype ", dtype_name(t.dtype), ", which cannot be read as fp32");
  }
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const uint64_t size = stat_ok ? static_cast<uint64_t>(st.st_size) : 0;
  if (stat_ok && size >= 8) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      f->map_ = map;
      f->map_size_ = size;
    }
  }
  ::close(fd);
  check(stat_ok, path, ": not a regular file");
  check(size >= 8, path, ": truncated (", size, " bytes; a safetensors file starts with an 8-byte header length)");
  check(f->map_ != nullptr, path, ": mmap failed");

  const auto* bytes = static_cast<const uint8_t*>(f->map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];  // little-endian
  check(header_len <= size - 8, path, ": header length ", header_len, " exceeds the file size ", size);
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  const json header = parse_header(path, header_begin, header_begin + header_len);

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      check(entry.is_object(), path, ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        check(v.is_string(), path, ": __metadata__ value for '", k, "' is not a string");
        f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    f->tensors_.emplace(name, parse_entry(path, name, entry, data, data_size));
  }
  check_no_overlap(path, f->tensors_);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  const fs::path p(path);
  check(fs::exists(p, ec), path, ": no such file or directory");
  std::vector<fs::path> files;
  const fs::path index_path = p / "model.safetensors.index.json";
  json weight_map;
  if (!fs::is_directory(p, ec)) {
    files.push_back(p);
  } else if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    json index = json::parse(in, nullptr, /*allow_exceptions=*/false);
    check(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
          index_path.string(), ": not a JSON object with a 'weight_map' object");
    weight_map = index["weight_map"];
    for (const auto& [name, shard] : weight_map.items()) {
      check(shard.is_string(), index_path.string(), ": tensor '", name, "' maps to a non-string shard");
      const fs::path f = p / shard.get<std::string>();
      check(fs::is_regular_file(f, ec), index_path.string(), ": tensor '", name, "' maps to shard '",
            shard.get<std::string>(), "', which does not exist");
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else if (fs::exists(p / "model.safetensors", ec)) {
    files.push_back(p / "model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(p, ec))
      if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    check(!files.empty(), path, ": no model.safetensors.index.json, model.safetensors or *.safetensors");
  }

  for (const fs::path& f : files) {
    c.files_.push_back(SafetensorsFile::open(f.string()));
    for (const auto& [name, view] : c.files_.back()->tensors()) {
      auto [it, inserted] = c.index_.emplace(name, &view);
      check(inserted, path, ": tensor '", name, "' appears in both ", it->second->file, " and ", view.file);
    }
  }
  for (const auto& [name, shard] : weight_map.items()) {
    const std::string shard_path = (p / shard.get<std::string>()).string();
    auto it = c.index_.find(name);
    check(it != c.index_.end() && it->second->file == shard_path, index_path.string(), ": tensor '", name,
          "' is mapped to ", shard_path, ", which does not contain it");
  }
  return c;
}

bool Checkpoint::contains(const std::string& name) const { return index_.count(name) > 0; }

const TensorView& Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  check(it != index_.end(), path_, ": tensor '", name, "' not found");
  return *it->second;
}

const TensorView& Checkpoint::get(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape) const {
  const TensorView& t = get(name);
  check(t.dtype == dtype && t.shape == shape, t.file, ": tensor '", name, "': expected ", dtype_name(dtype),
        " ", shape_str(shape), ", found ", dtype_name(t.dtype), " ", shape_str(t.shape));
  return t;
}

std::vector<float> Checkpoint::read_f32(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView& t = get(name);
  check(t.shape == shape, t.file, ": tensor '", name, "': expected shape ", shape_str(shape), ", found ",
        shape_str(t.shape));
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t, out.data());
  return out;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, view] : index_) out.push_back(name);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const TensorToWrite& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& t = *sorted[i];
    check(t.name != "__metadata__" && (i == 0 || sorted[i - 1]->name != t.name), path, ": tensor '",
          t.name, "' is a duplicate or reserved name");
    const std::optional<uint64_t> nbytes = tensor_nbytes(t.dtype, t.shape);
    check(nbytes.has_value(), path, ": tensor '", t.name, "': invalid shape ", shape_str(t.shape), " for ",
          dtype_name(t.dtype));
    check(t.bytes.size() == *nbytes, path, ": tensor '", t.name, "': ", t.bytes.size(),
          " bytes given, ", dtype_name(t.dtype), " ", shape_str(t.shape), " needs ", *nbytes);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + *nbytes}}};
    offset += *nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    check(out.is_open(), path, ": cannot write ", tmp, ": ", std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const TensorToWrite* t : sorted)
      out.write(reinterpret_cast<const char*>(t->bytes.data()), static_cast<std::streamsize>(t->bytes.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      fail(path, ": writing ", tmp, " failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    fail(path, ": cannot rename ", tmp, " into place: ", why);
  }
}

}  // namespace deepinfer::io
