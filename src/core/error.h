// Errors as values with a code: every failure that reaches the CLI carries the exit code it maps to.
#pragma once

#include <stdexcept>
#include <string>

namespace tb {

// Process exit codes (README.md, "Exit codes and failures"): 0 ok, 1 runtime failure, 2 invalid input, 3 validation regression.
enum class ExitCode : int { kOk = 0, kRuntime = 1, kInput = 2, kRegression = 3 };

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Invalid input: a flag, a file, a value. Exit code 2; the message is one line naming what is wrong.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(ExitCode::kInput, message) {}
};

// Something failed at run time (a library call, a wrong result, a lost rank). Exit code 1.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& message) : Error(ExitCode::kRuntime, message) {}
};

// An error that every rank of a communicator raised together, from a check they agreed on (a corrupt checkpoint
// every rank verified, a checkpoint write every rank saw fail): only the `reporter` rank prints it, so that the
// user reads one line; the others wait for the reporter's MPI_Abort.
class SharedError : public Error {
 public:
  SharedError(const Error& error, bool reporter) : Error(error.code(), error.what()), reporter_(reporter) {}
  bool reporter() const { return reporter_; }

 private:
  bool reporter_;
};

// The operating system's message for an errno value ("No space left on device"); thread-safe, unlike strerror.
std::string OsMessage(int error_number);

// Thrown on every rank once the ranks have agreed that a setup step failed somewhere (AgreeOnSetup, cli.h); the
// failing rank has already printed its line. main() exits with code() and prints nothing more.
class AgreedFailure : public Error {
 public:
  explicit AgreedFailure(ExitCode code) : Error(code, "setup failed (reported above)") {}
};

// Formats "what failed at file:line: library message [HINT: hint]".
std::string FormatFailure(const char* what, const char* file, int line, const std::string& library_message,
                          const std::string& hint = "");

// Throws RuntimeError for a failed MPI call, carrying MPI's own error string.
[[noreturn]] void ThrowMpiError(int code, const char* expr, const char* file, int line);

}  // namespace tb

#define TB_CHECK_MPI(expr)                                        \
  do {                                                            \
    int tb_mpi_rc_ = (expr);                                      \
    if (tb_mpi_rc_ != 0) ::tb::ThrowMpiError(tb_mpi_rc_, #expr, __FILE__, __LINE__); \
  } while (0)
