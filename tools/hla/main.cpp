// hla — the oracle's command line. Exit status: 0 success, 1 a check or
// fuzz campaign failed, 2 usage or input error (message on stderr), 3 a bug
// of ours ("internal error"), 4 a check that could score too little to judge
// (INCONCLUSIVE). A user's mistake is never exit 3: bad option
// values, unusable paths and file-system errors are input errors.
#include "commands.hpp"
#include "problem_options.hpp"

#include "hla/io/atomic_file.hpp"
#include "hla/io/printable.hpp"
#include "hla/error.hpp"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

namespace hla::cli {
namespace fs = std::filesystem;

CLI::Validator integer_in(std::uint64_t lo, std::uint64_t hi) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (!digits || r.ec != std::errc() || v < lo || v > hi) return "'" + io::printable(s) + "' is not " + range;
        return {};
      },
      range.substr(3), "INTEGER");
}

CLI::Validator seconds_in(double lo, double hi, bool lo_open) {
  const std::string range = std::string("a number of seconds ") + (lo_open ? "above " : "from ") + CLI::detail::to_string(lo) +
                            (lo_open ? " up to " : " to ") + CLI::detail::to_string(hi);
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
          return "'" + io::printable(s) + "' is not " + range;
        return {};
      },
      range.substr(2), "SECONDS");
}

const CLI::Validator non_empty(
    [](std::string& s) -> std::string { return s.empty() ? "empty value (leave the option out for its default)" : ""; }, "",
    "NONEMPTY");

const CLI::Validator comma_list(
    [](std::string& s) -> std::string {
      if (s.empty()) return "empty value (leave the option out for its default)";
      if (s.front() == ',' || s.back() == ',' || s.find(",,") != std::string::npos)
        return "'" + io::printable(s) + "' has an empty entry";
      return {};
    },
    "", "LIST");

namespace {

fs::path without_trailing_slash(const fs::path& p) {
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s.empty() ? fs::path(".") : fs::path(s);
}

std::string quoted(const fs::path& p) { return "'" + io::printable(p.string()) + "'"; }

// Writes and removes a hidden file in `dir`; the errno of the failure, or 0.
// Named like a temporary file of atomic_file.hpp, so that a probe left by a
// killed process is swept like one.
int probe_writable(const fs::path& dir) {
  std::string templ = (dir / (".hla-probe.tmp." + std::to_string(::getpid()) + ".XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(buf.data());
  return 0;
}

}  // namespace

void check_output_dir(const std::string& option, const fs::path& dir_in) {
  const fs::path dir = without_trailing_slash(dir_in);
  const std::string what = option + " " + quoted(dir_in);
  std::error_code ec;
  // The nearest part of the path that exists: the folder itself or the one it will be created in.
  fs::path at = dir;
  for (;;) {
    const fs::file_status st = fs::status(at, ec);
    // ENOTDIR: a part of the path is a file; climbing up finds it and says so.
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      throw InputError(what + ": cannot look at " + quoted(at) + ": " + ec.message());
    if (fs::exists(st)) {
      if (!fs::is_directory(st))
        throw InputError(at == dir ? what + " exists and is not a directory"
                                   : what + ": cannot create it, " + quoted(at) + " is not a directory");
      break;
    }
    const fs::path up = at.has_parent_path() ? at.parent_path() : fs::path(".");
    if (up == at) break;
    at = up;
  }
  if (const int err = probe_writable(at))
    throw InputError(at == dir ? what + ": cannot write into it: " + std::strerror(err)
                               : what + ": cannot create it in " + quoted(at) + ": " + std::strerror(err));
}

void check_output_file(const std::string& option, const fs::path& file) {
  const std::string what = option + " " + quoted(file);
  if (file.empty() || !file.has_filename() || file.filename() == "." || file.filename() == "..")
    throw InputError(what + " is not a file name");
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    throw InputError(what + ": " + ec.message());
  if (fs::is_directory(st)) throw InputError(what + " is a directory");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw InputError(what + " exists and is not a regular file (a device, FIFO or socket): it would be replaced");
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  const fs::file_status ds = fs::status(dir, ec);
  if (!fs::exists(ds)) throw InputError(what + ": folder " + quoted(dir) + " does not exist");
  if (!fs::is_directory(ds)) throw InputError(what + ": " + quoted(dir) + " is not a directory");
  if (const int err = probe_writable(dir)) throw InputError(what + ": cannot write into " + quoted(dir) + ": " + std::strerror(err));
}

}  // namespace hla::cli

int main(int argc, char** argv) {
  // A killed `hla gen` (or eval, or fuzz) leaves no temporary file behind.
  hla::io::remove_temp_files_on_signals();
  // The fast engine allocates and frees many blocks of 0.1–10 MB per head: from
  // the heap, reused, instead of fresh (kernel-zeroed) mappings each time,
  // which cost a quarter of `hla ref` on large problems.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"hla-oracle: exact reference, checker and fuzzer for Higher-order Linear Attention kernels"};
  app.require_subcommand(1);
  // The project's version (CMake's project(), which the Python package's version matches).
  app.set_version_flag("--version", "hla-oracle " HLA_VERSION, "print the version and exit");
  hla::cli::Action action;
  hla::cli::add_demo(app, action);
  hla::cli::add_gen(app, action);
  hla::cli::add_check(app, action);
  hla::cli::add_eval(app, action);
  hla::cli::add_fuzz(app, action);
  hla::cli::add_fuzz_merge(app, action);
  hla::cli::add_select(app, action);
  hla::cli::add_ref(app, action);
  hla::cli::add_options(app, action);
  // CLI11 answers an unknown first word with "A subcommand is required": name it.
  const auto subcommands = app.get_subcommands([](CLI::App*) { return true; });
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(subcommands.begin(), subcommands.end(), [&](const CLI::App* s) { return s->get_name() == argv[1]; })) {
    std::cerr << "hla: error: unknown subcommand '" << hla::io::printable(argv[1])
              << "' (expected demo, gen, ref, check, eval, fuzz or select; hla --help lists them)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's messages quote the command line: escape before printing.
    std::cerr << "hla: error: " << hla::io::printable_message(e.what()) << "\nRun with --help for more information.\n";
    return 2;
  }
  try {
    return action();
  } catch (const hla::InputError& e) {
    std::cerr << "hla: error: " << hla::io::printable_message(e.what()) << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // Paths are checked up front; this is a file system that changed under us
    // (or a check we lack): still the user's environment, not our bug.
    std::string paths;
    if (!e.path1().empty()) paths += " '" + hla::io::printable(e.path1().string()) + "'";
    if (!e.path2().empty()) paths += " and '" + hla::io::printable(e.path2().string()) + "'";
    std::cerr << "hla: error:" << paths << ": " << hla::io::printable_message(e.code().message()) << " ("
              << hla::io::printable_message(e.what()) << ")\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hla: internal error: " << hla::io::printable_message(e.what()) << "\n";
    return 3;
  }
}
