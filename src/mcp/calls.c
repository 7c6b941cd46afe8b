/* The tools/call requests under way (calls.h). */
#define _GNU_SOURCE
#include "mcp/calls.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Calls under way at once, on every transport of the process: a call holds a thread (stdio) or
 * a connection's thread (HTTP) while it runs. */
#define CALLS_MAX 256
#define OWNER_MAX 64

struct sbx_mcp_call {
        bool used;
        char owner[OWNER_MAX + 1];
        json_t *id;
        atomic_bool cancel;
};

static struct sbx_mcp_call calls[CALLS_MAX];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ended = PTHREAD_COND_INITIALIZER;

struct sbx_mcp_call *sbx_mcp_call_begin(const char *owner, const json_t *id)
{
        json_t *copy = json_deep_copy(id);
        if (copy == NULL)
                return NULL;
        pthread_mutex_lock(&lock);
        struct sbx_mcp_call *call = NULL;
        for (size_t i = 0; call == NULL && i < CALLS_MAX; i++)
                if (!calls[i].used)
                        call = &calls[i];
        if (call != NULL) {
                call->used = true;
                snprintf(call->owner, sizeof(call->owner), "%s", owner);
                call->id = copy;
                atomic_store(&call->cancel, false);
        }
        pthread_mutex_unlock(&lock);
        if (call == NULL)
                json_decref(copy);
        return call;
}

const atomic_bool *sbx_mcp_call_flag(const struct sbx_mcp_call *call)
{
        return &call->cancel;
}

bool sbx_mcp_call_canceled(const struct sbx_mcp_call *call)
{
        return atomic_load(&call->cancel);
}

void sbx_mcp_call_end(struct sbx_mcp_call *call)
{
        pthread_mutex_lock(&lock);
        json_decref(call->id);
        call->id = NULL;
        call->used = false;
        pthread_cond_broadcast(&ended);
        pthread_mutex_unlock(&lock);
}

void sbx_mcp_call_cancel(const char *owner, const json_t *id)
{
        if (id == NULL)
                return;
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < CALLS_MAX; i++)
                if (calls[i].used && strcmp(calls[i].owner, owner) == 0 &&
                    json_equal(calls[i].id, id))
                        atomic_store(&calls[i].cancel, true);
        pthread_mutex_unlock(&lock);
}

void sbx_mcp_calls_cancel_all(unsigned timeout_ms)
{
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&lock);
        for (;;) {
                bool running = false;
                for (size_t i = 0; i < CALLS_MAX; i++) {
                        if (calls[i].used)
                                atomic_store(&calls[i].cancel, true);
                        running |= calls[i].used;
                }
                if (!running || pthread_cond_timedwait(&ended, &lock, &deadline) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&lock);
}
