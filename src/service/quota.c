#include "service/quota.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "service/problem.h"
#include "service/quota_pg.h"
#include "util/log.h"

struct in_flight {
        uint64_t reservation;
        uint64_t lease; /* the fleet store's (quota_pg.h), 0 without one */
        uint64_t started_ms;
        uint64_t deadline_ms;
};

struct charge {
        uint64_t finished_ms;
        uint64_t cpu_ms;
};

struct tenant_quota {
        char *name;
        struct in_flight *in_flight; /* unordered; at most the tier's max_concurrency */
        size_t n_in_flight;
        size_t in_flight_capacity;
        struct charge *charges; /* oldest first, all within the window after expire_charges() */
        size_t n_charges;
        size_t charges_capacity;
        uint64_t charged_ms; /* sum of charges[].cpu_ms */
        uint64_t typical_ms; /* moving average of its executions' wall time; 0 = none yet */
};

struct sbx_quota {
        pthread_mutex_t lock;
        struct tenant_quota *tenants; /* looked up by name: a config has few tenants */
        size_t n_tenants;
        uint64_t last_reservation;
        uint64_t max_in_flight;     /* over all tenants; 0 = no bound */
        uint64_t in_flight;         /* over all tenants */
        uint64_t typical_ms;        /* as tenant_quota's, over all tenants */
        struct sbx_quota_pg *fleet; /* the tenants' limits are the store's; NULL: this one's */
        bool store_failing;         /* the last reservation found the store failing */
};

/* The weight of the newest observation in a moving average: 1/8, so that a change in what runs
 * shows within a few executions while one outlier moves it little. */
#define TYPICAL_WEIGHT 8

static uint64_t moving_average(uint64_t average, uint64_t observed)
{
        if (average == 0)
                return observed > 0 ? observed : 1;
        return (average * (TYPICAL_WEIGHT - 1) + observed) / TYPICAL_WEIGHT;
}

static uint64_t saturating_add(uint64_t a, uint64_t b)
{
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Whole seconds from now_ms until at_ms, rounded up, at least 1: "Retry-After: 0" would invite
 * a client to retry in a tight loop. */
static uint64_t seconds_until(uint64_t at_ms, uint64_t now_ms)
{
        if (at_ms <= now_ms || at_ms == UINT64_MAX) /* UINT64_MAX: nothing in flight to wait for */
                return 1;
        uint64_t seconds = (at_ms - now_ms + 999) / 1000;
        return seconds > 0 ? seconds : 1;
}

struct sbx_quota *sbx_quota_new(uint64_t max_in_flight)
{
        struct sbx_quota *quota = calloc(1, sizeof(*quota));
        if (quota == NULL)
                return NULL;
        pthread_mutex_init(&quota->lock, NULL);
        quota->max_in_flight = max_in_flight;
        return quota;
}

void sbx_quota_share(struct sbx_quota *quota, struct sbx_quota_pg *fleet)
{
        quota->fleet = fleet;
}

void sbx_quota_free(struct sbx_quota *quota)
{
        if (quota == NULL)
                return;
        for (size_t i = 0; i < quota->n_tenants; i++) {
                free(quota->tenants[i].name);
                free(quota->tenants[i].in_flight);
                free(quota->tenants[i].charges);
        }
        free(quota->tenants);
        pthread_mutex_destroy(&quota->lock);
        free(quota);
}

/* The tenant's state, created on first use; NULL when memory runs out (or create is false and
 * there is none). Called with the lock held. */
static struct tenant_quota *find_tenant(struct sbx_quota *quota, const char *name, bool create)
{
        for (size_t i = 0; i < quota->n_tenants; i++)
                if (strcmp(quota->tenants[i].name, name) == 0)
                        return &quota->tenants[i];
        if (!create)
                return NULL;
        char *copy = strdup(name);
        struct tenant_quota *tenants =
                copy ? reallocarray(quota->tenants, quota->n_tenants + 1, sizeof(*tenants)) : NULL;
        if (tenants == NULL) {
                free(copy);
                return NULL;
        }
        quota->tenants = tenants;
        struct tenant_quota *tenant = &tenants[quota->n_tenants++];
        *tenant = (struct tenant_quota){.name = copy};
        return tenant;
}

/* Drops the charges that left the window: a charge counts while now < finished + window. */
static void expire_charges(struct tenant_quota *tenant, uint64_t window_ms, uint64_t now_ms)
{
        size_t expired = 0;
        while (expired < tenant->n_charges &&
               saturating_add(tenant->charges[expired].finished_ms, window_ms) <= now_ms) {
                tenant->charged_ms -= tenant->charges[expired].cpu_ms;
                expired++;
        }
        if (expired == 0)
                return;
        tenant->n_charges -= expired;
        memmove(tenant->charges, tenant->charges + expired,
                tenant->n_charges * sizeof(*tenant->charges));
}

/* When the execution is expected to end (quota.h): after the typical wall time, never past its
 * deadline, and now when it is already over the typical time. */
static uint64_t expected_end(const struct in_flight *execution, uint64_t typical_ms,
                             uint64_t now_ms)
{
        if (typical_ms == 0)
                return execution->deadline_ms;
        uint64_t end = saturating_add(execution->started_ms, typical_ms);
        if (end < now_ms)
                end = now_ms;
        return end < execution->deadline_ms ? end : execution->deadline_ms;
}

/* When the first of the tenant's executions in flight is expected to end, or UINT64_MAX. */
static uint64_t first_end(const struct tenant_quota *tenant, uint64_t typical_ms, uint64_t now_ms)
{
        uint64_t earliest = UINT64_MAX;
        for (size_t i = 0; i < tenant->n_in_flight; i++) {
                uint64_t end = expected_end(&tenant->in_flight[i], typical_ms, now_ms);
                if (end < earliest)
                        earliest = end;
        }
        return earliest;
}

/* The same over every tenant, with the server-wide typical time. Called with the lock held. */
static uint64_t capacity_frees_at(const struct sbx_quota *quota, uint64_t now_ms)
{
        uint64_t earliest = UINT64_MAX;
        for (size_t i = 0; i < quota->n_tenants; i++) {
                uint64_t end = first_end(&quota->tenants[i], quota->typical_ms, now_ms);
                if (end < earliest)
                        earliest = end;
        }
        return earliest;
}

/* When enough of the oldest charges have left the window for the rest to be under budget. */
static uint64_t budget_frees_at(const struct tenant_quota *tenant, uint64_t budget_ms,
                                uint64_t window_ms)
{
        uint64_t remaining = tenant->charged_ms;
        for (size_t i = 0; i < tenant->n_charges; i++) {
                remaining -= tenant->charges[i].cpu_ms;
                if (remaining < budget_ms)
                        return saturating_add(tenant->charges[i].finished_ms, window_ms);
        }
        return 0; /* not reached while charged_ms >= budget_ms */
}

static int add_in_flight(struct tenant_quota *tenant, uint64_t reservation, uint64_t lease,
                         uint64_t now_ms, uint64_t deadline_ms)
{
        if (tenant->n_in_flight == tenant->in_flight_capacity) {
                size_t capacity = tenant->in_flight_capacity ? 2 * tenant->in_flight_capacity : 4;
                struct in_flight *grown = reallocarray(tenant->in_flight, capacity, sizeof(*grown));
                if (grown == NULL)
                        return -1;
                tenant->in_flight = grown;
                tenant->in_flight_capacity = capacity;
        }
        tenant->in_flight[tenant->n_in_flight++] = (struct in_flight){.reservation = reservation,
                                                                      .lease = lease,
                                                                      .started_ms = now_ms,
                                                                      .deadline_ms = deadline_ms};
        return 0;
}

/* The node's part once the tenant's own limits allowed the execution (lease: the fleet store's,
 * 0 without one): the server's capacity, then the execution is in flight. Called with the lock
 * held. */
static int admit(struct sbx_quota *quota, struct tenant_quota *state, uint64_t lease,
                 uint64_t wall_ms, uint64_t now_ms, struct sbx_quota_decision *decision,
                 struct sbx_error *err)
{
        if (quota->max_in_flight > 0 && quota->in_flight >= quota->max_in_flight) {
                decision->verdict = SBX_QUOTA_OVER_CAPACITY;
                decision->retry_after_s = seconds_until(capacity_frees_at(quota, now_ms), now_ms);
                return 0;
        }
        uint64_t reservation = ++quota->last_reservation;
        if (add_in_flight(state, reservation, lease, now_ms, saturating_add(now_ms, wall_ms)) != 0)
                return sbx_error_set(err, ENOMEM, "quota: tenant '%s'", state->name);
        quota->in_flight++;
        decision->reservation = reservation;
        return 0;
}

/* sbx_quota_reserve with a fleet's store: the tenant's limits are checked there, in one round
 * trip made without the lock held. */
static int reserve_shared(struct sbx_quota *quota, const struct sbx_tenant *tenant,
                          uint64_t wall_ms, uint64_t now_ms, struct sbx_quota_decision *decision,
                          struct sbx_error *err)
{
        pthread_mutex_lock(&quota->lock);
        struct tenant_quota *state = find_tenant(quota, tenant->name, true);
        uint64_t typical_ms = state ? state->typical_ms : 0;
        pthread_mutex_unlock(&quota->lock);
        if (state == NULL)
                return sbx_error_set(err, ENOMEM, "quota: tenant '%s'", tenant->name);
        uint64_t expected_ms = typical_ms > 0 && typical_ms < wall_ms ? typical_ms : wall_ms;
        enum sbx_quota_verdict verdict;
        uint64_t retry_after_ms = 0, lease = 0;
        struct sbx_error why = {0};
        if (sbx_quota_pg_reserve(quota->fleet, tenant, expected_ms, &verdict, &retry_after_ms,
                                 &lease, &why) < 0) {
                /* Once per outage, not once per refused request. */
                pthread_mutex_lock(&quota->lock);
                bool first = !quota->store_failing;
                quota->store_failing = true;
                pthread_mutex_unlock(&quota->lock);
                if (first)
                        sbx_warn("quota: the store failed, requests are refused with 503 until it "
                                 "answers again: %s",
                                 why.message);
                decision->verdict = SBX_QUOTA_STORE_UNAVAILABLE;
                decision->retry_after_s = 1;
                return 0;
        }
        int r = 0;
        pthread_mutex_lock(&quota->lock);
        bool recovered = quota->store_failing;
        quota->store_failing = false;
        if (verdict == SBX_QUOTA_ALLOWED) {
                /* find_tenant again: another tenant's first use may have moved the array. */
                state = find_tenant(quota, tenant->name, true);
                r = state ? admit(quota, state, lease, wall_ms, now_ms, decision, err)
                          : sbx_error_set(err, ENOMEM, "quota: tenant '%s'", tenant->name);
        }
        pthread_mutex_unlock(&quota->lock);
        if (recovered)
                sbx_info("quota: the store answers again");
        if (verdict != SBX_QUOTA_ALLOWED) {
                decision->verdict = verdict;
                decision->retry_after_s =
                        seconds_until(saturating_add(now_ms, retry_after_ms), now_ms);
        } else if (r < 0 || decision->verdict != SBX_QUOTA_ALLOWED) {
                sbx_quota_pg_release(quota->fleet, tenant->name, lease, 0);
        }
        return r;
}

int sbx_quota_reserve(struct sbx_quota *quota, const struct sbx_tenant *tenant, uint64_t wall_ms,
                      uint64_t now_ms, struct sbx_quota_decision *decision, struct sbx_error *err)
{
        const struct sbx_tier *tier = tenant->tier;
        uint64_t window_ms = tier->cpu_window_s * 1000;
        *decision = (struct sbx_quota_decision){.verdict = SBX_QUOTA_ALLOWED};
        if (quota->fleet != NULL)
                return reserve_shared(quota, tenant, wall_ms, now_ms, decision, err);
        int r = 0;
        pthread_mutex_lock(&quota->lock);
        struct tenant_quota *state = find_tenant(quota, tenant->name, true);
        if (state == NULL) {
                r = sbx_error_set(err, ENOMEM, "quota: tenant '%s'", tenant->name);
                goto out;
        }
        expire_charges(state, window_ms, now_ms);
        bool over_concurrency = state->n_in_flight >= tier->max_concurrency;
        bool over_budget = state->charged_ms >= tier->cpu_budget_ms;
        if (over_concurrency || over_budget) {
                uint64_t concurrency_at =
                        over_concurrency ? first_end(state, state->typical_ms, now_ms) : 0;
                uint64_t budget_at =
                        over_budget ? budget_frees_at(state, tier->cpu_budget_ms, window_ms) : 0;
                /* Capacity is back only when both constraints free; name the one that frees
                 * last, as it is the one the client is waiting for. */
                bool budget_binds =
                        over_budget && (!over_concurrency || budget_at > concurrency_at);
                decision->verdict =
                        budget_binds ? SBX_QUOTA_OVER_CPU_BUDGET : SBX_QUOTA_OVER_CONCURRENCY;
                decision->retry_after_s =
                        seconds_until(budget_binds ? budget_at : concurrency_at, now_ms);
                goto out;
        }
        r = admit(quota, state, 0, wall_ms, now_ms, decision, err);
out:
        pthread_mutex_unlock(&quota->lock);
        return r;
}

/* Appends a charge; one finishing in the same second as the newest merges into it, stamped
 * with the later time (it then leaves the window at most a second late, never early). */
static void add_charge(struct tenant_quota *state, uint64_t cpu_ms, uint64_t now_ms)
{
        if (cpu_ms == 0)
                return;
        struct charge *newest = state->n_charges ? &state->charges[state->n_charges - 1] : NULL;
        bool merge = newest != NULL && newest->finished_ms / 1000 == now_ms / 1000;
        if (!merge && state->n_charges == state->charges_capacity) {
                size_t capacity = state->charges_capacity ? 2 * state->charges_capacity : 16;
                struct charge *grown = reallocarray(state->charges, capacity, sizeof(*grown));
                if (grown != NULL) {
                        state->charges = grown;
                        state->charges_capacity = capacity;
                } else if (newest != NULL) {
                        merge = true; /* out of memory: late expiry beats a lost charge */
                } else {
                        return; /* nothing to fold into; the only loss is this one charge */
                }
        }
        if (merge) {
                newest->cpu_ms = saturating_add(newest->cpu_ms, cpu_ms);
                if (now_ms > newest->finished_ms)
                        newest->finished_ms = now_ms;
        } else {
                state->charges[state->n_charges++] =
                        (struct charge){.finished_ms = now_ms, .cpu_ms = cpu_ms};
        }
        state->charged_ms = saturating_add(state->charged_ms, cpu_ms);
}

void sbx_quota_release(struct sbx_quota *quota, const struct sbx_tenant *tenant,
                       uint64_t reservation, bool ran, uint64_t cpu_ms, uint64_t now_ms)
{
        uint64_t lease = 0;
        pthread_mutex_lock(&quota->lock);
        struct tenant_quota *state = find_tenant(quota, tenant->name, true);
        if (state != NULL) {
                for (size_t i = 0; i < state->n_in_flight; i++) {
                        struct in_flight *execution = &state->in_flight[i];
                        if (execution->reservation != reservation)
                                continue;
                        if (ran) {
                                uint64_t took = now_ms > execution->started_ms
                                                        ? now_ms - execution->started_ms
                                                        : 0;
                                state->typical_ms = moving_average(state->typical_ms, took);
                                quota->typical_ms = moving_average(quota->typical_ms, took);
                        }
                        lease = execution->lease;
                        *execution = state->in_flight[--state->n_in_flight];
                        quota->in_flight--;
                        break;
                }
                expire_charges(state, tenant->tier->cpu_window_s * 1000, now_ms);
                add_charge(state, cpu_ms, now_ms);
        }
        pthread_mutex_unlock(&quota->lock);
        if (quota->fleet != NULL)
                sbx_quota_pg_release(quota->fleet, tenant->name, lease, cpu_ms);
}

void sbx_quota_charge(struct sbx_quota *quota, const char *tenant_name, uint64_t cpu_ms,
                      uint64_t now_ms)
{
        pthread_mutex_lock(&quota->lock);
        struct tenant_quota *state = find_tenant(quota, tenant_name, true);
        if (state != NULL)
                add_charge(state, cpu_ms, now_ms); /* old charges leave at the next check */
        pthread_mutex_unlock(&quota->lock);
        if (quota->fleet != NULL)
                sbx_quota_pg_release(quota->fleet, tenant_name, 0, cpu_ms);
}

uint64_t sbx_quota_capacity_retry_after(struct sbx_quota *quota, uint64_t now_ms)
{
        pthread_mutex_lock(&quota->lock);
        uint64_t at = capacity_frees_at(quota, now_ms);
        pthread_mutex_unlock(&quota->lock);
        return seconds_until(at, now_ms);
}

void sbx_quota_usage(struct sbx_quota *quota, const struct sbx_tenant *tenant, uint64_t now_ms,
                     struct sbx_quota_usage *usage)
{
        *usage = (struct sbx_quota_usage){0};
        pthread_mutex_lock(&quota->lock);
        struct tenant_quota *state = find_tenant(quota, tenant->name, false);
        if (state != NULL) {
                expire_charges(state, tenant->tier->cpu_window_s * 1000, now_ms);
                usage->in_flight = state->n_in_flight;
                usage->cpu_ms_in_window = state->charged_ms;
        }
        pthread_mutex_unlock(&quota->lock);
}

const char *sbx_quota_verdict_text(enum sbx_quota_verdict verdict)
{
        switch (verdict) {
        case SBX_QUOTA_ALLOWED:
                return "allowed";
        case SBX_QUOTA_OVER_CONCURRENCY:
                return "the tenant has its tier's maximum of runs in progress";
        case SBX_QUOTA_OVER_CPU_BUDGET:
                return "the tenant used its CPU budget for the window";
        case SBX_QUOTA_OVER_CAPACITY:
                return "the server runs its maximum of executions";
        case SBX_QUOTA_STORE_UNAVAILABLE:
                return "the fleet's store (PostgreSQL) cannot be reached; nothing was run";
        }
        return "refused";
}

const char *sbx_quota_verdict_slug(enum sbx_quota_verdict verdict)
{
        switch (verdict) {
        case SBX_QUOTA_OVER_CAPACITY:
                return SBX_PROBLEM_AT_CAPACITY;
        case SBX_QUOTA_STORE_UNAVAILABLE:
                return SBX_PROBLEM_STORE_UNAVAILABLE;
        default:
                return NULL;
        }
}

const char *sbx_quota_verdict_name(enum sbx_quota_verdict verdict)
{
        switch (verdict) {
        case SBX_QUOTA_ALLOWED:
                return "allowed";
        case SBX_QUOTA_OVER_CONCURRENCY:
                return "concurrency";
        case SBX_QUOTA_OVER_CPU_BUDGET:
                return "cpu_budget";
        case SBX_QUOTA_OVER_CAPACITY:
                return "capacity";
        case SBX_QUOTA_STORE_UNAVAILABLE:
                return "store";
        }
        return "unknown";
}
