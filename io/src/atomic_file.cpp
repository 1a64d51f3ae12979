#include "hla/io/atomic_file.hpp"

#include "hla/problem.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hla::io {
namespace fs = std::filesystem;

namespace {

InputError os_error(const std::string& what, const fs::path& p, int err) {
  return InputError(what + " '" + p.string() + "': " + std::strerror(err));
}

// Owns the temporary file until it has been renamed; removes it otherwise.
struct TempFile {
  fs::path path;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed && !path.empty()) ::unlink(path.c_str());
  }
};

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw os_error("cannot open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; the rename itself has happened.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) throw os_error("cannot fsync directory", dir, err);
}

}  // namespace

void write_file_atomically(const fs::path& path, const std::function<void(const ByteSink&)>& fill) {
  if (path.filename().empty()) throw InputError("cannot write '" + path.string() + "': not a file name");
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  TempFile tmp;
  std::string name = ".";  // hidden, and never *.safetensors: a listing cannot pick it up
  name += path.filename().string();
  name += ".tmp.XXXXXX";
  const std::string templ = (dir / name).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  tmp.fd = ::mkstemp(buf.data());
  if (tmp.fd < 0) throw os_error("cannot create a temporary file in", dir, errno);
  tmp.path = buf.data();
  if (::fchmod(tmp.fd, 0644) != 0) throw os_error("cannot set permissions of", tmp.path, errno);

  const ByteSink sink = [&](const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t w = ::write(tmp.fd, p, size);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw os_error("cannot write", path, errno);
      }
      p += w;
      size -= static_cast<std::size_t>(w);
    }
  };
  fill(sink);
  if (::fsync(tmp.fd) != 0) throw os_error("cannot fsync", path, errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) throw os_error("cannot close", path, errno);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) throw os_error("cannot rename the temporary file onto", path, errno);
  tmp.renamed = true;
  fsync_directory(dir);
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  write_file_atomically(path, [bytes](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

std::string read_file_bytes(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError("cannot read '" + path.string() + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw os_error("cannot open", path, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw os_error("cannot read", path, errno);
  return std::move(ss).str();
}

}  // namespace hla::io
