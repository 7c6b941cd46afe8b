/* Tiers and tenants replaced while serving (live_config.h). */
#include "api/live_config.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* One loaded configuration and the requests holding it. */
struct snapshot {
        struct sbx_config config; /* first: a held config pointer is its snapshot's */
        unsigned holders;         /* requests, plus 1 while it is current or the initial one */
};

struct sbx_live_config {
        pthread_mutex_t lock; /* current and every snapshot's holders */
        struct snapshot *initial;
        struct snapshot *current;
        bool has_local;
        uint8_t local_sha256[SBX_SHA256_SIZE];
        struct sbx_metrics *metrics;
};

static struct snapshot *snapshot_of(const struct sbx_config *config)
{
        return (struct snapshot *)((char *)config - offsetof(struct snapshot, config));
}

static void snapshot_free(struct snapshot *snapshot)
{
        sbx_config_free(&snapshot->config);
        free(snapshot);
}

/* Drops one holder; called with the lock held. */
static void drop(struct snapshot *snapshot)
{
        if (--snapshot->holders == 0)
                snapshot_free(snapshot);
}

struct sbx_live_config *sbx_live_config_new(struct sbx_config *config, const uint8_t *local_sha256,
                                            struct sbx_metrics *metrics)
{
        struct sbx_live_config *live = calloc(1, sizeof(*live));
        struct snapshot *initial = calloc(1, sizeof(*initial));
        if (live == NULL || initial == NULL) {
                free(live);
                free(initial);
                return NULL;
        }
        pthread_mutex_init(&live->lock, NULL);
        initial->config = *config;
        *config = (struct sbx_config){0};
        initial->holders = 2; /* initial and current */
        live->initial = live->current = initial;
        live->metrics = metrics;
        if (local_sha256 != NULL) {
                live->has_local = true;
                memcpy(live->local_sha256, local_sha256, SBX_SHA256_SIZE);
        }
        return live;
}

void sbx_live_config_free(struct sbx_live_config *live)
{
        if (live == NULL)
                return;
        pthread_mutex_lock(&live->lock);
        drop(live->current);
        drop(live->initial);
        pthread_mutex_unlock(&live->lock);
        pthread_mutex_destroy(&live->lock);
        free(live);
}

const struct sbx_config *sbx_live_config_initial(const struct sbx_live_config *live)
{
        return &live->initial->config;
}

const struct sbx_config *sbx_live_config_acquire(struct sbx_live_config *live)
{
        pthread_mutex_lock(&live->lock);
        struct snapshot *current = live->current;
        current->holders++;
        pthread_mutex_unlock(&live->lock);
        return &current->config;
}

void sbx_live_config_hold(struct sbx_live_config *live, const struct sbx_config *snapshot)
{
        pthread_mutex_lock(&live->lock);
        snapshot_of(snapshot)->holders++;
        pthread_mutex_unlock(&live->lock);
}

void sbx_live_config_release(struct sbx_live_config *live, const struct sbx_config *snapshot)
{
        if (snapshot == NULL)
                return;
        pthread_mutex_lock(&live->lock);
        drop(snapshot_of(snapshot));
        pthread_mutex_unlock(&live->lock);
}

/* Whether the keys a reload does not apply differ; names the first that does. */
static const char *restart_key_changed(const struct sbx_config *a, const struct sbx_config *b)
{
        const struct sbx_server_config *x = &a->server, *y = &b->server;
        if (strcmp(x->listen, y->listen) != 0)
                return "[server] listen";
        if (strcmp(x->data_dir, y->data_dir) != 0)
                return "[server] data_dir";
        if (x->api_uid != y->api_uid || x->max_body_bytes != y->max_body_bytes ||
            x->max_sandboxes != y->max_sandboxes || x->shutdown_grace_s != y->shutdown_grace_s ||
            x->store_output != y->store_output || x->max_connections != y->max_connections ||
            x->max_connections_per_ip != y->max_connections_per_ip ||
            x->metrics_token_required != y->metrics_token_required ||
            memcmp(x->metrics_token_sha256, y->metrics_token_sha256, SBX_SHA256_SIZE) != 0)
                return "[server]";
        if (a->n_pools != b->n_pools || memcmp(a->pools, b->pools, sizeof(a->pools)) != 0)
                return "[pool.*]";
        return NULL;
}

int sbx_live_config_reload(struct sbx_live_config *live, const char *text, size_t size,
                           const char *name, struct sbx_error *err)
{
        struct snapshot *next = calloc(1, sizeof(*next));
        if (next == NULL)
                return sbx_error_set(err, ENOMEM, "reload: allocate");
        if (sbx_config_load_buffer(text, size, name, &next->config, err) < 0 ||
            (live->has_local && next->config.n_tenants == 0 &&
             sbx_config_add_local_tenant(&next->config, live->local_sha256, err) < 0)) {
                free(next);
                return -1;
        }
        for (size_t i = 0; live->metrics != NULL && i < next->config.n_tenants; i++) {
                if (sbx_metrics_add_tenant(live->metrics, next->config.tenants[i].name, err) < 0) {
                        snapshot_free(next);
                        return -1;
                }
        }
        const char *changed = restart_key_changed(&live->initial->config, &next->config);
        if (changed != NULL)
                sbx_warn("reload: %s changed in %s: it takes effect at the next start", changed,
                         name);
        next->holders = 1;
        pthread_mutex_lock(&live->lock);
        struct snapshot *previous = live->current;
        live->current = next;
        drop(previous); /* freed once its last request ends */
        pthread_mutex_unlock(&live->lock);
        sbx_info("reload: %zu tier(s) and %zu tenant(s) from %s", next->config.n_tiers,
                 next->config.n_tenants, name);
        return 0;
}
