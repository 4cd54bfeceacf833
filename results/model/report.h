// The report model: a tree of groups holding attributes, tables (named typed columns with units) and
// matrices. Every command fills one Report; the HDF5 writer, the console and the exports read it.
// Kept free of HDF5 types so that any layer can build one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace tb {

using AttributeValue = std::variant<int64_t, double, std::string>;

struct Column {
  std::string name;  // e.g. "time_us"
  std::string unit;  // e.g. "us", "GB/s", "" for counts and text
  std::variant<std::vector<int64_t>, std::vector<double>, std::vector<std::string>> values;

  size_t rows() const;
};

struct Table {
  std::string description;
  std::vector<Column> columns;

  // Appends a column; all columns must end up with the same number of rows (checked when written).
  Table& Add(std::string name, std::string unit, std::vector<int64_t> values);
  Table& Add(std::string name, std::string unit, std::vector<double> values);
  Table& Add(std::string name, std::string unit, std::vector<std::string> values);
  const Column* Find(const std::string& name) const;
  size_t rows() const;
};

struct Matrix {
  std::string description;
  std::string unit;
  size_t rows = 0;
  size_t cols = 0;
  std::vector<double> values;  // row-major, rows*cols; NaN where not measured (e.g. the diagonal)

  double at(size_t r, size_t c) const { return values[r * cols + c]; }
};

class Group {
 public:
  Group() = default;
  Group(const Group& other);
  Group& operator=(const Group& other);
  Group(Group&&) noexcept = default;
  Group& operator=(Group&&) noexcept = default;

  std::map<std::string, AttributeValue> attributes;
  std::map<std::string, Table> tables;
  std::map<std::string, Matrix> matrices;

  void Set(const std::string& name, AttributeValue value) { attributes[name] = std::move(value); }
  // Child group by path component, created when missing ("collectives", then "all_reduce").
  Group& Child(const std::string& name);
  const Group* FindChild(const std::string& name) const;
  // Removes the child `name` and hands it over (null when there is none).
  std::unique_ptr<Group> Release(const std::string& name);
  // Makes `group` the child `name`, replacing any.
  void Attach(const std::string& name, std::unique_ptr<Group> group);
  const std::map<std::string, std::unique_ptr<Group>>& children() const { return children_; }

 private:
  std::map<std::string, std::unique_ptr<Group>> children_;
};

// Schema identity written as root attributes of every report.
inline constexpr const char* kReportSchemaName = "trainbench.report";
inline constexpr int64_t kReportSchemaVersion = 1;

struct Report {
  Group root;
};

// One measured point's group under train/ and io/: "k<ranks>", or "k<ranks>_throttle<rate>" for a point of a
// storage sweep (the rate in MB/s per rank, as %g writes it). Built and parsed here only.
struct PointGroup {
  int64_t ranks = 0;
  double throttle_MBps = 0;  // 0: not a sweep's point
};
std::string PointGroupName(const PointGroup& point);
// The point a group's name stands for; nullopt for any other name.
std::optional<PointGroup> ParsePointGroupName(const std::string& name);

// Writes `report` to `path` atomically: built in memory, then a temporary name in the same directory, fsync,
// rename. A failed write leaves any previous file at `path` intact. Throws RuntimeError with one line naming the
// report and the file and OS error ("cannot write report 'r.h5': cannot write r.h5.tmp.42: No space left on
// device"), or HDF5's own message when building the file failed.
void WriteReport(const Report& report, const std::string& path);

// Rewrites only the root attributes status, status_reason and end_utc of the report at `path` (and the root text
// attributes in `more`, by name), keeping the rest as it is, the same atomic way (for a run that cannot write its
// whole report any more: a stuck operation, a full disk). Throws RuntimeError naming the file.
void RewriteReportStatus(const std::string& path, const std::string& status, const std::string& reason,
                         const std::string& end_utc, const std::map<std::string, std::string>& more = {});

// Reads a report written by WriteReport. Throws InputError naming the file and what is wrong (missing,
// not HDF5, not a trainbench report, unknown schema version).
Report ReadReport(const std::string& path);

// Checks, before any benchmark runs, that `path` can be written: its directory exists and accepts a new
// file. Throws InputError ("cannot write report 'x': <why>"; `what` names another output: "--trace").
void CheckWritable(const std::string& path, const std::string& what = "report");

}  // namespace tb
