// The SVG charts escape whatever a layer or run name holds, draw nothing out of non-finite data,
// and mark the heatmap cells nobody sampled.
#include "fp8scope/report/svg_chart.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace fp8scope::report;

TEST_CASE("labels are escaped everywhere they appear", "[svg_chart]") {
  CHECK(html_escape("<script>a & 'b' \"c\"</script>") ==
        "&lt;script&gt;a &amp; &#39;b&#39; &quot;c&quot;&lt;/script&gt;");
  LineChart c;
  c.title = "run <b>";
  c.series = {{"x&y", "#000", {{0, 1}, {1, 2}}}};
  c.markers = {{1, 2, "spike 'here'"}};
  const std::string svg = render(c);
  CHECK(svg.find("<b>") == std::string::npos);
  CHECK(svg.find("run &lt;b&gt;") != std::string::npos);
  CHECK(svg.find("x&amp;y") != std::string::npos);
  CHECK(svg.find("spike &#39;here&#39;") != std::string::npos);
}

TEST_CASE("a line breaks at non-finite points, log charts skip non-positive ones, and no data says so", "[svg_chart]") {
  LineChart c;
  c.series = {{"loss", "#000", {{0, 1}, {1, NAN}, {2, 3}, {3, 4}}}};
  std::string svg = render(c);
  // Two subpaths: M at the first point and again after the NaN.
  std::size_t moves = 0;
  for (std::size_t at = svg.find(" M"); at != std::string::npos; at = svg.find(" M", at + 1)) ++moves;
  CHECK(moves == 2);
  c.log_y = true;
  c.series = {{"loss", "#000", {{0, 0.0}, {1, -1.0}}}};
  CHECK(render(c).find("no data") != std::string::npos);
}

TEST_CASE("heatmap cells: grey where not sampled, white at or below the low end, a tooltip each", "[svg_chart]") {
  Heatmap m;
  m.rows = {"a fprop x"};
  m.columns = {10, 20, 30};
  m.values = {{NAN, 0.0, 1.0}};
  const std::string svg = render(m);
  CHECK(svg.find("fill='#e6e6e6'><title>a fprop x step 10: not sampled</title>") != std::string::npos);
  CHECK(svg.find("fill='#ffffff'><title>a fprop x step 20: 0</title>") != std::string::npos);
  CHECK(svg.find("<title>a fprop x step 30: 1</title>") != std::string::npos);
}
