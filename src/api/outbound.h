/* What every HTTP request sandboxd-api sends (webhooks.c, forward.c) is, with libcurl. */
#pragma once

#include <curl/curl.h>

/* To url and nowhere else: no proxy from the environment, no redirect followed, http and https
 * only, no signals (libcurl runs on the API's threads), connect_ms to connect and total_ms for
 * the whole exchange. */
static inline void sbx_outbound_setup(CURL *curl, const char *url, long connect_ms, long total_ms)
{
        curl_easy_setopt(curl, CURLOPT_URL, url);
        curl_easy_setopt(curl, CURLOPT_PROXY, "");
        curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, total_ms);
}
