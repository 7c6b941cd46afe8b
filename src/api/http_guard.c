/* The HTTP server's slow-client guard (http_guard.h). */
#define _GNU_SOURCE
#include "api/http_guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "util/log.h"
#include "util/time.h"

/* How often the watch thread looks: a slow head is cut within this after its deadline. */
#define GUARD_TICK_MS 500

/* One open connection, listed from the moment it is accepted until libmicrohttpd closes it. */
struct watched {
        struct watched *prev, *next;
        struct sbx_http_guard *guard;
        int fd;
        bool in_request;           /* a request head arrived; its request has not finished */
        bool cut;                  /* shut down by the guard */
        uint64_t waiting_since_us; /* when the wait for the next request head began */
};

struct sbx_http_guard {
        pthread_mutex_t lock; /* the list and every entry's fields */
        pthread_cond_t stop_cond;
        bool stopping;
        struct watched *head;
        pthread_t thread;
};

static void *watch(void *arg)
{
        struct sbx_http_guard *guard = arg;
        pthread_mutex_lock(&guard->lock);
        while (!guard->stopping) {
                uint64_t now = sbx_now_us();
                for (struct watched *w = guard->head; w != NULL; w = w->next) {
                        if (w->in_request || w->cut ||
                            now - w->waiting_since_us < SBX_HTTP_HEADER_TIMEOUT_S * 1000000ull)
                                continue;
                        /* Under the lock: the CLOSED notification removes the entry under it
                         * too, before libmicrohttpd closes the fd, so the fd is still this
                         * connection's. The connection's thread then reads end of file. */
                        shutdown(w->fd, SHUT_RDWR);
                        w->cut = true;
                        sbx_debug("http: closed a connection that sent no request head within "
                                  "%d s",
                                  SBX_HTTP_HEADER_TIMEOUT_S);
                }
                struct timespec until;
                clock_gettime(CLOCK_MONOTONIC, &until);
                until.tv_nsec += GUARD_TICK_MS * 1000000L;
                if (until.tv_nsec >= 1000000000L) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&guard->stop_cond, &guard->lock, &until);
        }
        pthread_mutex_unlock(&guard->lock);
        return NULL;
}

struct sbx_http_guard *sbx_http_guard_start(struct sbx_error *err)
{
        struct sbx_http_guard *guard = calloc(1, sizeof(*guard));
        if (guard == NULL) {
                sbx_error_set(err, ENOMEM, "http guard: allocate");
                return NULL;
        }
        pthread_mutex_init(&guard->lock, NULL);
        sbx_cond_init_monotonic(&guard->stop_cond);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&guard->thread, NULL, watch, guard);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
                pthread_cond_destroy(&guard->stop_cond);
                pthread_mutex_destroy(&guard->lock);
                free(guard);
                sbx_error_set(err, rc, "http guard: start its thread");
                return NULL;
        }
        return guard;
}

void sbx_http_guard_stop(struct sbx_http_guard *guard)
{
        if (guard == NULL)
                return;
        pthread_mutex_lock(&guard->lock);
        guard->stopping = true;
        pthread_cond_signal(&guard->stop_cond);
        pthread_mutex_unlock(&guard->lock);
        pthread_join(guard->thread, NULL);
        while (guard->head != NULL) { /* none after MHD_stop_daemon; freed all the same */
                struct watched *w = guard->head;
                guard->head = w->next;
                free(w);
        }
        pthread_cond_destroy(&guard->stop_cond);
        pthread_mutex_destroy(&guard->lock);
        free(guard);
}

/* The connection's entry, or NULL (its STARTED notification found no memory). */
static struct watched *watched_of(struct MHD_Connection *connection)
{
        const union MHD_ConnectionInfo *info =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return info != NULL ? info->socket_context : NULL;
}

void sbx_http_guard_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                           enum MHD_ConnectionNotificationCode code)
{
        struct sbx_http_guard *guard = cls;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *info =
                        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
                struct watched *w = info != NULL ? calloc(1, sizeof(*w)) : NULL;
                *socket_context = w;
                if (w == NULL)
                        return; /* unguarded: the idle timeout still applies */
                w->guard = guard;
                w->fd = info->connect_fd;
                w->waiting_since_us = sbx_now_us();
                pthread_mutex_lock(&guard->lock);
                w->next = guard->head;
                if (guard->head != NULL)
                        guard->head->prev = w;
                guard->head = w;
                pthread_mutex_unlock(&guard->lock);
                return;
        }
        struct watched *w = *socket_context;
        if (w == NULL)
                return;
        pthread_mutex_lock(&guard->lock);
        if (w->prev != NULL)
                w->prev->next = w->next;
        else
                guard->head = w->next;
        if (w->next != NULL)
                w->next->prev = w->prev;
        pthread_mutex_unlock(&guard->lock);
        free(w);
        *socket_context = NULL;
}

void sbx_http_guard_request_started(struct MHD_Connection *connection)
{
        struct watched *w = watched_of(connection);
        if (w == NULL)
                return;
        pthread_mutex_lock(&w->guard->lock);
        w->in_request = true;
        pthread_mutex_unlock(&w->guard->lock);
}

void sbx_http_guard_request_finished(struct MHD_Connection *connection)
{
        struct watched *w = watched_of(connection);
        if (w == NULL)
                return;
        pthread_mutex_lock(&w->guard->lock);
        w->in_request = false;
        w->waiting_since_us = sbx_now_us();
        pthread_mutex_unlock(&w->guard->lock);
}
