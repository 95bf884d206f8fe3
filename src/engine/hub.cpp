#include "engine/hub.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <optional>
#include <sstream>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "engine/hub_listing.h"

#ifdef DEEPINFER_HAVE_CURL
#include <curl/curl.h>
#include <openssl/evp.h>
#endif

namespace fs = std::filesystem;

namespace deepinfer::engine {
namespace {

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool has_config(const fs::path& dir) { return fs::is_regular_file(dir / "config.json"); }

fs::path repo_cache_dir(const std::string& repo) {
  std::string folder = "models--" + std::regex_replace(repo, std::regex("/"), "--");
  return fs::path(hf_cache_dir()) / folder;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// models--org--name/refs/<revision> holds the commit; snapshots/<commit>/ the files.
std::optional<fs::path> find_in_cache(const std::string& repo, const std::string& revision) {
  fs::path root = repo_cache_dir(repo);
  std::string commit = revision;
  if (fs::is_regular_file(root / "refs" / revision)) commit = read_text(root / "refs" / revision);
  if (!is_safe_revision(commit)) return std::nullopt;  // a damaged refs file: ask the hub again
  fs::path snap = root / "snapshots" / commit;
  if (has_config(snap)) return snap;
  return std::nullopt;
}

#ifdef DEEPINFER_HAVE_CURL
struct Curl {
  CURL* h = curl_easy_init();
  ~Curl() { curl_easy_cleanup(h); }
};

// The hub's file list of a revision is kilobytes; a longer answer is not one (curl stops at a short write).
constexpr size_t kMaxAnswerBytes = size_t{64} << 20;
size_t write_string(char* data, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  if (body->size() + size * n > kMaxAnswerBytes) return 0;
  body->append(data, size * n);
  return size * n;
}
size_t write_file(char* data, size_t size, size_t n, void* out) {
  return std::fwrite(data, size, n, static_cast<FILE*>(out)) * size;
}

std::string http_get(const std::string& url) {
  Curl c;
  std::string body;
  curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, write_string);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &body);
  std::string token = getenv_str("HF_TOKEN");
  struct curl_slist* headers = nullptr;
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, headers);
  CURLcode rc = curl_easy_perform(c.h);
  long status = 0;
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  check(rc == CURLE_OK, "cannot reach ", url, ": ", curl_easy_strerror(rc));
  check(status == 200, url, " answered HTTP ", status);
  return body;
}

// Appends to `part` from its current size (HTTP Range), so an interrupted download resumes.
void http_download(const std::string& url, const fs::path& part) {
  int64_t have = fs::exists(part) ? static_cast<int64_t>(fs::file_size(part)) : 0;
  FILE* f = std::fopen(part.c_str(), "ab");
  check(f != nullptr, "cannot write ", part.string());
  Curl c;
  curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, write_file);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, f);
  if (have > 0) curl_easy_setopt(c.h, CURLOPT_RANGE, (std::to_string(have) + "-").c_str());
  CURLcode rc = curl_easy_perform(c.h);
  long status = 0;
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
  std::fclose(f);
  check(rc == CURLE_OK, "download of ", url, " failed: ", curl_easy_strerror(rc));
  if (have > 0 && status == 200) {  // the server ignored the range: start over
    fs::remove(part);
    return http_download(url, part);
  }
  check(status == 200 || status == 206, url, " answered HTTP ", status);
}

// A file name as a URL path: '/' stays, every byte outside the unreserved set is %-escaped.
std::string url_path(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

std::string hex_digest(const fs::path& file, const char* algo, const std::string& prefix) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_get_digestbyname(algo), nullptr);
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size());
  std::ifstream f(file, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (f.read(buf.data(), buf.size()) || f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), f.gcount());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  char b[3];
  for (unsigned i = 0; i < len; ++i) std::snprintf(b, sizeof b, "%02x", md[i]), hex += b;
  return hex;
}

fs::path download(const std::string& repo, const std::string& revision) {
  std::string endpoint = env_string("DEEPINFER_HF_ENDPOINT");
  if (endpoint.empty()) endpoint = getenv_str("HF_ENDPOINT");
  if (endpoint.empty()) endpoint = "https://huggingface.co";
  HubListing listing =
      parse_hub_listing(http_get(endpoint + "/api/models/" + repo + "/revision/" + revision + "?blobs=true"), repo);
  const std::string& commit = listing.commit;
  fs::path root = repo_cache_dir(repo);
  fs::create_directories(root / "blobs");
  for (const HubFile& file : listing.files) {
    fs::path blob = root / "blobs" / file.hash;
    if (!fs::exists(blob)) {
      fs::path part = blob;
      part += ".incomplete";
      http_download(endpoint + "/" + repo + "/resolve/" + commit + "/" + url_path(file.name), part);
      int64_t got = static_cast<int64_t>(fs::file_size(part));
      if (file.size >= 0 && got != file.size) {
        fs::remove(part);
        fail("download of ", repo, "/", file.name, " has ", got, " bytes, expected ", file.size);
      }
      std::string digest = file.lfs ? hex_digest(part, "SHA256", "")
                                    : hex_digest(part, "SHA1", "blob " + std::to_string(got) + std::string(1, '\0'));
      if (digest != file.hash) {
        fs::remove(part);
        fail("download of ", repo, "/", file.name, " is corrupt: hash ", digest, ", expected ", file.hash);
      }
      fs::rename(part, blob);
    }
    fs::path link = root / "snapshots" / commit / file.name;
    fs::create_directories(link.parent_path());
    if (!fs::exists(fs::symlink_status(link))) fs::create_symlink(fs::relative(blob, link.parent_path()), link);
  }
  if (revision != commit) {  // "refs/pr/1" is a path under refs/
    fs::create_directories((root / "refs" / revision).parent_path());
    std::ofstream(root / "refs" / revision) << commit;
  }
  fs::path snap = root / "snapshots" / commit;
  check(has_config(snap), repo, " has no config.json");
  return snap;
}
#endif

}  // namespace

std::string hf_cache_dir() {
  if (auto v = getenv_str("HF_HUB_CACHE"); !v.empty()) return v;
  if (auto v = getenv_str("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (auto v = getenv_str("XDG_CACHE_HOME"); !v.empty()) return (fs::path(v) / "huggingface" / "hub").string();
  return (fs::path(getenv_str("HOME")) / ".cache" / "huggingface" / "hub").string();
}

bool looks_like_repo_id(const std::string& name) {
  return std::regex_match(name, std::regex(R"([A-Za-z0-9][\w.\-]*/[\w.\-]+)"));
}

std::string resolve_model(const std::string& name, const std::string& revision) {
  if (fs::is_directory(name)) {
    check(has_config(name), "model folder ", name, " has no config.json");
    return name;
  }
  check(looks_like_repo_id(name), "model '", name, "' is neither a folder nor a Hugging Face repo id (org/name)");
  check(is_safe_revision(revision), "revision '", revision,
        "' is not a branch, tag or commit name (no empty, '.' or '..' parts, spaces, '\\', '?', '#' or '%')");
  if (std::string dir = env_string("DEEPINFER_HF_MODEL_DIR"); !dir.empty()) {
    std::string base = name.substr(name.find('/') + 1);
    for (fs::path cand : {fs::path(dir), fs::path(dir) / base, fs::path(dir) / name})
      if (has_config(cand)) return cand.string();
  }
  if (auto snap = find_in_cache(name, revision)) return snap->string();
  std::string offline = getenv_str("HF_HUB_OFFLINE");
  check(offline.empty() || offline == "0", "model ", name, " is not in the Hugging Face cache (", hf_cache_dir(),
        ") and HF_HUB_OFFLINE is set");
#ifdef DEEPINFER_HAVE_CURL
  try {
    return download(name, revision).string();
  } catch (const Error& e) {
    fail("model ", name, " is not in the Hugging Face cache (", hf_cache_dir(), ") and could not be downloaded: ", e.what());
  } catch (const fs::filesystem_error& e) {  // the cache folder: full disk, permissions, a file where a folder goes
    fail("model ", name, " could not be written into the Hugging Face cache (", hf_cache_dir(), "): ", e.what());
  }
#else
  fail("model ", name, " is not in the Hugging Face cache (", hf_cache_dir(), ") and this build cannot download");
#endif
}

}  // namespace deepinfer::engine
