// The embedded web files and the self-contained dashboard page classic runs write.
#include <gtest/gtest.h>

#include <string>

#include "common/fs.h"
#include "web/assets.h"

namespace ajet::web {
namespace {

TEST(WebAssets, EveryFileOfWebIsCompiledInByteForByte) {
  for (const char* name : {"index.html", "ui.js", "style.css"}) {
    const Asset* a = find_asset(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_EQ(a->body, read_file(std::string(AJET_SOURCE_DIR) + "/web/" + name)) << name;
  }
  EXPECT_EQ(find_asset("index.html")->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(find_asset("ui.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(find_asset("style.css")->content_type, "text/css; charset=utf-8");
  EXPECT_EQ(find_asset("../CMakeLists.txt"), nullptr);
  EXPECT_EQ(find_asset(""), nullptr);
}

TEST(WebAssets, ThePagesFetchNothingFromElsewhere) {
  for (const char* name : {"index.html", "ui.js", "style.css"}) {
    const std::string_view body = find_asset(name)->body;
    for (const char* remote : {"http://", "https://", "//cdn", "@import"}) {
      // the SVG namespace URI is an identifier, not a fetch
      std::string text(body);
      for (size_t at = text.find("http://www.w3.org/2000/svg"); at != std::string::npos;
           at = text.find("http://www.w3.org/2000/svg")) {
        text.erase(at, 26);
      }
      EXPECT_EQ(text.find(remote), std::string::npos) << name << " mentions " << remote;
    }
  }
}

TEST(WebAssets, TheSnapshotInlinesEverythingAndCannotBeBrokenOutOfByItsData) {
  Json snapshot = {
      {"title", "calc </script><b>"},
      {"global_step", 3},
      {"names", Json::array({{{"name", "rollout/reward_mean"}, {"points", 2}, {"last_step", 1}}})},
      {"series",
       {{"rollout/reward_mean",
         Json::array({Json::array({0, 0.25, 1.0}), Json::array({1, 0.5, 2.0})})},
        {"x</script><script>alert(1)//", Json::array()}}}};
  const std::string html = dashboard_snapshot_html(snapshot);
  EXPECT_NE(html.find("<title>calc &lt;/script&gt;&lt;b&gt; · AgentJet dashboard</title>"),
            std::string::npos);
  // one closing tag per inlined script, none from the data
  size_t closes = 0;
  for (size_t at = html.find("</script>"); at != std::string::npos;
       at = html.find("</script>", at + 1))
    closes += 1;
  EXPECT_EQ(closes, 2u);
  EXPECT_NE(html.find("x\\u003c/script\\u003e\\u003cscript\\u003ealert(1)//"), std::string::npos);
  EXPECT_NE(html.find(std::string(find_asset("ui.js")->body)), std::string::npos);
  EXPECT_NE(html.find(std::string(find_asset("style.css")->body)), std::string::npos);
  EXPECT_EQ(html.find("src=\""), std::string::npos) << "nothing is loaded from a file or URL";
}

}  // namespace
}  // namespace ajet::web
