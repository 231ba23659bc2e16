#pragma once
/// Fetches a URL (http, https or file) to a local path with libcurl, atomically (temporary file,
/// then rename). Throws DataError naming the URL and the reason.
#include <string>

namespace volt {
void download_file(const std::string& url, const std::string& destination);
}  // namespace volt
