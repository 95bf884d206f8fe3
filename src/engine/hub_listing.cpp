#include "engine/hub_listing.h"

#include <algorithm>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

using nlohmann::json;

// The value as JSON text, cut short: a hostile answer may hold megabytes in one field.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Every '/'-separated part is a plain name: not empty, ".", ".." or longer than 255 bytes.
bool plain_parts(std::string_view s) {
  for (size_t start = 0; start <= s.size();) {
    size_t end = std::min(s.find('/', start), s.size());
    std::string_view part = s.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.size() > 255) return false;
    start = end + 1;
  }
  return true;
}

struct Reader {
  const std::string& repo;

  [[noreturn]] void refuse(const std::string& field, const json& v, const std::string& allowed) const {
    fail("the hub's answer for ", repo, ": ", field, " = ", show(v), ": ", allowed);
  }
  // The member, or nullptr when absent (never operator[]: on a const object an absent key is UB).
  const json* member(const json& obj, const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& required(const json& obj, const std::string& key, const std::string& field) const {
    const json* v = member(obj, key);
    if (!v) fail("the hub's answer for ", repo, ": ", field, " is missing");
    return *v;
  }
  std::string hex(const json& v, size_t digits, const std::string& field) const {
    bool ok = v.is_string() && v.get_ref<const std::string&>().size() == digits;
    if (ok)
      for (char c : v.get_ref<const std::string&>()) ok &= (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!ok) refuse(field, v, "must be a string of " + std::to_string(digits) + " lowercase hex digits");
    return v.get<std::string>();
  }
  int64_t size(const json& v, const std::string& field) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX)) return v.get<int64_t>();
    if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() >= 0) return v.get<int64_t>();
    refuse(field, v, "must be a byte count (an integer >= 0)");
  }
  // A relative path whose every part is a plain name, so the file lands inside the snapshot folder.
  std::string file_name(const json& v, const std::string& field) const {
    if (!v.is_string()) refuse(field, v, "must be a string");
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 4096) refuse(field, v, "must be a file name of 1 to 4096 bytes");
    if (!plain_parts(s))
      refuse(field, v, "must be a relative path without empty, '.' or '..' parts (each at most 255 bytes)");
    for (unsigned char c : s)
      if (c < 0x20 || c == 0x7f || c == '\\') refuse(field, v, "must not hold control characters or '\\'");
    return s;
  }
};

}  // namespace

HubListing parse_hub_listing(const std::string& body, const std::string& repo) {
  Reader r{repo};
  const json info = json::parse(body, nullptr, false);
  check(!info.is_discarded(), "the hub's answer for ", repo, " is not JSON");
  if (!info.is_object()) r.refuse("the answer", info, "must be a JSON object");
  HubListing out;
  out.commit = r.hex(r.required(info, "sha", "sha"), 40, "sha");
  const json& siblings = r.required(info, "siblings", "siblings");
  if (!siblings.is_array()) r.refuse("siblings", siblings, "must be a list of files");
  std::set<std::string> names;
  for (size_t i = 0; i < siblings.size(); ++i) {
    const json& s = siblings[i];
    const std::string at = "siblings[" + std::to_string(i) + "]";
    if (!s.is_object()) r.refuse(at, s, "must be an object");
    HubFile f;
    f.name = r.file_name(r.required(s, "rfilename", at + ".rfilename"), at + ".rfilename");
    check(names.insert(f.name).second, "the hub's answer for ", repo, ": ", at, ".rfilename = \"", f.name,
          "\": listed twice");
    const json* lfs = r.member(s, "lfs");
    f.lfs = lfs && !lfs->is_null();
    if (f.lfs) {
      if (!lfs->is_object()) r.refuse(at + ".lfs", *lfs, "must be an object (sha256, size) or null");
      f.hash = r.hex(r.required(*lfs, "sha256", at + ".lfs.sha256"), 64, at + ".lfs.sha256");
      f.size = r.size(r.required(*lfs, "size", at + ".lfs.size"), at + ".lfs.size");
    } else {
      f.hash = r.hex(r.required(s, "blobId", at + ".blobId"), 40, at + ".blobId");
      if (const json* size = r.member(s, "size"); size && !size->is_null()) f.size = r.size(*size, at + ".size");
    }
    out.files.push_back(std::move(f));
  }
  // "a" and "a/b" cannot both be files of one folder.
  for (const HubFile& f : out.files)
    for (size_t slash = f.name.find('/'); slash != std::string::npos; slash = f.name.find('/', slash + 1))
      check(!names.count(f.name.substr(0, slash)), "the hub's answer for ", repo, ": \"", f.name, "\" lies inside \"",
            f.name.substr(0, slash), "\", which is listed as a file");
  return out;
}

bool is_safe_revision(const std::string& revision) {
  if (revision.size() > 255 || !plain_parts(revision)) return false;
  for (unsigned char c : revision)
    if (c < 0x20 || c == 0x7f || c == '\\' || c == '?' || c == '#' || c == '%' || c == ' ') return false;
  return true;
}

}  // namespace deepinfer::engine
