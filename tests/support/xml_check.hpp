// XML checks for the SVG tests: a small well-formedness checker (enough for SVG written by a
// program) and attribute extraction. Shared by test_svg and test_cli_figure.
#pragma once

#include <string>
#include <vector>

namespace posenc::test {

// Every quoted value that follows `key` (e.g. `fill="`) in s, in order.
std::vector<std::string> values_after(const std::string& s, const std::string& key);

// One root element, every tag closed in order, attribute values quoted, no raw '<' or '&' in
// text or attributes except in known entity references. "" when well formed, else the problem.
std::string xml_problem(const std::string& s);

}  // namespace posenc::test
