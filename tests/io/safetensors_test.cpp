// safetensors reading and writing: round trips, checkpoint layouts, every malformed-input error, and
// a seeded fuzz of header corruptions (open() must either give in-bounds views or throw Error).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "deepinfer_st_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A raw safetensors file: length field (the header's length unless given), header text, data.
void put_raw(const std::string& path, const std::string& header, size_t data_size = 0,
             std::optional<uint64_t> length = std::nullopt) {
  put_bytes(path, le64(length.value_or(header.size())) + header + std::string(data_size, '\x01'));
}

// Runs f, expecting a deepinfer::Error whose message contains every part.
template <typename F>
void expect_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown; expected one mentioning " << parts.front();
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
        << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

std::span<const uint8_t> as_bytes(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }
template <typename T>
std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  const DType all[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E8M0,
                       DType::F4_E2M1X2, DType::I8, DType::U8, DType::I16, DType::I32, DType::I64, DType::BOOL};
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<TensorToWrite> tensors;
  for (DType t : all) {
    const std::vector<int64_t> shape = {3, 2};
    std::vector<uint8_t> bytes(6 * dtype_bits(t) / 8);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + bytes.size());
    payloads.push_back(bytes);
    tensors.push_back({"t." + std::string(dtype_name(t)), t, shape, {}});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = as_bytes(payloads[i]);
  const std::vector<uint8_t> scalar = {1, 2, 3, 4};
  tensors.push_back({"scalar", DType::F32, {}, as_bytes(scalar)});
  tensors.push_back({"empty", DType::BF16, {0, 5}, {}});
  const std::string path = dir / "all.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}});

  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const TensorToWrite& w : tensors) {
    const TensorView& v = file->tensors().at(w.name);
    EXPECT_EQ(v.dtype, w.dtype) << w.name;
    EXPECT_EQ(v.shape, w.shape) << w.name;
    EXPECT_EQ(v.file, path);
    ASSERT_EQ(v.nbytes, w.bytes.size()) << w.name;
    EXPECT_TRUE(std::equal(w.bytes.begin(), w.bytes.end(), v.data)) << w.name;
  }
  EXPECT_EQ(file->tensors().at("scalar").numel(), 1);
  EXPECT_EQ(file->tensors().at("empty").numel(), 0);

  // The header is padded to 8 bytes and the data is laid out in name order.
  const std::string raw = file_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const json header = json::parse(raw.substr(8, n));
  uint64_t offset = 0;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(entry["data_offsets"][0].get<uint64_t>(), offset) << name;
    offset = entry["data_offsets"][1].get<uint64_t>();
  }
  EXPECT_EQ(8 + n + offset, raw.size());
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(getpid())));
}

TEST(Safetensors, ReadF32ConvertsFloatDtypesAtAnyAlignment) {
  TempDir dir;
  const std::vector<float> want = {1.5f, -2.0f, 0.25f};
  std::vector<uint16_t> f16, bf16;
  std::vector<uint8_t> e4m3, e8m0 = {127, 128, 125};
  for (float x : want) {
    f16.push_back(float_to_fp16(x));
    bf16.push_back(float_to_bf16(x));
    e4m3.push_back(float_to_e4m3(x));
  }
  const auto f32b = to_bytes(want), f16b = to_bytes(f16), bf16b = to_bytes(bf16);
  const std::vector<uint8_t> i32b(12);
  // Names sort so that the 1-byte "a" puts every later tensor at an odd offset.
  const std::vector<uint8_t> one = {0};
  write_safetensors(dir / "m.safetensors",
                    {{"a", DType::U8, {1}, as_bytes(one)},
                     {"bf16", DType::BF16, {3}, as_bytes(bf16b)},
                     {"e4m3", DType::F8_E4M3, {3}, as_bytes(e4m3)},
                     {"e8m0", DType::F8_E8M0, {3}, as_bytes(e8m0)},
                     {"f16", DType::F16, {3}, as_bytes(f16b)},
                     {"f32", DType::F32, {3}, as_bytes(f32b)},
                     {"i32", DType::I32, {3}, as_bytes(i32b)}});
  const Checkpoint c = Checkpoint::open(dir / "m.safetensors");
  for (const char* name : {"bf16", "e4m3", "f16", "f32"}) EXPECT_EQ(c.read_f32(name, {3}), want) << name;
  EXPECT_EQ(c.read_f32("e8m0", {3}), (std::vector<float>{1.0f, 2.0f, 0.25f}));
  expect_error([&] { c.read_f32("i32", {3}); }, {"m.safetensors", "'i32'", "I32"});
  expect_error([&] { c.read_f32("f32", {1, 3}); }, {"m.safetensors", "'f32'", "[1, 3]", "[3]"});
}

TEST(Safetensors, GetChecksPresenceDtypeAndShape) {
  TempDir dir;
  const std::vector<uint8_t> bytes(12);
  write_safetensors(dir / "model.safetensors", {{"w", DType::BF16, {2, 3}, as_bytes(bytes)}});
  const Checkpoint c = Checkpoint::open(dir.path.string());
  EXPECT_TRUE(c.contains("w"));
  EXPECT_FALSE(c.contains("v"));
  EXPECT_EQ(c.get("w", DType::BF16, {2, 3}).nbytes, 12u);
  expect_error([&] { c.get("w", DType::F32, {2, 3}); }, {"model.safetensors", "'w'", "F32", "BF16"});
  expect_error([&] { c.get("w", DType::BF16, {3, 2}); }, {"model.safetensors", "'w'", "[3, 2]", "[2, 3]"});
  expect_error([&] { c.get("v"); }, {dir.path.string(), "'v'", "not found"});
}

void write_one(const std::string& path, const std::string& name, float value) {
  const auto bytes = to_bytes(std::vector<float>{value});
  write_safetensors(path, {{name, DType::F32, {1}, as_bytes(bytes)}});
}

TEST(Safetensors, ShardedFolderWithIndex) {
  TempDir dir;
  write_one(dir / "model-00001-of-00002.safetensors", "a", 1.0f);
  const std::vector<uint8_t> two(8);
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    {{"b", DType::F32, {1}, as_bytes(to_bytes(std::vector<float>{2.0f}))},
                     {"c", DType::F32, {2}, as_bytes(two)}});
  json index = {{"metadata", {{"total_size", 16}}},
                {"weight_map", {{"a", "model-00001-of-00002.safetensors"},
                                {"b", "model-00002-of-00002.safetensors"},
                                {"c", "model-00002-of-00002.safetensors"}}}};
  put_bytes(dir / "model.safetensors.index.json", index.dump());
  // A stray file the index does not name is ignored.
  write_one(dir / "stray.safetensors", "a", 9.0f);

  const Checkpoint c = Checkpoint::open(dir.path.string());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(c.read_f32("a", {1}), std::vector<float>{1.0f});
  EXPECT_EQ(c.read_f32("b", {1}), std::vector<float>{2.0f});
  EXPECT_EQ(c.get("c").file, dir / "model-00002-of-00002.safetensors");
}

TEST(Safetensors, FolderLayouts) {
  TempDir single, loose, empty;
  write_one(single / "model.safetensors", "x", 1.0f);
  write_one(single / "other.safetensors", "y", 2.0f);  // model.safetensors wins over the rest
  EXPECT_EQ(Checkpoint::open(single.path.string()).names(), std::vector<std::string>{"x"});
  EXPECT_EQ(Checkpoint::open(single / "other.safetensors").names(), std::vector<std::string>{"y"});

  write_one(loose / "part1.safetensors", "x", 1.0f);
  write_one(loose / "part2.safetensors", "y", 2.0f);
  put_bytes(loose / "notes.txt", "not a checkpoint");
  EXPECT_EQ(Checkpoint::open(loose.path.string()).names(), (std::vector<std::string>{"x", "y"}));

  expect_error([&] { Checkpoint::open(empty.path.string()); }, {empty.path.string()});
  expect_error([&] { Checkpoint::open(empty / "nope"); }, {"nope"});
}

TEST(Safetensors, DuplicateNameAcrossShards) {
  TempDir dir;
  write_one(dir / "part1.safetensors", "x", 1.0f);
  write_one(dir / "part2.safetensors", "x", 2.0f);
  expect_error([&] { Checkpoint::open(dir.path.string()); }, {"'x'", "part1.safetensors", "part2.safetensors"});
}

TEST(Safetensors, IndexErrors) {
  TempDir missing, lacking, garbled;
  write_one(missing / "shard1.safetensors", "a", 1.0f);
  put_bytes(missing / "model.safetensors.index.json",
            json{{"weight_map", {{"a", "shard1.safetensors"}, {"b", "shard9.safetensors"}}}}.dump());
  expect_error([&] { Checkpoint::open(missing.path.string()); },
               {"model.safetensors.index.json", "'b'", "shard9.safetensors"});

  write_one(lacking / "shard1.safetensors", "a", 1.0f);
  put_bytes(lacking / "model.safetensors.index.json",
            json{{"weight_map", {{"a", "shard1.safetensors"}, {"b", "shard1.safetensors"}}}}.dump());
  expect_error([&] { Checkpoint::open(lacking.path.string()); },
               {"model.safetensors.index.json", "'b'", "shard1.safetensors"});

  put_bytes(garbled / "model.safetensors.index.json", "{\"weight_map\": ");
  expect_error([&] { Checkpoint::open(garbled.path.string()); }, {"model.safetensors.index.json"});
}

TEST(Safetensors, MalformedFilesRaiseErrorsNamingFileAndTensor) {
  TempDir dir;
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  struct Case {
    std::string label, header;
    size_t data_size;
    std::vector<std::string> mentions;
    std::optional<uint64_t> length = std::nullopt;
  };
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  const Case cases[] = {
      {"length_beyond_file", "{}", 0, {"exceeds"}, 1000},
      {"length_huge", "{}", 0, {"exceeds"}, ~uint64_t{0}},
      {"not_json", "{not json", 0, {"not valid JSON"}},
      {"not_object", "[1, 2]", 0, {"not a JSON object"}},
      {"too_deep", "{\"w\":" + deep + "}", 0, {"nested"}},
      {"unknown_dtype", "{\"w\":" + entry("F7", "[1]", "[0,4]") + "}", 4, {"'w'", "F7"}},
      {"entry_not_object", "{\"w\":3}", 0, {"'w'"}},
      {"no_dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, {"'w'", "dtype"}},
      {"no_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, {"'w'", "data_offsets"}},
      {"negative_dim", "{\"w\":" + entry("F32", "[-1,4]", "[0,16]") + "}", 16, {"'w'", "negative"}},
      {"fractional_dim", "{\"w\":" + entry("F32", "[1.5]", "[0,4]") + "}", 4, {"'w'"}},
      {"huge_shape", "{\"w\":" + entry("F32", "[4294967296,4294967296,16]", "[0,4]") + "}", 4, {"'w'"}},
      {"odd_fp4", "{\"w\":" + entry("F4", "[3]", "[0,1]") + "}", 2, {"'w'"}},
      {"offsets_past_end", "{\"w\":" + entry("F32", "[2]", "[0,8]") + "}", 4, {"'w'", "past"}},
      {"offsets_reversed", "{\"w\":" + entry("F32", "[0]", "[4,0]") + "}", 4, {"'w'"}},
      {"offsets_negative", "{\"w\":" + entry("F32", "[1]", "[-4,0]") + "}", 4, {"'w'"}},
      {"size_mismatch", "{\"w\":" + entry("F32", "[2]", "[0,4]") + "}", 8, {"'w'", "needs 8"}},
      {"overlap", "{\"a\":" + entry("F32", "[2]", "[0,8]") + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}",
       12, {"'a'", "'b'", "overlap"}},
      {"bad_metadata", "{\"__metadata__\":{\"k\":1}}", 0, {"__metadata__", "'k'"}},
  };
  for (const Case& c : cases) {
    const std::string path = dir / (c.label + ".safetensors");
    put_raw(path, c.header, c.data_size, c.length);
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back(c.label + ".safetensors");
    SCOPED_TRACE(c.label);
    expect_error([&] { SafetensorsFile::open(path); }, mentions);
    expect_error([&] { Checkpoint::open(path); }, mentions);
  }
  put_bytes(dir / "short.safetensors", std::string("\x10\0\0", 3));
  expect_error([&] { SafetensorsFile::open(dir / "short.safetensors"); }, {"short.safetensors", "truncated"});
  put_bytes(dir / "zero.safetensors", "");
  expect_error([&] { SafetensorsFile::open(dir / "zero.safetensors"); }, {"zero.safetensors", "truncated"});
  expect_error([&] { SafetensorsFile::open(dir / "absent.safetensors"); }, {"absent.safetensors"});
  expect_error([&] { SafetensorsFile::open(dir.path.string()); }, {dir.path.string()});
}

TEST(Safetensors, WriteRejectsBadInputAndKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir / "out.safetensors";
  write_one(path, "old", 1.0f);
  const std::string before = file_bytes(path);
  const std::vector<uint8_t> three(3), four(4);
  expect_error([&] { write_safetensors(path, {{"w", DType::F32, {1}, as_bytes(three)}}); },
               {"out.safetensors", "'w'", "3 bytes"});
  expect_error([&] { write_safetensors(path, {{"w", DType::F32, {-1}, as_bytes(four)}}); },
               {"out.safetensors", "'w'"});
  expect_error([&] {
    write_safetensors(path, {{"w", DType::F32, {1}, as_bytes(four)}, {"w", DType::F32, {1}, as_bytes(four)}});
  }, {"out.safetensors", "'w'"});
  expect_error([&] { write_safetensors(dir / "no/such/dir/x.safetensors", {}); }, {"x.safetensors"});
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

// After a successful open, every view must lie inside the data section the header describes.
void expect_views_in_bounds(const SafetensorsFile& f, const std::string& raw) {
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  const json header = json::parse(raw.substr(8, n));
  for (const auto& [name, v] : f.tensors()) {
    const uint64_t begin = header[name]["data_offsets"][0], end = header[name]["data_offsets"][1];
    ASSERT_EQ(end - begin, v.nbytes) << name;
    ASSERT_LE(8 + n + end, raw.size()) << name;
    ASSERT_EQ(std::memcmp(v.data, raw.data() + 8 + n + begin, v.nbytes), 0) << name;
  }
}

TEST(Safetensors, FuzzedHeadersEitherOpenInBoundsOrThrowError) {
  TempDir dir;
  const std::string valid_path = dir / "valid.safetensors";
  std::vector<uint8_t> payload(64);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  const std::span<const uint8_t> p(payload);
  write_safetensors(valid_path,
                    {{"a", DType::F32, {2, 2}, p.subspan(0, 16)},
                     {"b.weight", DType::BF16, {4}, p.subspan(16, 8)},
                     {"c", DType::F8_E4M3, {2, 4}, p.subspan(24, 8)},
                     {"d", DType::F4_E2M1X2, {8}, p.subspan(32, 4)},
                     {"e", DType::I64, {3}, p.subspan(36, 24)}},
                    {{"format", "pt"}});
  const std::string valid = file_bytes(valid_path);
  uint64_t n = 0;
  std::memcpy(&n, valid.data(), 8);

  int opened = 0, rejected = 0;
  const std::string path = dir / "fuzz.safetensors";
  auto attempt = [&](const std::string& bytes) {
    put_bytes(path, bytes);
    try {
      const auto f = SafetensorsFile::open(path);
      ++opened;
      expect_views_in_bounds(*f, bytes);
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("fuzz.safetensors"), std::string::npos) << e.what();
    }  // anything else escapes and fails the test
  };

  for (size_t len = 0; len < valid.size(); ++len) attempt(valid.substr(0, len));
  std::mt19937_64 rng(1234);
  const std::string interesting = "{}[]\",:-0123456789.eE \\";
  for (int i = 0; i < 6000; ++i) {
    std::string b = valid;
    const size_t header_end = 8 + n;
    switch (i % 4) {
      case 0:  // flip random bits in the length field and the header
        for (int k = 1 + rng() % 3; k > 0; --k) b[rng() % header_end] ^= static_cast<char>(1 << rng() % 8);
        break;
      case 1:  // overwrite header bytes with JSON syntax
        for (int k = 1 + rng() % 3; k > 0; --k) b[8 + rng() % n] = interesting[rng() % interesting.size()];
        break;
      case 2:  // rewrite a digit: shapes and offsets change while the JSON stays valid
        for (size_t pos = 8 + rng() % n; pos < header_end; ++pos)
          if (std::isdigit(static_cast<unsigned char>(b[pos]))) {
            b[pos] = static_cast<char>('0' + rng() % 10);
            break;
          }
        break;
      case 3:  // change the length field, near its value or anywhere
        b.replace(0, 8, le64(rng() % 2 ? n + rng() % 33 - 16 : rng()));
        break;
    }
    attempt(b);
  }
  EXPECT_GT(opened, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace deepinfer::io
