// SPDX-License-Identifier: Apache-2.0
#include "compress/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "compress/json.h"

namespace sieve::compress {
namespace {

Status malformed(const std::string& what) { return error(Code::kMalformed, what); }

std::string quoted(const std::string& name) { return "tensor \"" + name + "\""; }

Status read_tensor(const std::string& name, const json::Value& v, uint64_t data_size, TensorInfo* t) {
  if (v.type != json::Value::Type::kObject)
    return malformed(quoted(name) + ": expected an object, found " + json::type_name(v.type));
  for (const auto& m : v.members)
    if (m.first != "dtype" && m.first != "shape" && m.first != "data_offsets")
      return malformed(quoted(name) + ": unknown key \"" + m.first + "\"");
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  if (!dtype || !shape || !offsets) return malformed(quoted(name) + ": needs dtype, shape and data_offsets");
  if (dtype->type != json::Value::Type::kString) return malformed(quoted(name) + ": dtype is not a string");
  t->name = name;
  t->dtype = dtype->text;
  const size_t element_size = safetensors_dtype_size(t->dtype);
  if (!element_size) return malformed(quoted(name) + ": unsupported dtype \"" + t->dtype + "\"");
  if (shape->type != json::Value::Type::kArray) return malformed(quoted(name) + ": shape is not an array");
  if (shape->items.size() > kMaxTensorRank)
    return malformed(quoted(name) + ": shape has " + std::to_string(shape->items.size()) + " dimensions, more than " +
                     std::to_string(kMaxTensorRank));
  t->elements = 1;
  for (const auto& d : shape->items) {
    uint64_t dim = 0;
    if (!d.as_uint64(&dim)) return malformed(quoted(name) + ": shape entries must be non-negative integers");
    t->shape.push_back(dim);
    if (__builtin_mul_overflow(t->elements, dim, &t->elements))
      return malformed(quoted(name) + ": element count overflows 64 bits");
  }
  if (offsets->type != json::Value::Type::kArray || offsets->items.size() != 2 ||
      !offsets->items[0].as_uint64(&t->begin) || !offsets->items[1].as_uint64(&t->end))
    return malformed(quoted(name) + ": data_offsets must be two non-negative integers");
  if (t->begin > t->end) return malformed(quoted(name) + ": data_offsets begin after they end");
  if (t->end > data_size)
    return malformed(quoted(name) + ": data_offsets end at " + std::to_string(t->end) + ", past the " +
                     std::to_string(data_size) + "-byte data section");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(t->elements, uint64_t(element_size), &bytes) || bytes != t->end - t->begin)
    return malformed(quoted(name) + ": shape and dtype need " + std::to_string(bytes) +
                     " bytes but data_offsets span " + std::to_string(t->end - t->begin));
  return ok_status();
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  for (const auto& s : kSizes)
    if (dtype == s.first) return s.second;
  return 0;
}

Status parse_safetensors(const uint8_t* bytes, size_t size, SafetensorsView* out) {
  if (!bytes && size) return error(Code::kInvalidArgument, "no file contents");
  if (size < 8)
    return malformed("file of " + std::to_string(size) + " bytes is too short for the 8-byte header length");
  uint64_t header = 0;
  std::memcpy(&header, bytes, 8);  // little-endian, like the host (see codec.cc)
  // A file of another format (XML, text, a checkpoint) turns its first 8 bytes into a huge length or
  // a header that is not JSON: say what it is, not which number those bytes happen to make.
  if (header > size - 8)
    return malformed("not a safetensors file: its first 8 bytes, read as the header length, give " +
                     std::to_string(header) + ", past the end of the " + std::to_string(size) + "-byte file");
  if (header < 2 || bytes[8] != '{')
    return malformed("not a safetensors file: what follows the 8-byte header length is not a JSON object");
  if (header > kMaxSafetensorsHeader)
    return malformed("header length " + std::to_string(header) + " exceeds the " +
                     std::to_string(kMaxSafetensorsHeader >> 20) +
                     " MiB limit of a mask file's header (a mask per weight of the largest models needs a "
                     "few MB; safetensors' own limit is 100 MB)");

  // Member by member: a tree of the whole header would cost about 70 times its size.
  SafetensorsView view;
  view.data = bytes + 8 + header;
  view.data_size = size - 8 - header;
  Status s =
      json::parse_object_members(reinterpret_cast<const char*>(bytes + 8), header, kMaxHeaderEntryValues,
                                 [&view](const std::string& key, json::Value& value) {
                                   if (key == "__metadata__") {
                                     if (value.type != json::Value::Type::kObject)
                                       return malformed("__metadata__ is not an object");
                                     for (auto& kv : value.members) {
                                       if (kv.second.type != json::Value::Type::kString)
                                         return malformed("__metadata__ value \"" + kv.first + "\" is not a string");
                                       view.metadata.emplace_back(kv.first, std::move(kv.second.text));
                                     }
                                     return ok_status();
                                   }
                                   TensorInfo t;
                                   Status read = read_tensor(key, value, view.data_size, &t);
                                   if (read.ok()) view.tensors.push_back(std::move(t));
                                   return read;
                                 });
  if (s.code() == Code::kMalformed && s.message().rfind("bad JSON", 0) == 0) return malformed("header: " + s.message());
  if (!s.ok()) return s;
  std::stable_sort(view.tensors.begin(), view.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The format has no holes: tensors tile the data section exactly, in offset order.
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : view.tensors) {
    if (t.begin < expected)
      return malformed(quoted(t.name) + " overlaps " + quoted(previous->name) + " in the data section");
    if (t.begin > expected)
      return malformed("data section has a gap of " + std::to_string(t.begin - expected) + " bytes before " +
                       quoted(t.name));
    expected = t.end;
    previous = &t;
  }
  if (expected != view.data_size)
    return malformed("data section has " + std::to_string(view.data_size - expected) + " bytes no tensor describes");
  *out = std::move(view);
  return ok_status();
}

Status masks_from_safetensors(const uint8_t* bytes, size_t size, MaskFile* out) {
  SafetensorsView view;
  Status s = parse_safetensors(bytes, size, &view);
  if (!s.ok()) return s;
  MaskFile file;
  uint64_t total = 0;
  for (const TensorInfo& t : view.tensors) {
    if (t.dtype != "BOOL" && t.dtype != "U8") {
      file.skipped.push_back(t);
      continue;
    }
    MaskTensor m;
    m.name = t.name;
    m.dtype = t.dtype;
    m.shape = t.shape;
    m.first = total;
    m.elements = t.elements;
    total += t.elements;  // cannot overflow: each element is one byte of the file
    file.masks.push_back(std::move(m));
  }
  if (file.masks.empty()) return malformed("no BOOL or U8 tensor in the file: nothing to use as a mask");
  file.combined = Mask(total);
  size_t k = 0;
  for (const TensorInfo& t : view.tensors) {
    if (t.dtype != "BOOL" && t.dtype != "U8") continue;
    MaskTensor& m = file.masks[k++];
    const Mask part = Mask::from_bytes(view.data + t.begin, t.elements);
    m.kept = part.kept();
    file.combined.copy_bits(m.first, part, 0, part.count());
  }
  *out = std::move(file);
  return ok_status();
}

uint64_t default_mask_file_limit() {
  // Read whole, so bounded by what the host can spare: a quarter of its memory, at most 16 GiB
  // (a one-byte-per-element mask of a 16-billion-element model).
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const uint64_t cap = uint64_t{16} << 30;
  if (pages <= 0 || page <= 0) return cap;
  return std::min(cap, uint64_t(pages) * uint64_t(page) / 4);
}

Status load_mask_file(const std::string& path, MaskFile* out, uint64_t max_bytes) {
  if (max_bytes == 0) max_bytes = default_mask_file_limit();
  // Non-blocking, so a FIFO cannot stall the caller; the type is checked before anything is read.
  const int raw = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0) return error(Code::kIo, "cannot open " + path + ": " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> fd(new int(raw), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat info {};
  if (::fstat(raw, &info) != 0) return error(Code::kIo, "cannot stat " + path + ": " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) return error(Code::kInvalidArgument, path + " is a directory, not a mask file");
  if (!S_ISREG(info.st_mode)) return error(Code::kInvalidArgument, path + " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > max_bytes)
    return error(Code::kInvalidArgument, path + " is " + std::to_string(size) + " bytes, more than the " +
                                             std::to_string(max_bytes) + "-byte limit");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(raw, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return error(Code::kIo, "cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) return error(Code::kIo, "cannot read " + path + ": it shrank while read");
    done += static_cast<size_t>(n);
  }
  Status s = masks_from_safetensors(bytes.data(), bytes.size(), out);
  if (!s.ok()) return error(s.code(), path + ": " + s.message());
  return s;
}

}  // namespace sieve::compress
