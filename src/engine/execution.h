/* One execution, start to end: pick the backend, resolve the language, create the sandbox,
 * start it, supervise it, read the evidence, tear it down, decide the status, time every phase. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "model/request.h"
#include "model/result.h"
#include "sandbox/sandbox.h"
#include "util/error.h"

/* Runs the request. Returns 0 whenever result was filled, including status internal_error when
 * sandboxd failed to set up (the program never ran); -1 with err only for a request that cannot
 * be run at all (unknown language or backend, or refused by sbx_request_check). Free the result
 * with sbx_result_free(). */
int sbx_execute(const struct sbx_request *request, struct sbx_result *result,
                struct sbx_error *err);

/* ---- Warm pools (DESIGN.md "Warm pools") ----
 * A pool entry is a sandbox that finished every setup step and waits for one execution: in the
 * language's loader (guest/: python, node), whose interpreter has started already, or, for every
 * other language, in an exec entry, whose init starts the program when the execution comes.
 * Creating one pays for namespaces, mounts (and the interpreter's start-up) while no client
 * waits; executing it applies the request's limits, delivers the files and lets the program run,
 * exactly as a cold run would. One use, then the sandbox is destroyed. */
struct sbx_pool_entry;

/* Whether language can have a warm pool (every known one can). */
bool sbx_pool_supports(const char *language);

/* Whether request can run in a pool entry: a known language its backend has entries for
 * (sbx_backend_pools_language), the pool's disk size, no test hooks; for a loader's language also a
 * memory cap its waiting interpreter fits under (32 MiB for python, 96 MiB for node) and no PYTHON*
 * or NODE_* variables (they act at interpreter start-up); on the uml backend a memory cap and at
 * most 256 KiB of code, files and stdin, which reach the guest through a console (and an entry
 * whose guest's RAM fits the cap: sbx_pool_guest_memory_bytes). Others run cold. */
bool sbx_pool_request_eligible(const struct sbx_request *request);

/* The memory cap a uml entry's guest boots with (its RAM cannot grow: the pool's key): configured,
 * or the built-in default when that is 0; 0 for the other backends, whose entries take the
 * request's cap when they are taken. */
uint64_t sbx_pool_guest_memory_bytes(const char *backend, uint64_t configured);

/* Creates and starts a pool entry for language on backend (NULL = native), a uml guest with the
 * RAM of sbx_pool_guest_memory_bytes(backend, memory_bytes); a python entry of
 * the native backend is forked from the template at python_template_fd when it is > 0. test:
 * the entry's test hooks (NULL: none), which a request must then have exactly (sandboxd run
 * --pooled --template: an entry made for one run). */
int sbx_pool_entry_create(const char *language, const char *backend, uint64_t memory_bytes,
                          int python_template_fd, const struct sbx_test_hooks *test,
                          struct sbx_pool_entry **out, struct sbx_error *err);

/* sbx_execute, but a python request a pool entry could run runs in a sandbox forked from the
 * template at python_template_fd (> 0), made for it at once, rather than in one that execs a
 * new interpreter; result->pooled stays false, the making is its setup. */
int sbx_execute_with_template(const struct sbx_request *request, int python_template_fd,
                              struct sbx_result *result, struct sbx_error *err);

/* Runs request in entry, which it consumes (destroyed afterwards, also on failure): an eligible
 * request of the entry's backend. Returns like sbx_execute; result->pooled is true. */
int sbx_pool_entry_execute(struct sbx_pool_entry *entry, const struct sbx_request *request,
                           struct sbx_result *result, struct sbx_error *err);

/* Destroys an entry that will not run anything. NULL is a no-op. */
void sbx_pool_entry_destroy(struct sbx_pool_entry *entry);
