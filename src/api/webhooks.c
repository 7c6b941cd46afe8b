/* Webhooks: the senders, the address checks and the deliveries' routes (webhooks.h). */
#define _GNU_SOURCE
#include "api/webhooks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "api/compat_judge0.h"
#include "api/live_config.h"
#include "api/outbound.h"
#include "api/respond.h"
#include "service/audit_deliveries.h"
#include "service/audit_queue.h"
#include "service/webhook_policy.h"
#include "service/webhook_sign.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define DELIVERIES_PATH "/v1/webhooks/deliveries"

/* How often an idle sender looks for due deliveries (a retry's time, or an end nobody woke it
 * for). */
#define IDLE_ROUND_MS 200

/* The longest answer body read (and dropped) from a receiver. */
#define RESPONSE_MAX_BYTES 65536

/* A delivery's retries never wait longer than this between two attempts. */
#define BACKOFF_MAX_MS (3600 * 1000)

struct sbx_webhooks {
        struct sbx_api *api;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        bool stopping;
        pthread_t senders[SBX_WEBHOOK_SENDERS];
        size_t n_senders;
};

/* ---- Where a webhook may go ---- */

/* A callback URL's parts. */
struct target {
        char host[256]; /* without IPv6 brackets */
        unsigned port;
};

static bool parse_target(const char *url, struct target *target, char *why, size_t why_size)
{
        CURLU *parsed = curl_url();
        char *scheme = NULL, *host = NULL, *port = NULL;
        bool ok = parsed != NULL && curl_url_set(parsed, CURLUPART_URL, url, 0) == CURLUE_OK &&
                  curl_url_get(parsed, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
                  curl_url_get(parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
                  curl_url_get(parsed, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
        if (!ok)
                snprintf(why, why_size, "callback_url is not a URL with a host");
        else if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
                snprintf(why, why_size, "callback_url must be http:// or https://");
        if (ok && (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0)) {
                size_t len = strlen(host);
                const char *start = host;
                if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
                        start++;
                        len -= 2;
                }
                snprintf(target->host, sizeof(target->host), "%.*s", (int)len, start);
                target->port = (unsigned)strtoul(port, NULL, 10);
                /* An internationalised name is resolved by libcurl in its punycode form, which
                 * getaddrinfo here would not check: such hosts are refused (write the
                 * xn-- form). */
                for (const char *c = target->host; *c != '\0' && ok; c++)
                        if ((unsigned char)*c >= 0x80) {
                                snprintf(why, why_size,
                                         "callback_url's host must be ASCII (its xn-- form)");
                                ok = false;
                        }
        } else {
                ok = false;
        }
        curl_free(scheme);
        curl_free(host);
        curl_free(port);
        curl_url_cleanup(parsed);
        return ok;
}

static void address_text(const struct sockaddr *address, char *out, size_t size)
{
        const void *bytes =
                address->sa_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)address)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)address)->sin6_addr;
        if (inet_ntop(address->sa_family, bytes, out, (socklen_t)size) == NULL)
                snprintf(out, size, "?");
}

/* Resolves target's host: every address must be allowed by tier's policy; the first goes to
 * *chosen (its text to chosen_text). false with why. */
static bool resolve_checked(const struct sbx_tier *tier, const struct target *target,
                            struct sockaddr_storage *chosen, char *chosen_text, size_t chosen_size,
                            char *why, size_t why_size)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *found = NULL;
        int rc = getaddrinfo(target->host, NULL, &hints, &found);
        if (rc != 0 || found == NULL) {
                snprintf(why, why_size, "callback_url's host %s does not resolve (%s)",
                         target->host, gai_strerror(rc));
                return false;
        }
        bool ok = true;
        for (struct addrinfo *ai = found; ai != NULL && ok; ai = ai->ai_next) {
                const char *refusal = NULL;
                if (sbx_webhook_address_allowed(&tier->webhook_allow, target->host, target->port,
                                                ai->ai_addr, &refusal))
                        continue;
                /* The address itself is not told: it would map a tenant's view of internal
                 * names. */
                snprintf(why, why_size,
                         "callback_url's host %s has an address that is %s: not allowed for "
                         "webhooks (a tier's webhook_allow can allow it)",
                         target->host, refusal);
                ok = false;
        }
        if (ok) {
                memcpy(chosen, found->ai_addr, found->ai_addrlen);
                address_text(found->ai_addr, chosen_text, chosen_size);
        }
        freeaddrinfo(found);
        return ok;
}

bool sbx_webhooks_check_url(const struct sbx_tenant *tenant, const char *url, char *why,
                            size_t why_size)
{
        if (tenant->webhook_secret == NULL) {
                snprintf(why, why_size,
                         "tenant %s has no webhook_secret to sign webhooks with (config)",
                         tenant->name);
                return false;
        }
        struct target target;
        if (!parse_target(url, &target, why, why_size))
                return false;
        struct sockaddr_storage chosen;
        char text[INET6_ADDRSTRLEN];
        return resolve_checked(tenant->tier, &target, &chosen, text, sizeof(text), why, why_size);
}

/* ---- One attempt ---- */

struct attempt {
        const struct sbx_tier *tier;
        const struct target *target;
        char refusal[256]; /* why the connection was refused, if it was */
};

/* libcurl's socket for the address it is about to connect to: checked once more, so that no
 * connection to a refused address is even begun. */
static curl_socket_t open_checked_socket(void *ctx, curlsocktype purpose,
                                         struct curl_sockaddr *address)
{
        struct attempt *attempt = ctx;
        const char *why = NULL;
        if (purpose != CURLSOCKTYPE_IPCXN ||
            !sbx_webhook_address_allowed(&attempt->tier->webhook_allow, attempt->target->host,
                                         attempt->target->port, &address->addr, &why)) {
                snprintf(attempt->refusal, sizeof(attempt->refusal),
                         "the connection was refused before it began: an address that is %s",
                         why ? why : "not allowed");
                return CURL_SOCKET_BAD;
        }
        return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

static size_t discard(char *data, size_t size, size_t n, void *ctx)
{
        (void)data;
        size_t *read = ctx;
        *read += size * n;
        return *read > RESPONSE_MAX_BYTES ? 0 : size * n;
}

/* The body of a delivery: {type, timestamp, data} with data as the GETs answer it. NULL with
 * why when the target cannot be read. */
static char *payload(struct sbx_api *api, const struct sbx_audit_delivery *delivery, char *why,
                     size_t why_size)
{
        if (strcmp(delivery->kind, SBX_JUDGE0_DELIVERY_KIND) == 0) {
                /* Judge0's own callback body: the submission as its GET answers it. */
                json_t *submission = NULL;
                int found = sbx_judge0_callback_body(api, delivery->tenant, delivery->target_id,
                                                     &submission);
                char *text = found > 0 ? json_dumps(submission, JSON_COMPACT) : NULL;
                json_decref(submission);
                if (text == NULL)
                        snprintf(why, why_size, "its submission cannot be read");
                return text;
        }
        json_t *data = NULL;
        struct sbx_error err = {0};
        bool batch = strcmp(delivery->kind, "batch") == 0;
        int found = batch ? sbx_audit_batch_fetch(api->audit, delivery->tenant, delivery->target_id,
                                                  NULL, 0, &data, &err)
                          : sbx_audit_fetch(api->audit, delivery->tenant, delivery->target_id,
                                            &data, &err);
        if (found <= 0) {
                snprintf(why, why_size, "its %s cannot be read: %.300s", delivery->kind,
                         found < 0 ? err.message : "gone");
                return NULL;
        }
        char timestamp[32];
        time_t now = time(NULL);
        struct tm utc;
        gmtime_r(&now, &utc);
        strftime(timestamp, sizeof(timestamp), "%Y-%m-%dT%H:%M:%SZ", &utc);
        _cleanup_(json_decrefp) json_t *body = json_pack(
                "{s:s, s:s, s:o}", "type", batch ? "batch.completed" : "execution.completed",
                "timestamp", timestamp, "data", data);
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        if (text == NULL)
                snprintf(why, why_size, "out of memory");
        return text;
}

/* One attempt at delivery: true when the receiver answered 2xx; else why. */
static bool attempt_delivery(struct sbx_api *api, const struct sbx_tenant *tenant,
                             const struct sbx_audit_delivery *delivery, char *why, size_t why_size)
{
        if (tenant == NULL || tenant->webhook_secret == NULL) {
                snprintf(why, why_size, "the tenant has no webhook_secret any more");
                return false;
        }
        struct target target;
        if (!parse_target(delivery->url, &target, why, why_size))
                return false;
        struct sockaddr_storage chosen;
        char address[INET6_ADDRSTRLEN];
        if (!resolve_checked(tenant->tier, &target, &chosen, address, sizeof(address), why,
                             why_size))
                return false;
        _cleanup_free_ char *body = payload(api, delivery, why, why_size);
        if (body == NULL)
                return false;
        int64_t timestamp = (int64_t)time(NULL);
        char signature[SBX_WEBHOOK_SIGNATURE_SIZE];
        struct sbx_error err = {0};
        if (sbx_webhook_sign(tenant->webhook_secret, delivery->id, timestamp, body, strlen(body),
                             signature, &err) < 0) {
                snprintf(why, why_size, "%s", err.message);
                return false;
        }
        char pin[INET6_ADDRSTRLEN + 300], id_header[96], timestamp_header[64], signature_header[96];
        /* Only the checked address: a DNS answer that changed since cannot redirect it. */
        snprintf(pin, sizeof(pin), chosen.ss_family == AF_INET6 ? "%s:%u:[%s]" : "%s:%u:%s",
                 target.host, target.port, address);
        snprintf(id_header, sizeof(id_header), "webhook-id: %s", delivery->id);
        snprintf(timestamp_header, sizeof(timestamp_header), "webhook-timestamp: %lld",
                 (long long)timestamp);
        snprintf(signature_header, sizeof(signature_header), "webhook-signature: %s", signature);
        /* A literal needs no name resolution (and libcurl would not parse an IPv6 one there). */
        unsigned char literal[16];
        bool is_literal = inet_pton(AF_INET, target.host, literal) == 1 ||
                          inet_pton(AF_INET6, target.host, literal) == 1;
        struct curl_slist *resolve = is_literal ? NULL : curl_slist_append(NULL, pin);
        struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
        headers = curl_slist_append(headers, id_header);
        headers = curl_slist_append(headers, timestamp_header);
        headers = curl_slist_append(headers, signature_header);
        headers = curl_slist_append(headers, "Expect:");
        CURL *curl = curl_easy_init();
        struct attempt attempt = {.tier = tenant->tier, .target = &target};
        size_t read = 0;
        bool delivered = false;
        if (curl == NULL || (resolve == NULL && !is_literal) || headers == NULL) {
                snprintf(why, why_size, "out of memory");
        } else {
                const struct sbx_server_config *server = &api->config->server;
                sbx_outbound_setup(curl, delivery->url, (long)server->webhook_timeout_ms,
                                   (long)server->webhook_timeout_ms);
                curl_easy_setopt(curl, CURLOPT_RESOLVE, resolve);
                curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
                /* Judge0 sends its callbacks with PUT; sandboxd's own webhooks are POSTs. */
                if (strcmp(delivery->kind, SBX_JUDGE0_DELIVERY_KIND) == 0)
                        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
                curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
                curl_easy_setopt(curl, CURLOPT_USERAGENT, "sandboxd-webhooks/1");
                curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
                curl_easy_setopt(curl, CURLOPT_WRITEDATA, &read);
                curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_checked_socket);
                curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, &attempt);
                CURLcode code = curl_easy_perform(curl);
                long status = 0;
                curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
                if (attempt.refusal[0] != '\0')
                        snprintf(why, why_size, "%s", attempt.refusal);
                else if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && status != 0))
                        snprintf(why, why_size, "%s", curl_easy_strerror(code));
                else if (status >= 300 && status < 400)
                        snprintf(why, why_size, "answered %ld (redirects are not followed)",
                                 status);
                else if (status < 200 || status >= 300)
                        snprintf(why, why_size, "answered %ld", status);
                else
                        delivered = true;
        }
        curl_easy_cleanup(curl);
        curl_slist_free_all(resolve);
        curl_slist_free_all(headers);
        return delivered;
}

/* When the attempt after attempts failed ones is due: the backoff doubled each time, +-20 %. */
static int64_t next_attempt_ms(const struct sbx_server_config *server, unsigned attempts,
                               unsigned *seed)
{
        uint64_t delay = server->webhook_backoff_ms;
        for (unsigned i = 1; i < attempts && delay < BACKOFF_MAX_MS; i++)
                delay *= 2;
        if (delay > BACKOFF_MAX_MS)
                delay = BACKOFF_MAX_MS;
        double jitter = 0.8 + 0.4 * ((double)rand_r(seed) / RAND_MAX);
        return (int64_t)sbx_wall_clock_ms() + (int64_t)((double)delay * jitter);
}

static void send_one(struct sbx_api *api, const struct sbx_audit_delivery *delivery, unsigned *seed)
{
        const struct sbx_config *config = sbx_live_config_acquire(api->live);
        char why[512] = "";
        bool delivered = attempt_delivery(api, sbx_config_find_tenant(config, delivery->tenant),
                                          delivery, why, sizeof(why));
        sbx_live_config_release(api->live, config);
        const struct sbx_server_config *server = &api->config->server;
        unsigned attempts = delivery->attempts + 1;
        bool last = attempts >= server->webhook_max_attempts;
        int64_t next = delivered || last ? -1 : next_attempt_ms(server, attempts, seed);
        struct sbx_error err = {0};
        if (sbx_audit_delivery_attempted(api->audit, delivery->id, delivered, why, next,
                                         (int64_t)sbx_wall_clock_ms(), &err) < 0)
                sbx_warn("webhooks: delivery %s: %s", delivery->id, err.message);
        sbx_metrics_count_webhook(api->metrics, delivered ? "delivered"
                                                : last    ? "failed"
                                                          : "retried");
        if (!delivered)
                sbx_info("webhooks: delivery %s of %s %s, attempt %u: %s%s", delivery->id,
                         delivery->kind, delivery->target_id, attempts, why,
                         last ? "; failed for good" : "; retried later");
}

static void *sender(void *arg)
{
        struct sbx_webhooks *webhooks = arg;
        struct sbx_api *api = webhooks->api;
        unsigned seed = (unsigned)sbx_now_us() ^ (unsigned)(uintptr_t)&seed;
        /* A claim lasts one attempt and then some (name resolution has no bound of ours, and
         * the resolver's retries take up to a minute): a sender that dies with the process
         * leaves it due again after that. */
        int64_t lease_ms = (int64_t)api->config->server.webhook_timeout_ms + 60000;
        pthread_mutex_lock(&webhooks->lock);
        while (!webhooks->stopping) {
                pthread_mutex_unlock(&webhooks->lock);
                struct sbx_audit_delivery delivery;
                struct sbx_error err = {0};
                int claimed = sbx_audit_delivery_claim(api->audit, (int64_t)sbx_wall_clock_ms(),
                                                       lease_ms, &delivery, &err);
                if (claimed < 0)
                        sbx_warn("webhooks: %s", err.message);
                if (claimed > 0)
                        send_one(api, &delivery, &seed);
                pthread_mutex_lock(&webhooks->lock);
                if (claimed <= 0 && !webhooks->stopping) {
                        struct timespec until = sbx_monotonic_after(IDLE_ROUND_MS);
                        pthread_cond_timedwait(&webhooks->wake, &webhooks->lock, &until);
                }
        }
        pthread_mutex_unlock(&webhooks->lock);
        return NULL;
}

struct sbx_webhooks *sbx_webhooks_start(struct sbx_api *api, struct sbx_error *err)
{
        struct sbx_webhooks *webhooks = calloc(1, sizeof(*webhooks));
        if (webhooks == NULL) {
                sbx_error_set(err, ENOMEM, "webhooks: allocate");
                return NULL;
        }
        webhooks->api = api;
        pthread_mutex_init(&webhooks->lock, NULL);
        sbx_cond_init_monotonic(&webhooks->wake);
        for (size_t i = 0; i < SBX_WEBHOOK_SENDERS; i++) {
                int rc = pthread_create(&webhooks->senders[i], NULL, sender, webhooks);
                if (rc != 0) {
                        sbx_error_set(err, rc, "webhooks: start a sender");
                        sbx_webhooks_stop(webhooks);
                        return NULL;
                }
                webhooks->n_senders++;
        }
        return webhooks;
}

void sbx_webhooks_stop(struct sbx_webhooks *webhooks)
{
        if (webhooks == NULL)
                return;
        pthread_mutex_lock(&webhooks->lock);
        webhooks->stopping = true;
        pthread_cond_broadcast(&webhooks->wake);
        pthread_mutex_unlock(&webhooks->lock);
        for (size_t i = 0; i < webhooks->n_senders; i++)
                pthread_join(webhooks->senders[i], NULL);
        pthread_cond_destroy(&webhooks->wake);
        pthread_mutex_destroy(&webhooks->lock);
        free(webhooks);
}

void sbx_webhooks_wake(struct sbx_webhooks *webhooks)
{
        if (webhooks == NULL)
                return;
        pthread_mutex_lock(&webhooks->lock);
        pthread_cond_broadcast(&webhooks->wake);
        pthread_mutex_unlock(&webhooks->lock);
}

/* ---- Routes ---- */

static enum MHD_Result list_deliveries(struct sbx_api *api, struct MHD_Connection *connection,
                                       const struct sbx_tenant *tenant)
{
        const char *status =
                MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, "status");
        if (status != NULL && strcmp(status, "pending") != 0 && strcmp(status, "delivered") != 0 &&
            strcmp(status, "failed") != 0) {
                const struct sbx_problem_field field = {"status", "pending, delivered or failed"};
                return sbx_http_respond_problem(api, connection, 400,
                                                "status must be pending, delivered or failed",
                                                &field, 1, NULL, 0);
        }
        json_t *list = NULL;
        struct sbx_error err = {0};
        if (sbx_audit_deliveries_list(api->audit, tenant->name, status, 1000, &list, &err) < 0) {
                sbx_warn("webhooks: %s", err.message);
                return sbx_http_respond_store_failed(api, connection, "the audit store failed");
        }
        return sbx_http_respond_json(api, connection, 200, JSON_CONTENT_TYPE,
                                     json_pack("{s:o}", "deliveries", list), NULL, 0);
}

static enum MHD_Result retry_delivery(struct sbx_api *api, struct MHD_Connection *connection,
                                      const struct sbx_tenant *tenant, const char *id)
{
        struct sbx_error err = {0};
        int rc = sbx_audit_delivery_retry(api->audit, tenant->name, id,
                                          (int64_t)sbx_wall_clock_ms(), &err);
        if (rc < 0) {
                sbx_warn("webhooks: %s", err.message);
                return sbx_http_respond_store_failed(api, connection, "the audit store failed");
        }
        if (rc == 0)
                return sbx_http_respond_problem(api, connection, 404,
                                                "no failed delivery of that id", NULL, 0, NULL, 0);
        sbx_webhooks_wake(api->webhooks);
        return sbx_http_respond_json(api, connection, 202, JSON_CONTENT_TYPE,
                                     json_pack("{s:s, s:s}", "id", id, "status", "pending"), NULL,
                                     0);
}

enum MHD_Result sbx_webhooks_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_config *tenants, bool *handled)
{
        *handled = false;
        bool list = strcmp(url, DELIVERIES_PATH) == 0;
        const char *id = NULL;
        size_t id_len = 0;
        if (!list && strncmp(url, DELIVERIES_PATH "/", strlen(DELIVERIES_PATH) + 1) == 0) {
                id = url + strlen(DELIVERIES_PATH) + 1;
                const char *slash = strchr(id, '/');
                if (slash == NULL || strcmp(slash, "/retry") != 0 || slash == id)
                        return MHD_NO;
                id_len = (size_t)(slash - id);
        }
        if (!list && id == NULL)
                return MHD_NO;
        *handled = true;
        bool read = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        if (list && !read)
                return sbx_http_respond_method_not_allowed(api, connection, method, "GET, HEAD");
        if (!list && strcmp(method, MHD_HTTP_METHOD_POST) != 0)
                return sbx_http_respond_method_not_allowed(api, connection, method, "POST");
        const struct sbx_tenant *tenant = sbx_http_authenticate(connection, tenants);
        if (tenant == NULL)
                return sbx_http_respond_unauthorized(api, connection);
        if (list)
                return list_deliveries(api, connection, tenant);
        char copy[SBX_DELIVERY_ID_SIZE];
        if (id_len >= sizeof(copy))
                return sbx_http_respond_problem(api, connection, 404,
                                                "no failed delivery of that id", NULL, 0, NULL, 0);
        memcpy(copy, id, id_len);
        copy[id_len] = '\0';
        return retry_delivery(api, connection, tenant, copy);
}
