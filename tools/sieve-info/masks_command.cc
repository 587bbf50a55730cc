// SPDX-License-Identifier: Apache-2.0
#include "tools/sieve-info/masks_command.h"

#include <cinttypes>
#include <iomanip>
#include <sstream>

#include "compress/safetensors.h"
#include "tools/common/json_writer.h"

namespace {

using sieve::compress::MaskFile;

void usage(std::ostream& out) {
  out << "usage: sieve-info masks FILE [--json]\n"
         "  Reads a safetensors mask file: its BOOL and U8 tensors, in data-offset order, are the\n"
         "  mask (nonzero = kept). Reports each tensor's elements, kept elements and density, and\n"
         "  the hash ranks compare; warns, on stderr, of a tensor that keeps nothing. Exit status 1 when\n"
         "  the file is malformed, 2 on a bad command line.\n"
         "\n"
         "  --json         machine-readable output\n"
         "  -h, --help     this text\n";
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

double density(uint64_t kept, uint64_t elements) { return elements ? double(kept) / double(elements) : 0.0; }

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

void write_text(const std::string& path, const MaskFile& f, std::ostream& out) {
  out << "mask file: " << path << "\n";
  out << "mask tensors: " << f.masks.size() << " (" << f.skipped.size() << " other tensor"
      << (f.skipped.size() == 1 ? "" : "s") << " skipped)\n";
  size_t width = 6;
  for (const auto& m : f.masks) width = std::max(width, m.name.size());
  out << std::left << "  " << std::setw(int(width)) << "tensor"
      << "  " << std::setw(5) << "dtype"
      << "  " << std::setw(16) << "shape" << std::right << std::setw(14) << "elements" << std::setw(14) << "kept"
      << std::setw(9) << "density"
      << "\n";
  out << std::fixed << std::setprecision(4);
  for (const auto& m : f.masks)
    out << std::left << "  " << std::setw(int(width)) << m.name << "  " << std::setw(5) << m.dtype << "  "
        << std::setw(16) << shape_text(m.shape) << std::right << std::setw(14) << m.elements << std::setw(14) << m.kept
        << std::setw(9) << density(m.kept, m.elements) << "\n";
  for (const auto& t : f.skipped) out << "  skipped " << t.name << " (" << t.dtype << ", not a mask dtype)\n";
  out << "total: " << f.combined.count() << " elements, " << f.combined.kept() << " kept, density "
      << f.combined.density() << ", hash " << hex(f.combined.hash()) << "\n";
}

void write_json(const std::string& path, const MaskFile& f, std::ostream& out) {
  sieve::tools::JsonWriter w(out);
  w.begin_object();
  w.member("file", path);
  w.key("tensors");
  w.begin_array();
  for (const auto& m : f.masks) {
    w.begin_object();
    w.member("name", m.name);
    w.member("dtype", m.dtype);
    w.key("shape");
    w.begin_array();
    for (uint64_t d : m.shape) w.value(d);
    w.end_array();
    w.member("first", m.first);
    w.member("elements", m.elements);
    w.member("kept", m.kept);
    w.member("density", density(m.kept, m.elements));
    w.end_object();
  }
  w.end_array();
  w.key("skipped");
  w.begin_array();
  for (const auto& t : f.skipped) {
    w.begin_object();
    w.member("name", t.name);
    w.member("dtype", t.dtype);
    w.end_object();
  }
  w.end_array();
  w.member("elements", f.combined.count());
  w.member("kept", f.combined.kept());
  w.member("density", f.combined.density());
  w.member("hash", hex(f.combined.hash()));
  w.end_object();
  out << "\n";
}

}  // namespace

int sieve_info_masks(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  bool json = false;
  std::string path;
  for (const std::string& a : args) {
    if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      usage(out);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      err << "sieve-info masks: unknown option " << a << "\n";
      usage(err);
      return 2;
    } else if (path.empty()) {
      path = a;
    } else {
      err << "sieve-info masks: one file at a time (got " << path << " and " << a << ")\n";
      return 2;
    }
  }
  if (path.empty()) {
    usage(err);
    return 2;
  }
  MaskFile file;
  const sieve::compress::Status s = sieve::compress::load_mask_file(path, &file);
  if (!s.ok()) {
    err << "sieve-info masks: " << s.message() << "\n";
    return 1;
  }
  if (json) write_json(path, file, out);
  else write_text(path, file, out);
  // Valid, but far more often an inverted or empty mask than a layer pruned away: every element such
  // a tensor covers would be sent as zero. A warning, not a failure.
  for (const auto& m : file.masks)
    if (m.elements > 0 && m.kept == 0)
      err << "sieve-info masks: warning: " << m.name << " keeps none of its " << m.elements
          << " elements: published, every one of them is sent as zero (an inverted or empty mask?)\n";
  return 0;
}

int sieve_info_masks(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  std::ostringstream o, e;
  const int rc = sieve_info_masks(args, o, e);
  std::fputs(o.str().c_str(), out);
  std::fputs(e.str().c_str(), err);
  return rc;
}
