// The files of web/, compiled into the binary by cmake/EmbedFiles.cmake (the generated source
// defines the table). Ends with {nullptr, nullptr, 0}. Each file's bytes are followed by a '\0' not
// counted in `size`.
#pragma once

#include <cstddef>

namespace ajet::web {

struct EmbeddedFile {
  const char* name;  // base name: "index.html"
  const char* bytes;
  size_t size;
};

extern const EmbeddedFile kEmbeddedFiles[];

}  // namespace ajet::web
