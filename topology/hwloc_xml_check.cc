// SPDX-License-Identifier: Apache-2.0
// The shape an XML topology must have before hwloc 2.9 imports it. hwloc's built-in XML parser
// (the one Debian's libhwloc uses: it is built without libxml2) reads a tag's attributes as
// `name="value"` until the first text it cannot read, and silently ignores the rest of the tag; its
// import then checks that an object's sets come in pairs only for hwloc 1.x files. An object whose
// complete_cpuset is past such text has a cpuset and a null complete_cpuset, which hwloc
// dereferences when it orders siblings (hwloc_bitmap_compare_first). It also reads the document as
// a C string and assumes the <topology> tag ends. So every tag is read here exactly as hwloc reads
// it, and a file is refused unless every tag reads to its end, sets come in pairs and are bitmaps,
// and there is no NUL byte. lstopo's own files pass; libxml2 reads those the same way.
#include "topology/hwloc_xml_check.h"

#include <cstring>
#include <map>

namespace sieve::topology {

namespace {

// hwloc's syntax: "0xf...f," then 0x<1-8 hex digits>, comma-separated (an infinite set: "0xf...f").
bool is_bitmap(const std::string& v) {
  const bool infinite = v.rfind("0xf...f", 0) == 0;
  std::string rest = infinite ? v.substr(7) : v;
  if (infinite && rest.rfind(",", 0) == 0) rest = rest.substr(1);  // only the infinite prefix takes a comma
  if (rest.empty()) return infinite && v.size() == 7;
  size_t start = 0;
  for (;;) {
    const size_t comma = rest.find(',', start);
    const std::string part = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (part.size() < 3 || part.size() > 10 || part.compare(0, 2, "0x") != 0 ||
        part.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
      return false;
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

constexpr const char* kSpaces = " \t\n";  // what hwloc skips between attributes (not '\r')

// Reads `tag` (between '<' and '>', without a closing '/') as hwloc does: a name of [a-z0-9_], then
// attributes of [a-z_] names and double-quoted values with hwloc's escapes. Returns "" with
// `attributes` filled (unescaped), else the text hwloc would stop at.
std::string read_tag(const std::string& tag, std::string& element, std::map<std::string, std::string>& attributes) {
  size_t at = tag.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_");
  element = tag.substr(0, at);
  if (at == std::string::npos) return "";
  if (tag[at] != ' ') return tag.substr(at);
  static const std::pair<const char*, char> escapes[] = {{"#10;", '\n'}, {"#13;", '\r'}, {"#9;", '\t'}, {"quot;", '"'},
                                                         {"lt;", '<'},   {"gt;", '>'},   {"amp;", '&'}};
  for (at = tag.find_first_not_of(kSpaces, at); at != std::string::npos; at = tag.find_first_not_of(kSpaces, at)) {
    const size_t name_end = tag.find_first_not_of("abcdefghijklmnopqrstuvwxyz_", at);
    if (name_end == at || name_end == std::string::npos || tag.compare(name_end, 2, "=\"") != 0) return tag.substr(at);
    std::string value;
    size_t v = name_end + 2;
    for (; v < tag.size() && tag[v] != '"'; ++v) {
      if (tag[v] != '&') {
        value += tag[v];
        continue;
      }
      bool known = false;
      for (const auto& [text, byte] : escapes) {
        if (tag.compare(v + 1, std::strlen(text), text) != 0) continue;
        value += byte;
        v += std::strlen(text);
        known = true;
        break;
      }
      if (!known) return tag.substr(v);
    }
    if (v >= tag.size()) return tag.substr(at);  // an unterminated value
    attributes[tag.substr(at, name_end - at)] = value;
    at = v + 1;
    if (at < tag.size() && std::strchr(kSpaces, tag[at]) == nullptr) return tag.substr(at);
  }
  return "";
}

std::string check_object(const std::map<std::string, std::string>& attributes) {
  for (const char* set : {"cpuset", "nodeset"}) {
    const bool has = attributes.count(set) != 0;
    const bool complete = attributes.count(std::string("complete_") + set) != 0;
    if (has != complete)  // lstopo writes both or neither
      return has ? std::string(" has a ") + set + " but no complete_" + set
                 : std::string(" has a complete_") + set + " but no " + set;
  }
  return "";
}

}  // namespace

std::string check_hwloc_xml(const std::string& name, const std::string& xml) {
  const std::string file = "topology file '" + name + "'";
  const size_t nul = xml.find('\0');
  if (nul != std::string::npos) return file + " has a NUL byte at byte " + std::to_string(nul) + " (not a text file)";
  for (size_t open = xml.find('<'); open != std::string::npos; open = xml.find('<', open + 1)) {
    const std::string where = file + ": the tag at byte " + std::to_string(open);
    const size_t close = xml.find('>', open);
    if (close == std::string::npos) return where + " never ends (no '>')";
    const size_t next = xml.find('<', open + 1);
    if (next < close) return where + " holds another '<' before its '>' (not a file lstopo wrote)";
    std::string tag = xml.substr(open + 1, close - open - 1);
    if (tag.empty() || tag[0] == '/' || tag[0] == '?' || tag[0] == '!') continue;  // closing, <?xml, <!DOCTYPE
    if (tag.back() == '/') tag.pop_back();
    std::string element;
    std::map<std::string, std::string> attributes;
    const std::string stop = read_tag(tag, element, attributes);
    if (!stop.empty())
      return where + " has text hwloc's XML parser cannot read: \"" + stop.substr(0, 40) +
             "\" (not a file lstopo wrote)";
    for (const auto& [attribute, value] : attributes) {
      const size_t n = attribute.size();
      if (n >= 3 && attribute.compare(n - 3, 3, "set") == 0 && !is_bitmap(value))
        return where + " has a set that is not a bitmap: " + attribute + "=\"" + value.substr(0, 40) + "\"";
    }
    if (element != "object") continue;
    const std::string why = check_object(attributes);
    if (!why.empty()) return where + why + " (not a file lstopo wrote)";
  }
  return "";
}

}  // namespace sieve::topology
