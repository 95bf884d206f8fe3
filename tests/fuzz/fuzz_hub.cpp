// Fuzz target: the hub's file list (parse_hub_listing). Any answer is read or refused with
// deepinfer::Error; what is read must stay inside the cache: relative names without '..' whose
// folders are no listed file, and hashes of hex digits only (they name blob files).
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "core/error.h"
#include "engine/hub_listing.h"

namespace {
bool hex_only(const std::string& s) { return s.find_first_not_of("0123456789abcdef") == std::string::npos; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deepinfer::engine::HubListing l;
  try {
    l = deepinfer::engine::parse_hub_listing(std::string(reinterpret_cast<const char*>(data), size), "org/m");
  } catch (const deepinfer::Error&) {
    return 0;
  }
  if (l.commit.size() != 40 || !hex_only(l.commit)) std::abort();
  std::set<std::string> names;
  for (const auto& f : l.files) {
    const std::filesystem::path p(f.name);
    const std::string normal = p.lexically_normal().string();
    if (!p.is_relative() || normal != f.name || normal.starts_with("..")) std::abort();
    if (f.hash.size() != (f.lfs ? 64u : 40u) || !hex_only(f.hash) || f.size < -1) std::abort();
    if (!names.insert(f.name).second) std::abort();
  }
  for (const auto& n : names)
    for (auto parent = std::filesystem::path(n).parent_path(); !parent.empty(); parent = parent.parent_path())
      if (names.count(parent.string())) std::abort();
  return 0;
}
