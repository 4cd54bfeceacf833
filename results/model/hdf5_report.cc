// The HDF5 form of a Report (layout in results/README.md): groups and attributes map one to one, a Table is
// one compound dataset with a record per row, a Matrix is a 2-D double dataset. Files stay readable by
// h5py/pandas without this code.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "durable_file.h"
#include "error.h"
#include "paths.h"
#include "report.h"
#include "report_check.h"
#include "schema.h"

namespace tb {
namespace {

// ---- errors -----------------------------------------------------------------------------------------------

herr_t KeepInnermostDescription(unsigned depth, const H5E_error2_t* error, void* client) {
  if (depth == 0 && error->desc != nullptr) *static_cast<std::string*>(client) = error->desc;
  return 0;
}

// The description of the innermost entry of HDF5's error stack: the most specific cause.
std::string Hdf5Message() {
  std::string message;
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, KeepInnermostDescription, &message) < 0 || message.empty()) {
    return "unknown HDF5 error";
  }
  return message;
}

// HDF5 ids and status codes are negative on failure.
template <typename Result>
Result Check(Result result, const std::string& what) {
  if (result < 0) throw RuntimeError(what + ": " + Hdf5Message());
  return result;
}

// Turns off HDF5's own printing of its error stack for the life of the object: failures reach the caller
// as exceptions carrying the same message instead.
class QuietHdf5Errors {
 public:
  QuietHdf5Errors() {
    if (H5Eget_auto2(H5E_DEFAULT, &previous_function_, &previous_data_) < 0) previous_function_ = nullptr;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5Errors() { H5Eset_auto2(H5E_DEFAULT, previous_function_, previous_data_); }
  QuietHdf5Errors(const QuietHdf5Errors&) = delete;
  QuietHdf5Errors& operator=(const QuietHdf5Errors&) = delete;

 private:
  H5E_auto2_t previous_function_ = nullptr;
  void* previous_data_ = nullptr;
};

// ---- handles ----------------------------------------------------------------------------------------------

// One owned HDF5 id, released by `kClose`. Move-only; the destructor never throws.
template <herr_t (*kClose)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      Release();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Release(); }

  hid_t get() const { return id_; }

  // Closes now and reports failure, for closes that must succeed (a file's, which flushes it).
  void Close(const std::string& what) { Check(kClose(std::exchange(id_, H5I_INVALID_HID)), what); }

 private:
  void Release() noexcept {
    if (id_ >= 0) kClose(id_);
    id_ = H5I_INVALID_HID;
  }

  hid_t id_ = H5I_INVALID_HID;
};

using FileId = Handle<H5Fclose>;
using GroupId = Handle<H5Gclose>;
using DatasetId = Handle<H5Dclose>;
using DatatypeId = Handle<H5Tclose>;
using DataspaceId = Handle<H5Sclose>;
using AttributeId = Handle<H5Aclose>;
using PropertyListId = Handle<H5Pclose>;
using ObjectId = Handle<H5Oclose>;  // a group or dataset opened by name, before its kind is known

// ---- small helpers ----------------------------------------------------------------------------------------

// A table's units (one per column, in column order) and a group's (one "name=unit" per attribute whose declaration
// has a unit). A group's are written from the schema's declarations, not held in the Report: the reader skips them.
constexpr const char* kUnitsAttribute = "units";

// Numeric fields (int64 and double) take the same room in a record.
constexpr size_t kNumberSize = sizeof(int64_t);
static_assert(sizeof(double) == kNumberSize);

std::string ChildPath(const std::string& parent, const std::string& name) {
  return parent == "/" ? "/" + name : parent + "/" + name;
}

// File access without HDF5's file locks: a report is written once under a private temporary name and only
// read after the rename, and locks fail on some cluster file systems (NFS, Lustre).
PropertyListId FileAccess() {
  PropertyListId access(Check(H5Pcreate(H5P_FILE_ACCESS), "cannot create a file access property list"));
#if H5_VERSION_GE(1, 10, 7)
  Check(H5Pset_file_locking(access.get(), false, true), "cannot disable HDF5 file locking");
#endif
  return access;
}

DataspaceId ScalarSpace() { return DataspaceId(Check(H5Screate(H5S_SCALAR), "cannot create a scalar dataspace")); }

DataspaceId SimpleSpace(std::vector<hsize_t> dims) {
  return DataspaceId(
      Check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "cannot create a dataspace"));
}

// Variable-length UTF-8 string: h5py reads it as str.
DatatypeId VariableString() {
  DatatypeId type(Check(H5Tcopy(H5T_C_S1), "cannot copy the string type"));
  Check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot make a variable-length string type");
  Check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot set the string character set");
  return type;
}

// Fixed-length, null-terminated UTF-8 string of `size` bytes including the terminator (numpy 'S' dtype).
DatatypeId FixedString(size_t size) {
  DatatypeId type(Check(H5Tcopy(H5T_C_S1), "cannot copy the string type"));
  Check(H5Tset_size(type.get(), size), "cannot size a fixed-length string type");
  Check(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "cannot set string padding");
  Check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot set the string character set");
  return type;
}

// Room for the longest string and its terminator; at least one byte, as HDF5 requires.
size_t FixedStringSize(const std::vector<std::string>& strings) {
  size_t longest = 0;
  for (const std::string& text : strings) longest = std::max(longest, text.size());
  return longest + 1;
}

// Strings packed at `size` bytes each, zero-filled so that every one is terminated.
std::vector<char> PackStrings(const std::vector<std::string>& strings, size_t size) {
  std::vector<char> packed(strings.size() * size, '\0');
  for (size_t i = 0; i < strings.size(); ++i) std::memcpy(&packed[i * size], strings[i].data(), strings[i].size());
  return packed;
}

// ---- writing ----------------------------------------------------------------------------------------------

AttributeId CreateAttribute(hid_t object, const std::string& object_path, const std::string& name, hid_t type,
                            hid_t space) {
  return AttributeId(Check(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                           "cannot create attribute '" + name + "' on '" + object_path + "'"));
}

void WriteAttribute(hid_t object, const std::string& object_path, const std::string& name,
                    const AttributeValue& value) {
  const std::string what = "cannot write attribute '" + name + "' on '" + object_path + "'";
  DataspaceId space = ScalarSpace();
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    AttributeId attribute = CreateAttribute(object, object_path, name, H5T_NATIVE_INT64, space.get());
    Check(H5Awrite(attribute.get(), H5T_NATIVE_INT64, integer), what);
  } else if (const auto* real = std::get_if<double>(&value)) {
    AttributeId attribute = CreateAttribute(object, object_path, name, H5T_NATIVE_DOUBLE, space.get());
    Check(H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, real), what);
  } else {
    DatatypeId type = VariableString();
    AttributeId attribute = CreateAttribute(object, object_path, name, type.get(), space.get());
    const char* text = std::get<std::string>(value).c_str();
    Check(H5Awrite(attribute.get(), type.get(), &text), what);
  }
}

void WriteStringArrayAttribute(hid_t object, const std::string& object_path, const std::string& name,
                               const std::vector<std::string>& strings) {
  const size_t size = FixedStringSize(strings);
  DatatypeId type = FixedString(size);
  DataspaceId space = SimpleSpace({strings.size()});
  AttributeId attribute = CreateAttribute(object, object_path, name, type.get(), space.get());
  std::vector<char> packed = PackStrings(strings, size);
  Check(H5Awrite(attribute.get(), type.get(), packed.data()),
        "cannot write attribute '" + name + "' on '" + object_path + "'");
}

DatasetId CreateDataset(hid_t group, const std::string& path, const std::string& name, hid_t type, hid_t space) {
  return DatasetId(Check(H5Dcreate2(group, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         "cannot create dataset '" + path + "'"));
}

// Each row becomes one packed record (the same layout in memory and in the file), one field per column.
void WriteTable(hid_t group, const std::string& path, const std::string& name, const Table& table) {
  if (table.columns.empty()) throw RuntimeError("table '" + path + "' has no columns");
  const size_t rows = table.rows();
  std::vector<size_t> offsets;
  std::vector<size_t> sizes;
  size_t record_size = 0;
  for (const Column& column : table.columns) {
    if (column.rows() != rows) {
      throw RuntimeError("table '" + path + "': column '" + column.name + "' has " + std::to_string(column.rows()) +
                         " rows but column '" + table.columns.front().name + "' has " + std::to_string(rows));
    }
    const auto* strings = std::get_if<std::vector<std::string>>(&column.values);
    offsets.push_back(record_size);
    sizes.push_back(strings ? FixedStringSize(*strings) : kNumberSize);
    record_size += sizes.back();
  }

  DatatypeId record(Check(H5Tcreate(H5T_COMPOUND, record_size), "cannot create the record type of '" + path + "'"));
  std::vector<char> buffer(rows * record_size, '\0');
  for (size_t c = 0; c < table.columns.size(); ++c) {
    const Column& column = table.columns[c];
    auto field = [&](size_t r) { return &buffer[r * record_size + offsets[c]]; };
    hid_t field_type = H5T_NATIVE_DOUBLE;
    DatatypeId string_type;
    if (const auto* strings = std::get_if<std::vector<std::string>>(&column.values)) {
      string_type = FixedString(sizes[c]);
      field_type = string_type.get();
      for (size_t r = 0; r < rows; ++r) std::memcpy(field(r), (*strings)[r].data(), (*strings)[r].size());
    } else if (const auto* integers = std::get_if<std::vector<int64_t>>(&column.values)) {
      field_type = H5T_NATIVE_INT64;
      for (size_t r = 0; r < rows; ++r) std::memcpy(field(r), &(*integers)[r], kNumberSize);
    } else {
      const auto& reals = std::get<std::vector<double>>(column.values);
      for (size_t r = 0; r < rows; ++r) std::memcpy(field(r), &reals[r], kNumberSize);
    }
    Check(H5Tinsert(record.get(), column.name.c_str(), offsets[c], field_type),
          "cannot add column '" + column.name + "' to table '" + path + "'");
  }

  DataspaceId space = SimpleSpace({rows});
  DatasetId dataset = CreateDataset(group, path, name, record.get(), space.get());
  if (rows > 0) {
    Check(H5Dwrite(dataset.get(), record.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()),
          "cannot write table '" + path + "'");
  }
  WriteAttribute(dataset.get(), path, "description", table.description);
  std::vector<std::string> units;
  for (const Column& column : table.columns) units.push_back(column.unit);
  WriteStringArrayAttribute(dataset.get(), path, kUnitsAttribute, units);
}

void WriteMatrix(hid_t group, const std::string& path, const std::string& name, const Matrix& matrix) {
  if (matrix.values.size() != matrix.rows * matrix.cols) {
    throw RuntimeError("matrix '" + path + "' holds " + std::to_string(matrix.values.size()) + " values, not " +
                       std::to_string(matrix.rows) + " x " + std::to_string(matrix.cols));
  }
  DataspaceId space = SimpleSpace({matrix.rows, matrix.cols});
  DatasetId dataset = CreateDataset(group, path, name, H5T_NATIVE_DOUBLE, space.get());
  if (!matrix.values.empty()) {
    Check(H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, matrix.values.data()),
          "cannot write matrix '" + path + "'");
  }
  WriteAttribute(dataset.get(), path, "description", matrix.description);
  WriteAttribute(dataset.get(), path, "unit", matrix.unit);
}

// "name=unit" for each attribute of the group at `path` whose declaration (schema.h) has a unit, in name order. A
// group's attributes have no order a reader can rely on (h5py lists them by name, `units` among them), so each
// entry names its attribute, where a table's units follow its columns.
std::vector<std::string> AttributeUnits(const std::string& path, const Group& group) {
  std::vector<std::string> units;
  const schema::GroupSpec* spec = schema::GroupSpecAt(path);
  if (spec == nullptr) return units;
  for (const auto& [name, value] : group.attributes) {
    const schema::Field* field = spec->MatchAttribute(name);
    if (field != nullptr && !field->unit.empty()) units.push_back(name + "=" + field->unit);
  }
  return units;
}

void WriteGroup(hid_t location, const std::string& path, const Group& group) {
  if (group.attributes.contains(kUnitsAttribute)) {
    throw RuntimeError("group '" + path + "': attribute '" + kUnitsAttribute +
                       "' is reserved for the units of the group's attributes");
  }
  for (const auto& [name, value] : group.attributes) WriteAttribute(location, path, name, value);
  const std::vector<std::string> units = AttributeUnits(path, group);
  if (!units.empty()) WriteStringArrayAttribute(location, path, kUnitsAttribute, units);
  for (const auto& [name, table] : group.tables) WriteTable(location, ChildPath(path, name), name, table);
  for (const auto& [name, matrix] : group.matrices) WriteMatrix(location, ChildPath(path, name), name, matrix);
  for (const auto& [name, child] : group.children()) {
    const std::string child_path = ChildPath(path, name);
    GroupId child_group(Check(H5Gcreate2(location, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              "cannot create group '" + child_path + "'"));
    WriteGroup(child_group.get(), child_path, *child);
  }
}

// `error_number` is taken by the caller right after the failing call, before anything can change errno.
std::string SystemError(const std::string& what, int error_number) { return what + ": " + OsMessage(error_number); }

// File access in memory (the core driver, no backing store): HDF5 builds or edits the file image and never
// touches the disk, so that a full disk is our own write's one OS error, never HDF5's error stack or a file id
// left half-closed (whose flush at exit crashed the process).
PropertyListId InMemoryAccess() {
  PropertyListId access = FileAccess();
  Check(H5Pset_fapl_core(access.get(), 1 << 20, false), "cannot select HDF5's in-memory file driver");
  return access;
}

// The bytes of an open in-memory file, which is closed.
std::vector<char> FileImage(FileId& file) {
  Check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "cannot flush the report");
  const ssize_t size = Check(H5Fget_file_image(file.get(), nullptr, 0), "cannot size the report's image");
  std::vector<char> image(static_cast<size_t>(size));
  Check(H5Fget_file_image(file.get(), image.data(), image.size()), "cannot copy the report's image");
  file.Close("cannot close the report");
  return image;
}

std::vector<char> ReportImage(const Report& report) {
  QuietHdf5Errors quiet;
  PropertyListId access = InMemoryAccess();
  FileId file(Check(H5Fcreate("trainbench-report.h5", H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                    "cannot create the report in memory"));
  GroupId root(Check(H5Gopen2(file.get(), "/", H5P_DEFAULT), "cannot open the root group"));
  WriteGroup(root.get(), "/", report.root);
  root.Close("cannot close the root group");
  return FileImage(file);
}

// `image` to `path` under a temporary name in the same directory, then renamed over it.
void ReplaceReport(const std::string& path, const std::vector<char>& image) {
  try {
    ReplaceFileDurably(path, image.data(), image.size());
  } catch (const std::exception& error) {
    throw RuntimeError("cannot write report '" + path + "': " + error.what());
  }
}

std::string DirectoryOf(const std::string& path) {
  std::string directory = std::filesystem::path(path).parent_path().string();
  return directory.empty() ? "." : directory;
}

// ---- reading ----------------------------------------------------------------------------------------------

// Iteration callback for links (H5L_info_t) and attributes (H5A_info_t): appends each name.
template <typename Info>
herr_t CollectName(hid_t, const char* name, const Info*, void* names) {
  try {
    static_cast<std::vector<std::string>*>(names)->emplace_back(name);
    return 0;
  } catch (...) {
    return -1;  // exceptions must not cross HDF5's C frames
  }
}

std::vector<std::string> AttributeNames(hid_t object, const std::string& path) {
  std::vector<std::string> names;
  Check(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, nullptr, CollectName<H5A_info_t>, &names),
        "cannot list the attributes of '" + path + "'");
  return names;
}

AttributeId OpenAttribute(hid_t object, const std::string& path, const std::string& name) {
  return AttributeId(
      Check(H5Aopen(object, name.c_str(), H5P_DEFAULT), "cannot open attribute '" + name + "' of '" + path + "'"));
}

bool HasAttribute(hid_t object, const std::string& path, const std::string& name) {
  return Check(H5Aexists(object, name.c_str()), "cannot look up attribute '" + name + "' of '" + path + "'") > 0;
}

// Every string of a string attribute, scalar or array, variable- or fixed-length.
std::vector<std::string> ReadStrings(hid_t attribute, const std::string& what) {
  DatatypeId type(Check(H5Aget_type(attribute), what));
  if (Check(H5Tget_class(type.get()), what) != H5T_STRING) throw RuntimeError(what + ": not a string");
  DataspaceId space(Check(H5Aget_space(attribute), what));
  const auto count = static_cast<size_t>(Check(H5Sget_simple_extent_npoints(space.get()), what));
  std::vector<std::string> strings;
  if (Check(H5Tis_variable_str(type.get()), what) > 0) {
    DatatypeId memory_type = VariableString();
    Check(H5Tset_cset(memory_type.get(), Check(H5Tget_cset(type.get()), what)), what);
    // HDF5 allocates each string; they are freed even when copying them throws.
    struct OwnedPointers {
      std::vector<char*> pointers;
      ~OwnedPointers() {
        for (char* pointer : pointers) H5free_memory(pointer);
      }
    } texts{std::vector<char*>(count, nullptr)};
    Check(H5Aread(attribute, memory_type.get(), texts.pointers.data()), what);
    for (const char* text : texts.pointers) strings.emplace_back(text ? text : "");
  } else {
    const size_t size = H5Tget_size(type.get());
    if (size == 0) throw RuntimeError(what + ": " + Hdf5Message());
    std::vector<char> packed(count * size);
    Check(H5Aread(attribute, type.get(), packed.data()), what);
    for (size_t i = 0; i < count; ++i) strings.emplace_back(&packed[i * size], strnlen(&packed[i * size], size));
  }
  return strings;
}

AttributeValue ReadAttribute(hid_t object, const std::string& path, const std::string& name) {
  const std::string what = "cannot read attribute '" + name + "' of '" + path + "'";
  AttributeId attribute = OpenAttribute(object, path, name);
  DataspaceId space(Check(H5Aget_space(attribute.get()), what));
  if (Check(H5Sget_simple_extent_npoints(space.get()), what) != 1) {
    throw RuntimeError("attribute '" + name + "' of '" + path + "' is not a single value");
  }
  DatatypeId type(Check(H5Aget_type(attribute.get()), what));
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: {
      int64_t value = 0;
      Check(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), what);
      return value;
    }
    case H5T_FLOAT: {
      double value = 0;
      Check(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value), what);
      return value;
    }
    case H5T_STRING:
      return ReadStrings(attribute.get(), what).front();
    default:
      throw RuntimeError("attribute '" + name + "' of '" + path + "' is not an integer, float or string");
  }
}

std::string ReadStringAttribute(hid_t object, const std::string& path, const std::string& name) {
  if (!HasAttribute(object, path, name)) return "";
  AttributeId attribute = OpenAttribute(object, path, name);
  std::vector<std::string> strings =
      ReadStrings(attribute.get(), "cannot read attribute '" + name + "' of '" + path + "'");
  return strings.empty() ? "" : strings.front();
}

std::vector<hsize_t> Dimensions(hid_t dataset, const std::string& path) {
  const std::string what = "cannot read the shape of '" + path + "'";
  DataspaceId space(Check(H5Dget_space(dataset), what));
  std::vector<hsize_t> dims(Check(H5Sget_simple_extent_ndims(space.get()), what));
  Check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), what);
  return dims;
}

// One column of a table as read into memory: the file's fields in order, numbers as native int64/double, packed.
struct TableField {
  std::string name;
  H5T_class_t kind;
  size_t offset;
  size_t size;
  DatatypeId string_type;  // the file's own string type, for string fields
};

// The memory layout of the file's record type; `record_size` gets the packed record's bytes.
std::vector<TableField> TableLayout(hid_t file_type, const std::string& path, size_t& record_size) {
  const std::string what = "cannot read table '" + path + "'";
  const int fields = Check(H5Tget_nmembers(file_type), what);
  std::vector<TableField> layout;
  record_size = 0;
  for (int i = 0; i < fields; ++i) {
    char* raw_name = H5Tget_member_name(file_type, static_cast<unsigned>(i));
    if (raw_name == nullptr) throw RuntimeError(what + ": " + Hdf5Message());
    std::string name = raw_name;
    H5free_memory(raw_name);
    const H5T_class_t kind = Check(H5Tget_member_class(file_type, static_cast<unsigned>(i)), what);
    size_t size = kNumberSize;
    DatatypeId string_type;
    if (kind == H5T_STRING) {
      string_type = DatatypeId(Check(H5Tget_member_type(file_type, static_cast<unsigned>(i)), what));
      if (Check(H5Tis_variable_str(string_type.get()), what) > 0) {
        throw RuntimeError("table '" + path + "': column '" + name + "' holds variable-length strings");
      }
      size = H5Tget_size(string_type.get());
      if (size == 0) throw RuntimeError(what + ": " + Hdf5Message());
    } else if (kind != H5T_INTEGER && kind != H5T_FLOAT) {
      throw RuntimeError("table '" + path + "': column '" + name + "' is not an integer, float or string");
    }
    layout.push_back(TableField{name, kind, record_size, size, std::move(string_type)});
    record_size += size;
  }
  if (layout.empty()) throw RuntimeError("table '" + path + "' has no columns");
  return layout;
}

// Every row of `dataset` as packed records of `layout`.
std::vector<char> ReadRecords(hid_t dataset, const std::string& path, const std::vector<TableField>& layout,
                              size_t record_size, size_t rows) {
  const std::string what = "cannot read table '" + path + "'";
  DatatypeId record(Check(H5Tcreate(H5T_COMPOUND, record_size), what));
  for (const TableField& field : layout) {
    hid_t field_type = field.kind == H5T_INTEGER ? H5T_NATIVE_INT64
                       : field.kind == H5T_FLOAT ? H5T_NATIVE_DOUBLE
                                                 : field.string_type.get();
    Check(H5Tinsert(record.get(), field.name.c_str(), field.offset, field_type), what);
  }
  std::vector<char> buffer(rows * record_size);
  if (rows > 0) Check(H5Dread(dataset, record.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()), what);
  return buffer;
}

Table ReadTable(hid_t dataset, const std::string& path, hid_t file_type) {
  std::vector<hsize_t> dims = Dimensions(dataset, path);
  if (dims.size() != 1) throw RuntimeError("table '" + path + "' is not one-dimensional");
  const size_t rows = dims[0];
  size_t record_size = 0;
  const std::vector<TableField> layout = TableLayout(file_type, path, record_size);
  const std::vector<char> buffer = ReadRecords(dataset, path, layout, record_size, rows);

  std::vector<std::string> units(layout.size());
  if (HasAttribute(dataset, path, kUnitsAttribute)) {
    AttributeId attribute = OpenAttribute(dataset, path, kUnitsAttribute);
    units = ReadStrings(attribute.get(), "cannot read attribute 'units' of '" + path + "'");
    if (units.size() != layout.size()) {
      throw RuntimeError("table '" + path + "' has " + std::to_string(layout.size()) + " columns but " +
                         std::to_string(units.size()) + " units");
    }
  }
  Table table;
  table.description = ReadStringAttribute(dataset, path, "description");
  for (size_t c = 0; c < layout.size(); ++c) {
    const TableField& field = layout[c];
    auto at = [&](size_t r) { return &buffer[r * record_size + field.offset]; };
    if (field.kind == H5T_STRING) {
      std::vector<std::string> values;
      for (size_t r = 0; r < rows; ++r) values.emplace_back(at(r), strnlen(at(r), field.size));
      table.Add(field.name, units[c], std::move(values));
    } else if (field.kind == H5T_INTEGER) {
      std::vector<int64_t> values(rows);
      for (size_t r = 0; r < rows; ++r) std::memcpy(&values[r], at(r), kNumberSize);
      table.Add(field.name, units[c], std::move(values));
    } else {
      std::vector<double> values(rows);
      for (size_t r = 0; r < rows; ++r) std::memcpy(&values[r], at(r), kNumberSize);
      table.Add(field.name, units[c], std::move(values));
    }
  }
  return table;
}

Matrix ReadMatrix(hid_t dataset, const std::string& path, const std::vector<hsize_t>& dims) {
  Matrix matrix;
  matrix.rows = dims[0];
  matrix.cols = dims[1];
  matrix.values.resize(matrix.rows * matrix.cols);
  if (!matrix.values.empty()) {
    Check(H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, matrix.values.data()),
          "cannot read matrix '" + path + "'");
  }
  matrix.description = ReadStringAttribute(dataset, path, "description");
  matrix.unit = ReadStringAttribute(dataset, path, "unit");
  return matrix;
}

void ReadDataset(hid_t dataset, const std::string& path, const std::string& name, Group& group) {
  DatatypeId type(Check(H5Dget_type(dataset), "cannot read the type of '" + path + "'"));
  const H5T_class_t kind = Check(H5Tget_class(type.get()), "cannot read the type of '" + path + "'");
  if (kind == H5T_COMPOUND) {
    group.tables[name] = ReadTable(dataset, path, type.get());
    return;
  }
  std::vector<hsize_t> dims = Dimensions(dataset, path);
  if (kind != H5T_FLOAT || dims.size() != 2) {
    throw RuntimeError("dataset '" + path + "' is neither a table (compound) nor a matrix (2-D float)");
  }
  group.matrices[name] = ReadMatrix(dataset, path, dims);
}

void ReadGroup(hid_t location, const std::string& path, Group& group) {
  for (const std::string& name : AttributeNames(location, path)) {
    if (name != kUnitsAttribute) group.Set(name, ReadAttribute(location, path, name));  // the schema's, not data
  }
  std::vector<std::string> names;
  Check(H5Literate(location, H5_INDEX_NAME, H5_ITER_INC, nullptr, CollectName<H5L_info_t>, &names),
        "cannot list the members of '" + path + "'");
  for (const std::string& name : names) {
    const std::string child_path = ChildPath(path, name);
    ObjectId object(Check(H5Oopen(location, name.c_str(), H5P_DEFAULT), "cannot open '" + child_path + "'"));
    switch (H5Iget_type(object.get())) {
      case H5I_GROUP:
        ReadGroup(object.get(), child_path, group.Child(name));
        break;
      case H5I_DATASET:
        ReadDataset(object.get(), child_path, name, group);
        break;
      default:
        throw RuntimeError("'" + child_path + "' is neither a group nor a dataset");
    }
  }
}

// Reads `path` after the caller has checked it exists; messages here omit the file name.
Report ReadReportFile(const std::string& path) {
  QuietHdf5Errors quiet;
  if (Check(H5Fis_hdf5(path.c_str()), "cannot check the HDF5 signature") == 0) {
    throw InputError("not an HDF5 file");
  }
  PropertyListId access = FileAccess();
  // The signature matched, so a failure to open means the file was cut short or damaged.
  const hid_t file_id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get());
  if (file_id < 0) throw InputError("the HDF5 file is damaged or truncated (HDF5: " + Hdf5Message() + ")");
  FileId file(file_id);
  GroupId root(Check(H5Gopen2(file.get(), "/", H5P_DEFAULT), "cannot open the root group"));

  // Identity first, so that a foreign file is named as such rather than failing on its contents.
  const std::string& schema_attribute = schema::root::schema.name;
  const std::string& version_attribute = schema::root::schema_version.name;
  if (!HasAttribute(root.get(), "/", schema_attribute)) {
    throw InputError("not a trainbench report (no '" + schema_attribute + "' attribute)");
  }
  AttributeValue schema = ReadAttribute(root.get(), "/", schema_attribute);
  const auto* schema_name = std::get_if<std::string>(&schema);
  if (schema_name == nullptr || *schema_name != kReportSchemaName) {
    throw InputError("not a trainbench report (attribute '" + schema_attribute + "' is not '" +
                     std::string(kReportSchemaName) + "')");
  }
  if (!HasAttribute(root.get(), "/", version_attribute)) {
    throw InputError("not a trainbench report (no '" + version_attribute + "' attribute)");
  }
  AttributeValue version = ReadAttribute(root.get(), "/", version_attribute);
  const auto* version_number = std::get_if<int64_t>(&version);
  if (version_number == nullptr || *version_number != kReportSchemaVersion) {
    const std::string shown = version_number ? std::to_string(*version_number) : "of the wrong type";
    throw InputError("schema version " + shown + " is not supported (this build reads " +
                     std::to_string(kReportSchemaVersion) + ")");
  }

  Report report;
  ReadGroup(root.get(), "/", report.root);
  if (std::string damage = FindReportDamage(report); !damage.empty()) throw InputError(damage);
  return report;
}

}  // namespace

void WriteReport(const Report& report, const std::string& path) {
  std::vector<char> image;
  try {
    image = ReportImage(report);
  } catch (const std::exception& error) {
    throw RuntimeError("cannot write report '" + path + "': " + error.what());
  }
  ReplaceReport(path, image);
}

void RewriteReportStatus(const std::string& path, const std::string& status, const std::string& reason,
                         const std::string& end_utc, const std::map<std::string, std::string>& more) {
  std::vector<char> image;
  try {
    QuietHdf5Errors quiet;
    PropertyListId access = InMemoryAccess();
    FileId file(Check(H5Fopen(path.c_str(), H5F_ACC_RDWR, access.get()), "cannot open '" + path + "'"));
    GroupId root(Check(H5Gopen2(file.get(), "/", H5P_DEFAULT), "cannot open the root group"));
    namespace r = schema::root;
    std::map<std::string, std::string> attributes = more;
    for (const auto& [field, value] : {std::pair{&r::status, status}, {&r::status_reason, reason}, {&r::end_utc, end_utc}}) {
      attributes[field->name] = value;
    }
    for (const auto& [field, value] : attributes) {
      const char* name = field.c_str();
      if (Check(H5Aexists(root.get(), name), "cannot look up attribute '" + field + "'") > 0) {
        Check(H5Adelete(root.get(), name), "cannot replace attribute '" + field + "'");
      }
      WriteAttribute(root.get(), "/", name, value);
    }
    root.Close("cannot close the root group");
    image = FileImage(file);
  } catch (const std::exception& error) {
    throw RuntimeError("cannot rewrite the status of report '" + path + "': " + error.what());
  }
  ReplaceReport(path, image);
}

Report ReadReport(const std::string& path) {
  const std::string prefix = "cannot read report '" + path + "': ";
  const std::string problem = InputFileProblem(path);
  if (!problem.empty()) throw InputError(prefix + problem);
  try {
    return ReadReportFile(path);
  } catch (const std::exception& error) {
    throw InputError(prefix + error.what());
  }
}

void CheckWritable(const std::string& path, const std::string& what) {
  auto fail = [&](const std::string& why) { throw InputError("cannot write " + what + " '" + path + "': " + why); };
  if (path.empty()) fail("the path is empty");
  const std::string directory = DirectoryOf(path);
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    const int stat_errno = errno;
    fail(stat_errno == ENOENT ? "directory '" + directory + "' does not exist"
                              : SystemError("cannot inspect directory '" + directory + "'", stat_errno));
  }
  if (!S_ISDIR(info.st_mode)) fail("'" + directory + "' is not a directory");
  const std::string problem = OutputFileProblem(path, {});
  if (!problem.empty()) fail(problem);
  if (::access(path.c_str(), F_OK) == 0 && ::access(path.c_str(), W_OK) != 0) fail("the existing file is not writable");
  // Permissions alone do not tell (read-only mounts, quotas, ACLs): create and remove a real file.
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(SystemError("cannot create a file in '" + directory + "'", errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace tb
