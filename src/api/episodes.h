/* RL episodes over HTTP (DESIGN.md "Long-lived sandboxes", issue 15): a Gymnasium-shaped
 * environment living in a python session's sandbox, whose interpreter imports the user's module
 * once and answers reset, step and close (guest/session_agent.py); a step is one message round
 * trip into it, never a new sandbox.
 *
 *   POST   /v1/episodes                open {code | files + entrypoint, env_class, seed, options,
 *                                      limits, step_timeout_ms, max_steps, idle_timeout_s,
 *                                      max_lifetime_s, count} -> 201 with the first observation
 *                                      (count K: K environments, seeds seed + i, all or none)
 *   GET    /v1/episodes                this tenant's episodes
 *   POST   /v1/episodes/step           {steps: [{id, action}, ...]}: many episodes in one round
 *                                      trip, side by side; each answers on its own
 *   GET    /v1/episodes/{id}           its state, steps and total reward
 *   POST   /v1/episodes/{id}/step      {action} -> {observation, reward, terminated, truncated,
 *                                      info, step, ...}
 *   POST   /v1/episodes/{id}/reset     {seed, options} -> {observation, info}
 *   DELETE /v1/episodes/{id}           calls the environment's close() and ends the sandbox
 *   PUT|GET|DELETE /v1/episodes/{id}/files/{path}, GET /v1/episodes/{id}/files?path=
 *
 * An episode is an entry of the registry of sessions (api/session_registry.h) of its own kind:
 * the tier's max_episodes open at once per tenant, the server's max_sessions with sessions. A
 * step counts against max_concurrency while it runs and its CPU (the sandbox's cgroup, as a
 * delta) is charged to the CPU budget; steps are counted in metrics, the episode's start and end
 * (with its steps, total reward and CPU) in the audit store's sessions table.
 *
 * Outcomes: an exception in the environment answers status "error" with {name, value,
 * traceback}, and the episode is "failed" until a reset; a step past step_timeout_ms answers
 * status "timeout" and ends the episode; a step after terminated or truncated, or past
 * max_steps, is refused (409) until a reset. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/http.h"
#include "service/config.h"

/* Whether the request carries a body the route reads. */
bool sbx_episodes_route_reads_body(const char *url, const char *method);

/* A request under /v1/episodes: answered, with *handled true; *handled false for any other url.
 * As sbx_sessions_route. */
enum MHD_Result sbx_episodes_route(struct sbx_api *api, struct MHD_Connection *connection,
                                   const char *url, const char *method,
                                   const struct sbx_config *tenants, const void *body,
                                   size_t body_len, bool body_too_large, bool *handled);
