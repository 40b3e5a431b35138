#include <gtest/gtest.h>

#include "common/encoding.h"
#include "common/error.h"
#include "common/json.h"
#include "episodes/episode_key.h"

namespace ajet::episodes {
namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef";

EpisodeKeyClaims sample() {
  EpisodeKeyClaims c;
  c.agent_name = "planner";
  c.target_tag = "tag";
  c.episode_uuid = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
  c.episode_address = "addr";
  return c;
}

// Expects verify() to reject with kUnauthenticated and a message containing `why`.
void expect_rejected(const EpisodeKeySigner& signer, const std::string& key,
                     const std::string& why) {
  try {
    signer.verify(key);
    ADD_FAILURE() << "accepted: " << key;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated);
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(kSecret), std::string::npos);
  }
}

Json payload(const std::string& key) {
  return Json::parse(*base64_decode(key.substr(kKeyPrefix.size())));
}

std::string encode(const Json& fields) {
  return std::string(kKeyPrefix) + base64_encode(fields.dump());
}

TEST(EpisodeKey, ValidKeyRoundTripsWithAndWithoutBearer) {
  EpisodeKeySigner signer(kSecret);
  std::string key = signer.make_key(sample());
  ASSERT_EQ(key.rfind("sk-ajet-", 0), 0u);
  // Upstream-compatible payload: the upstream fields are all there.
  Json fields = payload(key);
  for (const char* f : {"agent_name", "target_tag", "episode_uuid", "episode_address", "sig"}) {
    EXPECT_TRUE(fields.contains(f)) << f;
  }
  for (const std::string& presented :
       {key, "Bearer " + key, "bearer " + key, "  Bearer " + key + " "}) {
    EpisodeKeyClaims c = signer.verify(presented);
    EXPECT_EQ(c.agent_name, "planner");
    EXPECT_EQ(c.target_tag, "tag");
    EXPECT_EQ(c.episode_uuid, sample().episode_uuid);
    EXPECT_EQ(c.episode_address, "addr");
  }
}

TEST(EpisodeKey, ForgedByAnotherSecretIsRejected) {
  EpisodeKeySigner mine(kSecret), theirs("another-secret-of-enough-length");
  expect_rejected(mine, theirs.make_key(sample()), "signature does not match");
}

TEST(EpisodeKey, AlteredFieldIsRejected) {
  EpisodeKeySigner signer(kSecret);
  Json fields = payload(signer.make_key(sample()));
  for (const char* field : {"agent_name", "episode_uuid", "target_tag", "episode_address"}) {
    Json altered = fields;
    altered[field] = altered[field].get<std::string>() + "x";
    expect_rejected(signer, encode(altered), "signature does not match");
  }
  Json extra = fields;
  extra["admin"] = true;  // an added field is covered by the signature too
  expect_rejected(signer, encode(extra), "signature does not match");
}

TEST(EpisodeKey, MalformedKeysSayWhatIsWrong) {
  EpisodeKeySigner signer(kSecret);
  std::string key = signer.make_key(sample());
  expect_rejected(signer, key.substr(0, key.size() - 7), "");  // truncated
  expect_rejected(signer, "", "no key given");
  expect_rejected(signer, "Bearer ", "no key given");
  expect_rejected(signer, "sk-proj-abc", "not an AgentJet episode key");
  expect_rejected(signer, "sk-ajet-***not base64***", "not base64");
  expect_rejected(signer, "sk-ajet-" + base64_encode("[1, 2]"), "not a JSON object");
  expect_rejected(signer, "sk-ajet-" + base64_encode("{not json"), "not a JSON object");
  // An upstream-style unsigned key: structurally fine, but not signed by us.
  Json unsigned_fields = payload(key);
  unsigned_fields.erase("sig");
  expect_rejected(signer, encode(unsigned_fields), "not signed by this server");
  Json missing = payload(key);
  missing.erase("episode_uuid");
  expect_rejected(signer, encode(missing), "field 'episode_uuid' is missing");
  expect_rejected(signer, "sk-ajet-" + std::string(10000, 'A'), "longer than");
}

TEST(EpisodeKey, ShortSecretIsRefused) { EXPECT_THROW(EpisodeKeySigner("short"), Error); }

TEST(AgentName, HeaderThenModelThenKey) {
  EpisodeKeyClaims claims = sample();
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, std::nullopt), "planner");
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "reserved_field"), "planner");
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "AgentJet-Model"), "planner");
  // Before (issue 39): any model string named an agent, so Claude Code's "claude-opus-…" (and a
  // side call on another model) split an episode into agents that trainable_agents did not train.
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "claude-opus-4-8"), "planner");
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "critic"), "planner");
  AgentNames names;
  names.by_model = {{"claude-opus-4-8", "coder"}};
  names.known = {"coder", "critic"};
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "claude-opus-4-8", names), "coder");
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "critic", names), "critic");
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, "claude-haiku", names), "planner");
  EXPECT_EQ(resolve_agent_name(claims, "solver", "critic", names), "solver");
  EXPECT_EQ(resolve_agent_name(claims, "", "critic", names), "critic");
  EXPECT_THROW(resolve_agent_name(claims, std::string(200, 'a'), std::nullopt), Error);
  EXPECT_EQ(resolve_agent_name(claims, std::nullopt, std::string("a\nb")), "planner")
      << "not an agent name: ignored";
  AgentNames bad;
  bad.by_model = {{"m", std::string(200, 'a')}};
  EXPECT_THROW(resolve_agent_name(claims, std::nullopt, "m", bad), Error);
}

}  // namespace
}  // namespace ajet::episodes
