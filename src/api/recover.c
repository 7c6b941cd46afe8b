/* Recovery at the API process's start (recover.h). */
#define _GNU_SOURCE
#include "api/recover.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "protocol/protocol.h"
#include "protocol/spool.h"
#include "service/audit_queue.h"
#include "util/cleanup.h"
#include "util/file.h"
#include "util/log.h"
#include "util/time.h"

/* What an interrupted execution's record says. */
#define INTERRUPTED_ERROR                                                                          \
        "interrupted: the API process ended before the execution's result reached it, and the "    \
        "engine kept none"

static void closedirp(DIR **dir)
{
        if (*dir != NULL)
                closedir(*dir);
}

/* Whether name is "<execution id>.result". */
static bool spool_file_name(const char *name)
{
        size_t suffix = strlen(SBX_SPOOL_FILE_SUFFIX);
        if (strlen(name) != SBX_EXECUTION_ID_CHARS + suffix ||
            strcmp(name + SBX_EXECUTION_ID_CHARS, SBX_SPOOL_FILE_SUFFIX) != 0)
                return false;
        char id[SBX_EXECUTION_ID_CHARS + 1];
        memcpy(id, name, SBX_EXECUTION_ID_CHARS);
        id[SBX_EXECUTION_ID_CHARS] = '\0';
        return sbx_execution_id_valid(id);
}

/* Completes the record of one spooled result. 1 when done (the file may go), 0 when the file is
 * unreadable (it stays), -1 when the store failed. */
static int fold_one(struct sbx_audit *audit, int dirfd, const char *name, bool store_output,
                    struct sbx_error *err)
{
        struct sbx_error file_err = {0};
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        _cleanup_free_ struct sbx_message *message = malloc(sizeof(*message));
        if (fd < 0 || message == NULL ||
            sbx_read_all_fd(fd, SBX_MESSAGE_MAX_BYTES, &data, &len, &file_err) < 0 ||
            sbx_message_decode(data, len, message, &file_err) < 0 ||
            message->header.type != SBX_MESSAGE_RESULT ||
            strncmp(message->body.result.id, name, SBX_EXECUTION_ID_CHARS) != 0) {
                sbx_warn("recover: spool file %s is unreadable or not a result (%s); left in place",
                         name, file_err.message[0] ? file_err.message : strerror(errno));
                return 0;
        }
        /* An asynchronous execution's: its client reads the output from the record, so it is
         * kept; and one that asked to retry, canceled or failed because the service went down,
         * is queued again rather than ended. */
        const struct sbx_result *result = &message->body.result;
        bool retry = false;
        int queued = sbx_audit_queued_request(audit, result->id, &retry, err);
        if (queued < 0)
                return -1;
        if (queued && retry &&
            (result->status == SBX_STATUS_CANCELED ||
             result->status == SBX_STATUS_INTERNAL_ERROR)) {
                if (sbx_audit_requeue(audit, result->id, err) < 0)
                        return -1;
                sbx_info("recover: execution %s queued again (\"retry\": true)", result->id);
                return 1;
        }
        int rc = sbx_audit_finish_result(audit, result, NULL, (int64_t)sbx_wall_clock_ms(),
                                         store_output || queued, err);
        if (rc < 0)
                return -1;
        if (rc == 0)
                sbx_info("recover: execution %s had no running record; its spooled result is "
                         "dropped",
                         message->body.result.id);
        return 1;
}

int sbx_api_recover(struct sbx_audit *audit, const char *spool_dir, bool store_output,
                    struct sbx_recovery *recovery, struct sbx_error *err)
{
        *recovery = (struct sbx_recovery){0};
        _cleanup_(closedirp) DIR *dir = opendir(spool_dir);
        if (dir == NULL && errno != ENOENT)
                sbx_warn("recover: open the spool %s: %s", spool_dir, strerror(errno));
        for (struct dirent *entry; dir != NULL && (entry = readdir(dir)) != NULL;) {
                if (!spool_file_name(entry->d_name))
                        continue;
                int rc = fold_one(audit, dirfd(dir), entry->d_name, store_output, err);
                if (rc < 0)
                        return -1;
                if (rc == 0) {
                        recovery->unreadable++;
                        continue;
                }
                recovery->from_spool++;
                if (unlinkat(dirfd(dir), entry->d_name, 0) < 0)
                        sbx_warn("recover: remove %s/%s: %s", spool_dir, entry->d_name,
                                 strerror(errno));
        }
        /* Asynchronous ones still running that asked for it run again (queued once more);
         * the rest of those still running are interrupted. */
        uint64_t requeued = 0;
        if (sbx_audit_queue_recover(audit, &requeued, err) < 0)
                return -1;
        if (requeued > 0)
                sbx_info("recover: %llu interrupted asynchronous execution(s) queued again "
                         "(\"retry\": true)",
                         (unsigned long long)requeued);
        if (sbx_audit_interrupt_running(audit, INTERRUPTED_ERROR, (int64_t)sbx_wall_clock_ms(),
                                        &recovery->interrupted, err) < 0)
                return -1;
        /* Sessions live in the engine's workers, which end with the previous API process's
         * engine: whatever it left open is over. */
        uint64_t sessions = 0;
        if (sbx_audit_end_open_sessions(audit, "interrupted", (int64_t)sbx_wall_clock_ms(),
                                        &sessions, err) < 0)
                return -1;
        if (sessions > 0)
                sbx_info("recover: %llu session(s) left open by the previous process ended",
                         (unsigned long long)sessions);
        if (recovery->from_spool > 0 || recovery->interrupted > 0)
                sbx_info("recover: %llu execution(s) recorded from the engine's spool, %llu "
                         "interrupted without a result",
                         (unsigned long long)recovery->from_spool,
                         (unsigned long long)recovery->interrupted);
        return 0;
}
