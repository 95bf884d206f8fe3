// The hub's file list (parse_hub_listing) under hostile or changed answers: every missing or
// mistyped field, and every name or hash that would lead out of the cache folder, is a
// deepinfer::Error naming the field and the value; nothing else escapes (no nlohmann exception).
#include "engine/hub_listing.h"

#include <gtest/gtest.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

using nlohmann::json;

const std::string kSha1(40, 'a'), kSha256(64, 'b'), kCommit = "0123456789abcdef0123456789abcdef01234567";

json answer() {
  return {{"id", "org/m"},
          {"sha", kCommit},
          {"siblings",
           {{{"rfilename", "config.json"}, {"blobId", kSha1}, {"size", 12}},
            {{"rfilename", "sub/model.safetensors"}, {"blobId", kSha1}, {"lfs", {{"sha256", kSha256}, {"size", 99}}}},
            {{"rfilename", "README.md"}, {"blobId", kSha1}, {"lfs", nullptr}}}}};
}

// The answer with the JSON pointer `at` set to `value` (or removed when value is discarded).
std::string with(const std::string& at, const json& value) {
  json j = answer();
  json::json_pointer p(at);
  if (value.is_discarded()) j[p.parent_pointer()].erase(p.back());
  else j[p] = value;
  return j.dump();
}
const json kRemoved = json(json::value_t::discarded);

void expect_refused(const std::string& body, const std::string& needle, const std::string& value = "") {
  try {
    parse_hub_listing(body, "org/m");
    ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the hub's answer for org/m"), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_NE(m.find(value), std::string::npos) << m;
  }
}

TEST(HubListing, ReadsTheFilesOfARevision) {
  HubListing l = parse_hub_listing(answer().dump(), "org/m");
  EXPECT_EQ(l.commit, kCommit);
  ASSERT_EQ(l.files.size(), 3u);
  EXPECT_EQ(l.files[0].name, "config.json");
  EXPECT_FALSE(l.files[0].lfs);
  EXPECT_EQ(l.files[0].hash, kSha1);
  EXPECT_EQ(l.files[0].size, 12);
  EXPECT_TRUE(l.files[1].lfs);
  EXPECT_EQ(l.files[1].hash, kSha256);
  EXPECT_EQ(l.files[1].size, 99);
  EXPECT_FALSE(l.files[2].lfs);  // "lfs": null is a plain git file
  EXPECT_EQ(l.files[2].size, -1);  // no size given
}

TEST(HubListing, NotJsonOrNotAnObject) {
  expect_refused("<html>rate limited</html>", "is not JSON");
  expect_refused("[1, 2]", "the answer = [1,2]", "must be a JSON object");
  expect_refused("\"sha\"", "the answer", "must be a JSON object");
}

TEST(HubListing, MissingOrMistypedTopLevelFields) {
  expect_refused(with("/sha", kRemoved), "sha is missing");
  expect_refused(with("/sha", 12), "sha = 12", "hex digits");
  expect_refused(with("/sha", "../../../../etc"), "sha = \"../../../../etc\"", "hex digits");
  expect_refused(with("/sha", std::string(40, 'G')), "sha = ", "hex digits");
  expect_refused(with("/siblings", kRemoved), "siblings is missing");
  expect_refused(with("/siblings", {{"rfilename", "x"}}), "siblings = ", "must be a list of files");
  expect_refused(with("/siblings", "config.json"), "siblings = \"config.json\"", "must be a list");
}

TEST(HubListing, MistypedFileEntries) {
  expect_refused(with("/siblings/0", "config.json"), "siblings[0] = \"config.json\"", "must be an object");
  expect_refused(with("/siblings/1/rfilename", kRemoved), "siblings[1].rfilename is missing");
  expect_refused(with("/siblings/0/rfilename", 7), "siblings[0].rfilename = 7", "must be a string");
  expect_refused(with("/siblings/0/rfilename", nullptr), "siblings[0].rfilename = null");
  expect_refused(with("/siblings/0/blobId", kRemoved), "siblings[0].blobId is missing");
  expect_refused(with("/siblings/0/blobId", ""), "siblings[0].blobId = \"\"", "40 lowercase hex digits");
  expect_refused(with("/siblings/0/size", "12"), "siblings[0].size = \"12\"", "byte count");
  expect_refused(with("/siblings/0/size", -1), "siblings[0].size = -1", "byte count");
  expect_refused(with("/siblings/0/size", 1.5), "siblings[0].size = 1.5", "byte count");
  expect_refused(with("/siblings/0/size", json::parse("18446744073709551615")), "siblings[0].size", "byte count");
  expect_refused(with("/siblings/1/lfs", "yes"), "siblings[1].lfs = \"yes\"", "must be an object");
  expect_refused(with("/siblings/1/lfs/sha256", kRemoved), "siblings[1].lfs.sha256 is missing");
  expect_refused(with("/siblings/1/lfs/sha256", kSha1), "siblings[1].lfs.sha256", "64 lowercase hex digits");
  expect_refused(with("/siblings/1/lfs/size", kRemoved), "siblings[1].lfs.size is missing");
  expect_refused(with("/siblings/1/lfs/size", true), "siblings[1].lfs.size = true", "byte count");
}

TEST(HubListing, NamesThatLeaveTheSnapshotFolderAreRefused) {
  for (std::string name : std::vector<std::string>{"../config.json", "a/../../b", "/etc/passwd", "a//b", "./x", "a/.", "", "dir/",
                           "a\\..\\b", std::string("a\0b", 3), "x\ny", std::string(256, 'n')})
    expect_refused(with("/siblings/0/rfilename", name), "siblings[0].rfilename");
  // A hash names a blob file: a path there would leave blobs/ as well.
  expect_refused(with("/siblings/0/blobId", "../../../../../../../tmp/x"), "siblings[0].blobId");
}

TEST(HubListing, NamesThatCollide) {
  json j = answer();
  j["siblings"][2]["rfilename"] = "config.json";
  expect_refused(j.dump(), "siblings[2].rfilename = \"config.json\": listed twice");
  j["siblings"][2]["rfilename"] = "sub";  // a file where sub/model.safetensors needs a folder
  expect_refused(j.dump(), "\"sub/model.safetensors\" lies inside \"sub\"");
}

TEST(HubListing, LongValuesAreCutShortInTheMessage) {
  try {
    parse_hub_listing(with("/sha", std::string(100000, 'z')), "org/m");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u);
  }
}

TEST(HubListing, Revisions) {
  for (std::string ok : std::vector<std::string>{"main", "v1.0", "refs/pr/1", kCommit}) EXPECT_TRUE(is_safe_revision(ok)) << ok;
  for (std::string bad : {"", "..", "../x", "a/../b", "/abs", "a//b", "a b", "a?b", "x#y", "%2e%2e", "a\\b"})
    EXPECT_FALSE(is_safe_revision(bad)) << bad;
}

}  // namespace
}  // namespace deepinfer::engine
