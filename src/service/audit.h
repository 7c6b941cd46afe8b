/* The audit store: one row per execution, read back by GET /v1/executions/{id}, in a node's own
 * SQLite (<data_dir>/audit.db) or a fleet's PostgreSQL ([store] url: sbx_audit_open_shared; the
 * statements are one text for both, service/sql.h).
 *
 * A row is written in two steps, so that an execution that starts always leaves one, whatever
 * fails later: sbx_audit_begin() before the execution is handed to the engine (status
 * "running", the request and its settings), sbx_audit_finish() with its outcome. A row whose
 * execution was refused before it started is removed (sbx_audit_forget); one still running when
 * the API process died is completed at the next start, from the engine's spool when the engine
 * kept the result there, else as internal_error (sbx_audit_interrupt_running).
 *
 * SQLite runs in WAL mode so that a reader (an operator's sqlite3 shell, a backup) never
 * blocks the server's writes, with synchronous=NORMAL (in WAL mode a power cut can lose the last
 * commits but never corrupts the file; an audit row is not worth an fsync per request) and a busy
 * timeout so that a short outside lock delays a write instead of failing it. The schema is
 * versioned by PRAGMA user_version and migrated at open by a fixed list of steps (audit.c), all
 * in one transaction: a database is either fully at the new version or untouched.
 *
 * Privilege separation: the API process opens the store while still root and keeps using the
 * open connection after dropping to its unprivileged uid. The file is created with mode 0600
 * (SQLite gives the -wal and -shm files the same mode and owner), so no other local user can
 * read tenants' requests.
 *
 * Thread-safe: SQLite's one connection and its prepared statements, guarded by a mutex (the HTTP
 * server runs a thread per connection; an insert takes well under a millisecond), or a
 * connection of PostgreSQL's pool per call. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "model/result.h"
#include "service/auth.h"
#include "util/error.h"

/* The database file inside the data directory. */
#define SBX_AUDIT_FILE_NAME "audit.db"

/* Size of a SHA-256 digest in lowercase hex, with the terminating NUL. */
#define SBX_AUDIT_SHA256_HEX_SIZE (SBX_SHA256_HEX_SIZE + 1)

/* The schema version a store has after sbx_audit_open() (PRAGMA user_version). */
#define SBX_AUDIT_SCHEMA_VERSION 9

/* The status of a row whose execution has begun and not ended (yet). */
#define SBX_AUDIT_STATUS_RUNNING "running"

/* The status of an asynchronous execution's row while it waits in the queue (audit_queue.h). */
#define SBX_AUDIT_STATUS_QUEUED "queued"

/* A fleet's store: the channel an enqueue NOTIFYs, which every node's queue LISTENs to. */
#define SBX_AUDIT_QUEUE_CHANNEL "sandboxd_queue"

struct sbx_audit;

/* One execution. Everything is borrowed for the duration of the call. sbx_audit_begin() reads
 * the fields up to clamped; sbx_audit_finish() reads id and the fields from finished_at_ms on
 * (and effective, which the engine's result confirms). */
struct sbx_audit_record {
        const char *id;        /* the execution id (32 hex characters); the primary key */
        const char *tenant;    /* who ran it; fetches only ever see their own tenant's rows */
        int64_t created_at_ms; /* request accepted, milliseconds since the Unix epoch */
        const char *language;
        const json_t *requested; /* the request as received (after validation) */
        const json_t *effective; /* the effective limits after defaults and clamping */
        const json_t *clamped;   /* array of the limit names that were clamped */
        /* The outcome. */
        int64_t finished_at_ms; /* result known, milliseconds since the Unix epoch */
        const char *status;     /* sbx_status_name() */
        int exit_code;          /* -1 when the program did not exit normally: stored as NULL */
        int signal;             /* 0 unless killed by a signal: stored as NULL */
        const char *error;      /* what failed (internal_error) or why it stopped (canceled) */
        /* JSON columns, stored as compact text (json_dumps); NULL is stored as NULL. */
        const json_t *usage;
        const json_t *evidence;
        const json_t *timing;
        /* The program's output as raw bytes. Their sizes and SHA-256 are always stored; the
         * bytes themselves only when store_output (config server.store_output). */
        const void *stdout_data;
        size_t stdout_size;
        const void *stderr_data;
        size_t stderr_size;
        bool store_output;
        /* A compiled language's compile stage as JSON (NULL: none), its output already left out
         * when store_output is false. */
        const json_t *compile;
};

/* Opens (creating it if needed) <directory>/audit.db: creates the file with mode 0600 without
 * following a symlink (an existing file gets its mode forced to 0600), turns on WAL,
 * busy_timeout 5000 ms and synchronous=NORMAL, and migrates the schema to
 * SBX_AUDIT_SCHEMA_VERSION. Fails (NULL with err) when the directory is missing, the file is not
 * a regular file, it is not a SQLite database, or its schema is newer than this build knows.
 * Close with sbx_audit_close(). */
struct sbx_audit *sbx_audit_open(const char *directory, struct sbx_error *err);

/* The store in a fleet's PostgreSQL (service/pg.h's connections, borrowed: they outlive it; pg.c
 * migrated the schema), as the node called node: the executions it begins and the sessions it
 * opens are this node's, and its start ends only its own (sbx_audit_interrupt_running,
 * sbx_audit_end_open_sessions, sbx_audit_queue_recover); sbx_audit_reap ends those of nodes that
 * died. The same calls as a node's own store, with the same meaning. */
struct sbx_pg;
struct sbx_audit *sbx_audit_open_shared(struct sbx_pg *pg, const char *node, struct sbx_error *err);

/* Whether the store is a fleet's (sbx_audit_open_shared). */
bool sbx_audit_shared(const struct sbx_audit *audit);

/* Closes the store. NULL is a no-op. No other thread may still use it. */
void sbx_audit_close(struct sbx_audit *audit);

/* Inserts the row of an execution about to start, with status SBX_AUDIT_STATUS_RUNNING and no
 * outcome. Fails (-1 with err) when the id already exists, id, tenant or language is NULL, or
 * the database fails. */
int sbx_audit_begin(struct sbx_audit *audit, const struct sbx_audit_record *record,
                    struct sbx_error *err);

/* Completes the running row of record->id with the outcome; computes the output sizes and hashes
 * itself, and ends the wait of sbx_audit_outcome_coming() for it. Returns 1 when it did, 0 when no
 * row of that id is running (never begun, or completed already: the first outcome stands), -1 with
 * err when status is NULL or the database fails. */
int sbx_audit_finish(struct sbx_audit *audit, const struct sbx_audit_record *record,
                     struct sbx_error *err);

/* sbx_audit_finish with the outcome of result (its id, status, usage, evidence, timing, limits
 * and output): result_json is sbx_result_to_json(result) when the caller has it, NULL to have it
 * made here. The error column gets result->error for the statuses that carry one. */
int sbx_audit_finish_result(struct sbx_audit *audit, const struct sbx_result *result,
                            const json_t *result_json, int64_t finished_at_ms, bool store_output,
                            struct sbx_error *err);

/* Says that the outcome of id's running row is on its way: it is written after the answer went
 * to the client (so that the client does not wait for the write), and until sbx_audit_finish()
 * of id returns, a sbx_audit_fetch() of id waits for it (at most SBX_AUDIT_OUTCOME_WAIT_MS), so
 * that a record read right after the answer, on any connection, has the outcome. Every call
 * must be followed by sbx_audit_finish() of id, whether or not it succeeds. -1 with err when
 * out of memory (then nothing waits, and the caller writes the outcome before answering). */
int sbx_audit_outcome_coming(struct sbx_audit *audit, const char *id, struct sbx_error *err);

/* Bound of a fetch's wait for an outcome on its way. */
#define SBX_AUDIT_OUTCOME_WAIT_MS 5000

/* A fleet's store keeps in memory, to write when PostgreSQL answers again, each outcome it could
 * not take (sbx_audit_finish failed): at most this many. */
#define SBX_AUDIT_KEPT_MAX 4096

/* Writes the outcomes kept so (*written says how many), up to the first the store refuses again
 * (-1 with err; the rest stay kept). */
int sbx_audit_write_kept(struct sbx_audit *audit, uint64_t *written, struct sbx_error *err);

/* Removes the running row of id: its execution was refused before it started. 1 when removed,
 * 0 when no row of that id is running, -1 with err. */
int sbx_audit_forget(struct sbx_audit *audit, const char *id, struct sbx_error *err);

/* Completes every row still running as internal_error with error, finished at finished_at_ms,
 * and says how many in *count: for the executions an earlier API process began but never saw
 * end. Call it before serving, after what the engine's spool holds has been finished. */
int sbx_audit_interrupt_running(struct sbx_audit *audit, const char *error, int64_t finished_at_ms,
                                uint64_t *count, struct sbx_error *err);

/* Looks up execution id of tenant. Returns 1 and sets *out to a new JSON object (caller owns the
 * reference) when found; 0 with *out NULL when there is no such id for this tenant (also when
 * the id belongs to another tenant: the two are indistinguishable on purpose); -1 with err when
 * the database fails or a stored JSON column does not parse. A running execution's row has status
 * "running" and null for every outcome column. The object has every column as a key:
 *   id, tenant, created_at, finished_at (ms since epoch), language, status, exit_code, signal,
 *   error, requested, effective, clamped, usage, evidence, timing (embedded JSON values),
 *   stdout_bytes, stderr_bytes, stdout_sha256, stderr_sha256, stdout, stderr, compile
 * with JSON null for a NULL column. stdout/stderr are strings in which every byte that is not
 * valid UTF-8 became U+FFFD. */
int sbx_audit_fetch(struct sbx_audit *audit, const char *tenant, const char *id, json_t **out,
                    struct sbx_error *err);

/* tenant's most recent executions created before before_ms (ms since epoch; INT64_MAX: any),
 * newest first, at most limit: a JSON array of records as sbx_audit_fetch makes them, without
 * stdout, stderr and compile (a list stays small; one record has them). 0 with *out (caller
 * owns it), -1 with err. */
int sbx_audit_recent(struct sbx_audit *audit, const char *tenant, int64_t before_ms, unsigned limit,
                     json_t **out, struct sbx_error *err);

/* Writes the SHA-256 of size bytes at data (data may be NULL when size is 0) to hex as 64
 * lowercase hex digits and a NUL. Returns 0, or -1 with err when libcrypto fails. */
int sbx_audit_sha256_hex(const void *data, size_t size, char hex[SBX_AUDIT_SHA256_HEX_SIZE],
                         struct sbx_error *err);

/* One session (api/sessions.h): its table, sessions, holds one row each, begun when it opens
 * and completed when it ends; its runs are rows of executions. Borrowed for the call. */
struct sbx_audit_session {
        const char *id;
        const char *tenant;
        const char *language;
        int64_t created_at_ms;
        const json_t *requested; /* the request as received (files by size and SHA-256) */
        const json_t *effective; /* the effective limits */
        const json_t *clamped;
        int64_t ended_at_ms;
        const char *end_reason; /* deleted, idle_timeout, max_lifetime, agent_died, ... */
        const json_t *evidence; /* the kernel's counters over the session's life */
        const char *kind;       /* "session" (NULL) or "episode" (api/episodes.c) */
        const json_t *summary;  /* an episode's end: {steps, resets, total_reward, cpu_ms} */
};

/* The row of a session that opened (id, tenant, language, created_at_ms, requested, effective,
 * clamped, kind). */
int sbx_audit_session_begin(struct sbx_audit *audit, const struct sbx_audit_session *session,
                            struct sbx_error *err);

/* Completes it (id, ended_at_ms, end_reason, evidence, summary): 1 when it did, 0 when it had ended
 * already (the first end stands), -1 with err. */
int sbx_audit_session_end(struct sbx_audit *audit, const struct sbx_audit_session *session,
                          struct sbx_error *err);

/* Completes every session still open with reason at ended_at_ms (at the API process's start:
 * its sessions died with the previous one); *count says how many. */
int sbx_audit_end_open_sessions(struct sbx_audit *audit, const char *reason, int64_t ended_at_ms,
                                uint64_t *count, struct sbx_error *err);
