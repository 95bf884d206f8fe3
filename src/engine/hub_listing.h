// The Hugging Face hub's file list of one revision (GET /api/models/<repo>/revision/<rev>?blobs=true),
// read field by field: the answer comes from the network, so a missing or mistyped field, or a file
// name or hash that would lead out of the cache folder, is a deepinfer::Error naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::engine {

struct HubFile {
  std::string name;  // relative path in the repo: no "..", ".", empty or absolute parts
  std::string hash;  // LFS files: sha256 of the data; others: git blob id (sha1 of "blob <size>\0" + data)
  bool lfs = false;
  int64_t size = -1;  // bytes; -1 when the hub did not say
};

struct HubListing {
  std::string commit;  // 40 hex digits
  std::vector<HubFile> files;
};

HubListing parse_hub_listing(const std::string& body, const std::string& repo);

// A revision (branch, tag, commit, "refs/pr/1") that stays inside the cache's refs/ folder.
bool is_safe_revision(const std::string& revision);

}  // namespace deepinfer::engine
