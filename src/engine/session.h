/* A session (DESIGN.md "Long-lived sandboxes"): a sandbox with every layer of a cold one, kept
 * for many runs, whose program is the session agent (guest/session_agent.py): a persistent
 * Python interpreter or bash shell. The session drives it over frames (session_frame.h): a run
 * sends the code and collects the run's output, rich results and error; file operations go
 * through the agent, inside the sandbox.
 *
 * Caps hold for the session's life (memory, pids, CPU bandwidth, disk); each run has its own
 * deadline and output cap. A run past its deadline (or canceled) is interrupted (SIGINT to the
 * agent's keeper), and when it does not stop within SBX_SESSION_INTERRUPT_GRACE_MS the
 * interpreter is restarted (files kept); an interpreter killed by the memory cap is restarted
 * the same way. A session whose agent is gone is dead: every call then fails, and close ends it.
 *
 * One thread drives a session: calls do not overlap. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/limits.h"
#include "model/request.h"
#include "util/error.h"

/* How long an interrupted run may take to stop before the interpreter is restarted. */
#define SBX_SESSION_INTERRUPT_GRACE_MS 2000

/* How long the agent may take to say it is ready (at open, after a restart). */
#define SBX_SESSION_READY_TIMEOUT_MS 10000

/* The most rich results a run returns, and their total size; beyond them results are dropped
 * and the run's "results_truncated" says so. */
#define SBX_SESSION_MAX_RESULTS       64
#define SBX_SESSION_MAX_RESULTS_BYTES (16u * 1024u * 1024u)

struct sbx_session;

struct sbx_session_options {
        const char *language; /* "python" or "bash" */
        /* The caps for the session's life; wall_ms and output_bytes are each run's defaults,
         * cpu_ms is not a per-process limit here (a run's CPU is measured as a delta). */
        struct sbx_limits limits;
        const char *const *env; /* "NAME=value" (sbx_request_env_valid), for the whole session */
        size_t n_env;
        const struct sbx_file *files; /* put into /workspace before the agent starts */
        size_t n_files;
        const char *backend; /* NULL: the default */
};

/* Whether language has a session agent. */
bool sbx_session_language_supported(const char *language);

/* Creates the sandbox and starts the agent; returns when it is ready. */
int sbx_session_open(const struct sbx_session_options *options, struct sbx_session **out,
                     struct sbx_error *err);

/* The least memory cap a session opened ahead of time can be given: its agent's keeper and idle
 * interpreter already use it (a smaller cap would kill them at once); likewise the least pids
 * cap: its processes (init, keeper, interpreter, bash's shell) and room to restart one. */
#define SBX_SESSION_ADOPT_MIN_MEMORY_BYTES (64ull << 20)
#define SBX_SESSION_ADOPT_MIN_PIDS         8

/* Whether a session opened ahead of time could become the one options describe (its language
 * aside): no environment, the default disk, a memory and a pids cap it fits under. */
bool sbx_session_adoptable(const struct sbx_session_options *options);

/* Makes session, opened ahead of time with sbx_session_open_waiting, the one options describe:
 * its caps become options' (the cgroup's and every process's rlimits), its evidence counts from
 * now, and options' files are put into /workspace. Refused (EINVAL, nothing changed) for
 * another language or what sbx_session_adoptable refuses (an environment: the interpreter
 * started without it; another disk size than the default: its tmpfs has its size; caps it does
 * not fit under), and (EPIPE) when its agent did anything while it waited: the caller opens a
 * session of its own then. -1 with err otherwise too; the session may then be half-adopted:
 * close it. */
int sbx_session_adopt(struct sbx_session *session, const struct sbx_session_options *options,
                      struct sbx_error *err);

/* Opens a session of language to wait for sbx_session_adopt: the default disk, and no caps it
 * could not be given later (no memory or pids cap; rlimits can only be lowered). */
int sbx_session_open_waiting(const char *language, struct sbx_session **out, struct sbx_error *err);

struct sbx_session_run_request {
        const char *id; /* the run's id (SBX_EXECUTION_ID_CHARS lowercase hex); NULL: a new one */
        /* NULL: a run of code. Else an episode's operation (SBX_SESSION_EPISODE_OPS) instead,
         * its frame op_fields' members besides "op" (borrowed; code and env unused). It ends as
         * a run does, and its result has the agent's answer as "value". */
        const char *op;
        const json_t *op_fields;
        const char *code;
        size_t code_size;
        const void *stdin_data;
        size_t stdin_size;
        const char *const *env; /* "NAME=value" for this run only */
        size_t n_env;
        uint64_t timeout_ms; /* 0: the session's wall_ms */
        /* CLOCK_MONOTONIC (sbx_now_us) by which the run is interrupted whatever its timeout (the
         * session's lifetime ends then; status timeout); 0 for none. */
        uint64_t not_after_us;
        int cancel_fd; /* readable = interrupt the run (status canceled); <= 0 for none */
        /* NULL, or asked when cancel_fd turns readable: whether what came cancels this run (it
         * reads cancel_fd; a cancel meant for an earlier run that arrives late must not). */
        bool (*canceled)(void *ctx);
        void *cancel_ctx;
        /* Streaming, NULL for none: called as the run goes with "stdout" or "stderr" and
         * {"text"} (what the output cap keeps, batched: at most SBX_SESSION_STREAM_BATCH bytes
         * or SBX_SESSION_STREAM_DELAY_MS late, cut at UTF-8 character boundaries), "result" and
         * a MIME bundle (after the output printed before it), "error" and the run's error. The
         * payload is borrowed for the call. */
        void (*on_event)(void *ctx, const char *event, const json_t *payload);
        void *event_ctx;
};

#define SBX_SESSION_STREAM_BATCH    4096
#define SBX_SESSION_STREAM_DELAY_MS 5

/* The most an episode operation's value may take, as compact JSON: past it the operation
 * answers an error instead (the API holds a batch's answers together). */
#define SBX_SESSION_MAX_VALUE_BYTES (1024u * 1024u)

/* The operations an episode's environment answers (guest/session_agent.py, python only):
 * "reset" {entrypoint, env_class, seed, options}, "step" {action}, "close" {}, each with an
 * optional "index" (the environment's, in an interpreter that holds several: a shared
 * sandbox's episodes); and "batch" {ops: [operations with their "op"]}, whose value is their
 * answers in order, [{value} or {error}]. */
bool sbx_session_episode_op(const char *op);

/* Runs code. Returns the run's result as a JSON object (a new reference) with id,
 * execution_count, status (ok, error, exit_nonzero, timeout, memory_limit, pids_limit,
 * output_limit, disk_full, canceled, internal_error), stdout, stderr, truncated, results,
 * results_truncated, error, exit_code, restarted, usage, evidence and timing (and an episode
 * operation's value); NULL with err when
 * the session could not run it (dead: the result would be internal_error, and the session must
 * be closed). */
json_t *sbx_session_run(struct sbx_session *session, const struct sbx_session_run_request *request,
                        struct sbx_error *err);

/* File operations, between runs. path is relative to /workspace or absolute under it. Errors:
 * EINVAL (the path leaves /workspace, or names what the operation cannot use), ENOENT, ENOSPC
 * (the disk cap), EFBIG (a file over max_size); EPIPE and others: the session is dead. */
int sbx_session_put(struct sbx_session *session, const char *path, const void *data, size_t size,
                    unsigned mode, struct sbx_error *err);
/* *data is malloc'ed (free it). */
int sbx_session_get(struct sbx_session *session, const char *path, size_t max_size, void **data,
                    size_t *size, struct sbx_error *err);
/* A JSON array of {name, type, size, mtime, mode} (a new reference), or NULL with err. */
json_t *sbx_session_list(struct sbx_session *session, const char *path, struct sbx_error *err);
int sbx_session_delete(struct sbx_session *session, const char *path, struct sbx_error *err);

/* Whether the session can still run code (its agent is alive). */
bool sbx_session_alive(const struct sbx_session *session);

/* The kernel's counters for the whole session so far (usage at close). */
int sbx_session_evidence(struct sbx_session *session, json_t **evidence, struct sbx_error *err);

/* Ends the session: the sandbox and everything in it are destroyed. NULL is a no-op. */
void sbx_session_close(struct sbx_session *session);
