#include "xml_check.hpp"

#include <cctype>

namespace posenc::test {
namespace {
// True when s[at] == '&' does not start an entity reference: &name; or &#digits; or &#xhex;.
bool bad_amp(const std::string& s, size_t at) {
  const size_t semi = s.find(';', at);
  if (semi == std::string::npos || semi - at < 2 || semi - at > 10) return true;
  const std::string body = s.substr(at + 1, semi - at - 1);
  if (body == "amp" || body == "lt" || body == "gt" || body == "quot" || body == "apos")
    return false;
  if (body[0] != '#' || body.size() < 2) return true;
  const bool hex = body[1] == 'x';
  if (hex && body.size() < 3) return true;
  for (size_t k = hex ? 2 : 1; k < body.size(); ++k)
    if (!(hex ? std::isxdigit(static_cast<unsigned char>(body[k]))
              : std::isdigit(static_cast<unsigned char>(body[k]))))
      return true;
  return false;
}

}  // namespace

// Every quoted value that follows `key` (e.g. `fill="`) in s, in order.
std::vector<std::string> values_after(const std::string& s, const std::string& key) {
  std::vector<std::string> out;
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + 1)) {
    const size_t b = p + key.size(), e = s.find('"', b);
    if (e == std::string::npos) break;
    out.push_back(s.substr(b, e - b));
  }
  return out;
}

// A small XML well-formedness checker (enough for SVG written by a program): one root element,
// every tag closed in order, attribute values quoted, no raw '<' or '&' in text or attributes
// except in known entity references. Returns "" when well formed, else what went wrong.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  int roots = 0;
  while (i < s.size()) {
    if (s[i] == '<') {
      if (s.compare(i, 5, "<?xml") == 0) {
        if (i != 0) return "XML declaration not at the start";
        size_t e = s.find("?>", i);
        if (e == std::string::npos) return "unterminated XML declaration";
        i = e + 2;
        continue;
      }
      if (s.compare(i, 4, "<!--") == 0) {
        size_t e = s.find("-->", i);
        if (e == std::string::npos) return "unterminated comment";
        i = e + 3;
        continue;
      }
      const bool closing = i + 1 < s.size() && s[i + 1] == '/';
      size_t j = i + (closing ? 2 : 1);
      size_t n0 = j;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '-' ||
                              s[j] == ':' || s[j] == '_'))
        ++j;
      std::string name = s.substr(n0, j - n0);
      if (name.empty()) return "empty tag name at " + std::to_string(i);
      if (closing) {
        if (stack.empty() || stack.back() != name) return "mismatched </" + name + ">";
        stack.pop_back();
        if (s[j] != '>') return "junk in closing tag " + name;
        i = j + 1;
        continue;
      }
      // Attributes: name="value" pairs, then > or />.
      for (;;) {
        while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
        if (j >= s.size()) return "unterminated tag " + name;
        if (s[j] == '>' || (s[j] == '/' && j + 1 < s.size() && s[j + 1] == '>')) break;
        size_t a0 = j;
        while (j < s.size() && s[j] != '=' && !std::isspace(static_cast<unsigned char>(s[j])) &&
               s[j] != '>')
          ++j;
        if (j == a0 || j >= s.size() || s[j] != '=') return "bad attribute in <" + name + ">";
        ++j;
        if (j >= s.size() || (s[j] != '"' && s[j] != '\'')) return "unquoted attribute in " + name;
        const char q = s[j++];
        size_t e = s.find(q, j);
        if (e == std::string::npos) return "unterminated attribute in " + name;
        for (size_t k = j; k < e; ++k) {
          if (s[k] == '<') return "raw < in attribute of " + name;
          if (s[k] == '&' && bad_amp(s, k)) return "bad & in attribute of " + name;
        }
        j = e + 1;
      }
      if (stack.empty()) ++roots;
      if (s[j] == '/') {
        i = j + 2;
      } else {
        stack.push_back(name);
        i = j + 1;
      }
      continue;
    }
    if (s[i] == '&' && bad_amp(s, i)) return "bad & in text at " + std::to_string(i);
    if (!stack.empty() || std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    return "text outside the root element at " + std::to_string(i);
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "expected one root element, got " + std::to_string(roots);
  return "";
}

}  // namespace posenc::test
