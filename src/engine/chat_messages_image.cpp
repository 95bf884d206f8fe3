// image_url parts of chat messages: the image file's bytes from a data: URL (base64) or a local file.
// http(s) URLs are refused: the engine downloads nothing on a request's behalf.
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "engine/chat_messages.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::vector<uint8_t> from_data_url(std::string_view url, size_t max_bytes, const std::string& where) {
  const size_t comma = url.find(',');
  check(comma != std::string_view::npos, where, ": a data: URL needs a ',' before its data");
  const std::string_view meta = url.substr(5, comma - 5);  // after "data:"
  check(meta.size() >= 7 && meta.substr(meta.size() - 7) == ";base64", where,
        ": only base64 data: URLs are supported (data:image/png;base64,...)");
  check(meta.size() == 7 || starts_with_nocase(meta, "image/"), where, ": the data: URL's media type '",
        meta.substr(0, meta.size() - 7), "' is not an image type");
  const std::string_view data = url.substr(comma + 1);
  check(data.size() / 4 * 3 <= max_bytes + 2, where, ": the image is larger than the limit of ", max_bytes, " bytes");
  return base64_decode(data, where);
}

std::vector<uint8_t> from_file(std::string path, const ChatImageSources& sources, const std::string& where) {
  check(sources.local_files, where, ": image files are not allowed here: send the image inline as a data: URL "
        "(data:image/png;base64,...)");
  check(!path.empty(), where, ": the image URL is empty");
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(path), ec);
  check(!ec, where, ": cannot read the image file '", path, "'");
  if (!sources.local_root.empty()) {
    const fs::path root = fs::weakly_canonical(fs::path(sources.local_root), ec);
    auto rel = p.lexically_relative(root);
    check(!ec && !rel.empty() && *rel.begin() != "..", where, ": the image file '", path,
          "' is outside the allowed folder '", sources.local_root, "'");
  }
  check(fs::is_regular_file(p, ec), where, ": the image file '", path, "' does not exist or is not a file");
  const auto size = fs::file_size(p, ec);
  check(!ec && size <= sources.max_image_bytes, where, ": the image file '", path, "' is larger than the limit of ",
        sources.max_image_bytes, " bytes");
  std::ifstream f(p, std::ios::binary);
  check(f.good(), where, ": cannot read the image file '", path, "'");
  std::vector<uint8_t> out(size);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size));
  check(f.gcount() == static_cast<std::streamsize>(size), where, ": cannot read the image file '", path, "'");
  return out;
}

}  // namespace

std::vector<uint8_t> base64_decode(std::string_view text, const std::string& where) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=' && text.size() - end < 2) --end;  // up to two '=' of padding
  check(text.size() == end || text.size() % 4 == 0, where, ": the base64 padding is wrong");
  check(end % 4 != 1, where, ": the base64 data is truncated");
  std::vector<uint8_t> out;
  out.reserve(end / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < end; ++i) {
    const int v = base64_value(static_cast<unsigned char>(text[i]));
    check(v >= 0, where, ": the base64 data has an invalid character at offset ", i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

std::vector<uint8_t> image_from_url(const std::string& url, const ChatImageSources& sources, const std::string& where) {
  if (starts_with_nocase(url, "data:")) {
    std::vector<uint8_t> out = from_data_url(url, sources.max_image_bytes, where);
    check(!out.empty(), where, ": the image data is empty");
    check(out.size() <= sources.max_image_bytes, where, ": the image is larger than the limit of ",
          sources.max_image_bytes, " bytes");
    return out;
  }
  check(!starts_with_nocase(url, "http://") && !starts_with_nocase(url, "https://"), where,
        ": image URLs are not downloaded: send the image inline as a data: URL (data:image/png;base64,...)"
        " or, where files are allowed, as a file path");
  if (starts_with_nocase(url, "file://")) {
    std::string path = url.substr(7);
    if (starts_with_nocase(path, "localhost/")) path = path.substr(9);
    check(path.starts_with("/"), where, ": a file:// URL needs an absolute path (file:///path/to/image.png)");
    return from_file(path, sources, where);
  }
  const size_t colon = url.find(':'), slash = url.find('/');
  check(colon == std::string::npos || (slash != std::string::npos && slash < colon) || colon < 2, where,
        ": the image URL scheme '", url.substr(0, colon), "' is not supported (data:, file:// or a file path)");
  return from_file(url, sources, where);
}

}  // namespace deepinfer::engine
