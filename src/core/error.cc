#include "error.h"

#include <mpi.h>

#include <system_error>

namespace tb {

std::string OsMessage(int error_number) { return std::system_category().message(error_number); }

std::string FormatFailure(const char* what, const char* file, int line, const std::string& library_message,
                          const std::string& hint) {
  std::string text = std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " + library_message;
  if (!hint.empty()) text += " HINT: " + hint;
  return text;
}

void ThrowMpiError(int code, const char* expr, const char* file, int line) {
  char buffer[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, buffer, &length) != MPI_SUCCESS) length = 0;
  std::string message = length > 0 ? std::string(buffer, length) : "MPI error code " + std::to_string(code);
  throw RuntimeError(FormatFailure(expr, file, line, message,
                                   "a rank may have died or the network failed; check the other ranks' output"));
}

}  // namespace tb
