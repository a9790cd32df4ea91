// runtime/event_log (gcc-train --log-dir): CRC32C against known values and a
// bitwise implementation; files read back with an independent reader
// (tests/tfevents.h); and TensorBoard's own view through committed
// fixtures (tests/fixtures/make_tensorboard_fixtures.py): an event file
// written by TensorBoard's record writer decodes here with its CRCs
// accepted, and the file this library writes for kFixtureScalars is
// byte-identical to the committed one that TensorBoard's EventAccumulator
// read into gcc_train.scalars.txt.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/event_log.h"
#include "tests/testutil.h"
#include "tests/tfevents.h"

using namespace gcc_test;

namespace {

struct Scalar {
  const char *tag;
  int64_t step;
  double wall_time;
  float value;
};

// The same list as SCALARS in tests/fixtures/make_tensorboard_fixtures.py.
const double kFixtureStart = 1700000000.0;
const Scalar kFixtureScalars[] = {
    {"train/loss", 100, 1700000001.25, 2.302585f},
    {"train/lr", 100, 1700000001.25, 0.1f},
    {"train/loss", 200, 1700000002.5, 0.0f},
    {"test/loss", 938, 1700000010.5, 0.0651f},
    {"test/accuracy", 938, 1700000010.5, 0.9802f},
    {"train/samples_per_sec", 938, 1700000010.5, 65432.1f},
    {"train-set/loss", 1000, 1700000011.0, -1.5f},
    {"train/loss", 1001, 1700000012.0, 3.0e38f},
};

TEST(EventLog, Crc32cMatchesKnownValuesAndABitwiseImplementation) {
  EXPECT_EQ(gcc_crc32c("123456789", 9), 0xe3069283u); // the CRC-32C check value
  unsigned char zeros[32] = {};
  EXPECT_EQ(gcc_crc32c(zeros, 32), 0x8a9136aau); // RFC 3720 B.4
  unsigned char ones[32];
  memset(ones, 0xff, sizeof ones);
  EXPECT_EQ(gcc_crc32c(ones, 32), 0x62a8ab43u); // RFC 3720 B.4
  EXPECT_EQ(gcc_crc32c("", 0), 0u);
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(4099);
  for (unsigned char &b : buf)
    b = static_cast<unsigned char>(rng());
  for (size_t n : {1, 3, 8, 15, 16, 63, 64, 1000, 4099}) {
    EXPECT_EQ(gcc_crc32c(buf.data(), n), Crc32cBitwise(buf.data(), n)) << n;
    EXPECT_EQ(gcc_crc32c_masked(buf.data(), n), MaskedCrc(buf.data(), n)) << n;
  }
}

std::string WriteLog(const std::string &dir, const Scalar *s, size_t n, std::string *path) {
  gcc_diag d = {};
  gcc_event_log *log = nullptr;
  if (gcc_event_log_open(dir.c_str(), kFixtureStart, &log, &d) != GCC_OK)
    return d.msg;
  *path = gcc_event_log_path(log);
  for (size_t i = 0; i < n; i++)
    if (gcc_event_log_scalar(log, s[i].tag, s[i].step, s[i].wall_time, s[i].value, &d) != GCC_OK) {
      gcc_event_log_close(log);
      return d.msg;
    }
  gcc_event_log_close(log);
  return "";
}

// The CSV of the event file at `path`: metrics.<time>.<host>.<pid>.csv.
std::string CsvOf(const std::string &path) {
  size_t at = path.rfind("/events.out.tfevents.");
  return path.substr(0, at) + "/metrics." + path.substr(at + 21) + ".csv";
}

TEST(EventLog, WritesRecordsAndCsvThatReadBack) {
  TempDir tmp;
  std::string dir = tmp.file("logs"), path;
  ASSERT_EQ(WriteLog(dir, kFixtureScalars, 8, &path), "");
  // events.out.tfevents.<10-digit time>.<host>.<pid>
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(path, dir + "/events.out.tfevents.1700000000." + host + "." + std::to_string(getpid()));
  std::vector<TfEvent> ev;
  ASSERT_EQ(ReadTfEvents(path, &ev), "");
  ASSERT_EQ(ev.size(), 9u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[0].wall_time, kFixtureStart);
  for (size_t i = 0; i < 8; i++) {
    const TfEvent &e = ev[i + 1];
    EXPECT_EQ(e.tag, kFixtureScalars[i].tag) << i;
    EXPECT_EQ(e.step, kFixtureScalars[i].step) << i;
    EXPECT_EQ(e.wall_time, kFixtureScalars[i].wall_time) << i;
    EXPECT_EQ(e.value, kFixtureScalars[i].value) << i; // float32 exactly
  }
  std::string csv = ReadText(CsvOf(path));
  std::istringstream lines(csv);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(line, "wall_time,step,tag,value");
  for (size_t i = 0; i < 8; i++) {
    ASSERT_TRUE(std::getline(lines, line)) << csv;
    double wall = 0, value = 0;
    long long step = 0;
    char tag[64] = {};
    ASSERT_EQ(sscanf(line.c_str(), "%lf,%lld,%63[^,],%lf", &wall, &step, tag, &value), 4) << line;
    EXPECT_EQ(std::string(tag), kFixtureScalars[i].tag);
    EXPECT_EQ(step, kFixtureScalars[i].step);
    EXPECT_NEAR(wall, kFixtureScalars[i].wall_time, 1e-6);
    EXPECT_EQ(static_cast<float>(value), kFixtureScalars[i].value) << line;
  }
  EXPECT_FALSE(std::getline(lines, line)) << csv;
  // a second run in the folder: its own file set, never rows appended to
  // another run's CSV (issue 32: repeated step numbers); at the same second
  // and pid its files are new content, as the event file is
  std::string path2;
  ASSERT_EQ(WriteLog(dir, kFixtureScalars, 1, &path2), "");
  std::string csv2 = ReadText(CsvOf(path2));
  EXPECT_EQ(csv2.rfind("wall_time,step,tag,value\n", 0), 0u) << csv2;
  EXPECT_EQ(std::count(csv2.begin(), csv2.end(), '\n'), 2) << csv2;
  ASSERT_EQ(ReadTfEvents(path2, &ev), "");
  EXPECT_EQ(ev.size(), 2u);
  gcc_event_log *later = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_event_log_open(dir.c_str(), kFixtureStart + 1, &later, &d), GCC_OK) << d.msg;
  EXPECT_NE(std::string(gcc_event_log_csv_path(later)), CsvOf(path2));
  gcc_event_log_close(later);
  EXPECT_EQ(ReadText(CsvOf(path2)), csv2) << "a later run touched an earlier run's CSV";
  EXPECT_EQ(ListDir(dir).size(), 4u); // two event files, two CSVs
}

TEST(EventLog, ErrorsNameThePath) {
  TempDir tmp;
  std::string file = tmp.file("plain");
  ASSERT_TRUE(WriteText(file, "x"));
  gcc_diag d = {};
  gcc_event_log *log = nullptr;
  std::string dir = file + "/logs";
  EXPECT_EQ(gcc_event_log_open(dir.c_str(), 0, &log, &d), GCC_ERR_IO);
  EXPECT_EQ(log, nullptr);
  EXPECT_NE(std::string(d.msg).find(dir), std::string::npos) << d.msg;
}

// "tag step wall_time value" lines, as make_tensorboard_fixtures.py writes
// what TensorBoard read.
std::vector<std::string> ScalarLines(const std::vector<TfEvent> &ev) {
  std::vector<std::string> out;
  for (const TfEvent &e : ev) {
    if (e.tag.empty())
      continue;
    char buf[256];
    snprintf(buf, sizeof buf, "%s %lld %.6f %.9g", e.tag.c_str(), static_cast<long long>(e.step),
             e.wall_time, static_cast<double>(e.value));
    out.push_back(buf);
  }
  return out;
}

std::vector<std::string> Lines(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

TEST(EventLog, TensorBoardWrittenFixtureDecodesWithItsCrcs) {
  std::string path = Runfile("tests/fixtures/tensorboard/tb_writer.tfevents");
  ASSERT_FALSE(path.empty());
  std::vector<TfEvent> ev;
  ASSERT_EQ(ReadTfEvents(path, &ev), "");
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  std::vector<std::string> want =
      Lines(ReadText(Runfile("tests/fixtures/tensorboard/tb_writer.scalars.txt")));
  ASSERT_EQ(want.size(), 8u);
  EXPECT_EQ(ScalarLines(ev), want);
  // the CRCs are checked: one flipped bit in a record's data is refused
  std::string bytes = ReadText(path);
  bytes[bytes.size() - 6] ^= 1;
  TempDir tmp;
  ASSERT_TRUE(WriteText(tmp.file("bad.tfevents"), bytes));
  std::string err = ReadTfEvents(tmp.file("bad.tfevents"), &ev);
  EXPECT_NE(err.find("bad data CRC"), std::string::npos) << err;
}

TEST(EventLog, WritesTheCommittedFixtureThatTensorBoardRead) {
  TempDir tmp;
  std::string path;
  ASSERT_EQ(WriteLog(tmp.file("logs"), kFixtureScalars, 8, &path), "");
  std::string ours = ReadText(path);
  const char *regenerate = getenv("GCC_TB_FIXTURE_OUT");
  if (regenerate) { // tests/fixtures/make_tensorboard_fixtures.py explains
    ASSERT_TRUE(WriteText(regenerate, ours));
    GTEST_SKIP() << "wrote " << regenerate;
  }
  std::string committed = ReadText(Runfile("tests/fixtures/tensorboard/gcc_train.tfevents"));
  ASSERT_FALSE(committed.empty());
  EXPECT_TRUE(ours == committed) << "the writer's bytes changed: regenerate the fixture and "
                                    "its TensorBoard reading (make_tensorboard_fixtures.py)";
  // and the same bytes as TensorBoard's own record writer made of the same
  // events (proto3 leaves zero fields out; so does the writer)
  EXPECT_TRUE(ours == ReadText(Runfile("tests/fixtures/tensorboard/tb_writer.tfevents")));
  // what TensorBoard's EventAccumulator read from the committed file
  std::vector<TfEvent> ev;
  ASSERT_EQ(ReadTfEvents(path, &ev), "");
  std::vector<std::string> want =
      Lines(ReadText(Runfile("tests/fixtures/tensorboard/gcc_train.scalars.txt")));
  ASSERT_EQ(want.size(), 8u);
  EXPECT_EQ(ScalarLines(ev), want);
}

} // namespace
