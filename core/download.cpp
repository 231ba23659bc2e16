#include "volt/core/download.h"

#ifdef VOLT_HAVE_CURL
#include <curl/curl.h>
#endif
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "volt/core/errors.h"

namespace volt {

void download_file(const std::string& url, const std::string& destination) {
#ifndef VOLT_HAVE_CURL
  throw DataError(detail::str_cat("cannot download ", url, " to '", destination,
                                  "': this volt was built without libcurl; fetch the file by hand"));
#else
  namespace fs = std::filesystem;
  const fs::path dest(destination);
  if (dest.has_parent_path()) fs::create_directories(dest.parent_path());
  const std::string tmp = destination + ".part." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  VOLT_CHECK(f != nullptr, DataError, "cannot write '", tmp, "' while downloading ", url);
  CURL* curl = curl_easy_init();
  VOLT_CHECK(curl != nullptr, DataError, "libcurl failed to initialize");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, f);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  std::fclose(f);
  if (rc != CURLE_OK) {
    std::remove(tmp.c_str());
    throw DataError(detail::str_cat("downloading ", url, " failed: ", curl_easy_strerror(rc)));
  }
  std::error_code ec;
  fs::rename(tmp, dest, ec);
  VOLT_CHECK(!ec, DataError, "cannot move the download to '", destination, "': ", ec.message());
#endif
}

}  // namespace volt
