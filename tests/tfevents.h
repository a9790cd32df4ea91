// A reader of TensorFlow record files holding tensorboard.Event records
// (runtime/event_log.h), for the tests: it checks both masked CRC32Cs of
// every record with its own bitwise CRC32C (not the library's ISA-L one)
// and decodes the events with the protobuf-c code of
// runtime/tensorboard.proto.
#ifndef GCC_TESTS_TFEVENTS_H
#define GCC_TESTS_TFEVENTS_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/tensorboard.pb-c.h"

namespace gcc_test {

// CRC32C bit by bit: the reflected Castagnoli polynomial 0x82F63B78.
inline uint32_t Crc32cBitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

inline uint32_t MaskedCrc(const unsigned char *p, size_t n) {
  uint32_t c = Crc32cBitwise(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct TfEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version; // set on a file-version event
  std::string tag;          // set on a scalar event
  float value = 0;
};

// Reads every record of `path` into *events; returns "" or what is wrong
// (a bad CRC names the record).
inline std::string ReadTfEvents(const std::string &path, std::vector<TfEvent> *events) {
  events->clear();
  FILE *f = fopen(path.c_str(), "rb");
  if (!f)
    return path + ": cannot open";
  std::string bytes;
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0)
    bytes.append(buf, got);
  fclose(f);
  const unsigned char *p = reinterpret_cast<const unsigned char *>(bytes.data());
  size_t at = 0, n = bytes.size();
  auto le32 = [&](size_t o) {
    return static_cast<uint32_t>(p[o]) | static_cast<uint32_t>(p[o + 1]) << 8 |
           static_cast<uint32_t>(p[o + 2]) << 16 | static_cast<uint32_t>(p[o + 3]) << 24;
  };
  for (int rec = 0; at < n; rec++) {
    std::string where = path + ": record " + std::to_string(rec);
    if (n - at < 12)
      return where + ": truncated header";
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
      len |= static_cast<uint64_t>(p[at + i]) << (8 * i);
    if (le32(at + 8) != MaskedCrc(p + at, 8))
      return where + ": bad length CRC";
    if (len > n - at - 16)
      return where + ": truncated data";
    const unsigned char *data = p + at + 12;
    if (le32(at + 12 + len) != MaskedCrc(data, len))
      return where + ": bad data CRC";
    Tensorboard__Event *ev = tensorboard__event__unpack(nullptr, len, data);
    if (!ev)
      return where + ": not a tensorboard.Event";
    TfEvent e;
    e.wall_time = ev->wall_time;
    e.step = ev->step;
    if (ev->what_case == TENSORBOARD__EVENT__WHAT_FILE_VERSION)
      e.file_version = ev->file_version;
    if (ev->what_case == TENSORBOARD__EVENT__WHAT_SUMMARY) {
      for (size_t i = 0; i < ev->summary->n_value; i++) {
        const Tensorboard__Summary__Value *v = ev->summary->value[i];
        if (v->value_case != TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE)
          continue;
        TfEvent s = e;
        s.tag = v->tag;
        s.value = v->simple_value;
        events->push_back(s);
      }
    } else {
      events->push_back(e);
    }
    tensorboard__event__free_unpacked(ev, nullptr);
    at += 12 + len + 4;
  }
  return "";
}

} // namespace gcc_test

#endif // GCC_TESTS_TFEVENTS_H
