#include "model/result.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/cleanup.h"

/* The scratch tmpfs counts as full when less than this is left: a writer that hit ENOSPC leaves
 * at most a partly filled page behind, and tmpfs reserves nothing. */
#define DISK_FULL_SLACK_BYTES (64 * 1024)

static const char *const status_names[] = {
        [SBX_STATUS_OK] = "ok",
        [SBX_STATUS_EXIT_NONZERO] = "exit_nonzero",
        [SBX_STATUS_SIGNALED] = "signaled",
        [SBX_STATUS_TIMEOUT] = "timeout",
        [SBX_STATUS_MEMORY_LIMIT] = "memory_limit",
        [SBX_STATUS_PIDS_LIMIT] = "pids_limit",
        [SBX_STATUS_OUTPUT_LIMIT] = "output_limit",
        [SBX_STATUS_DISK_FULL] = "disk_full",
        [SBX_STATUS_COMPILE_ERROR] = "compile_error",
        [SBX_STATUS_INTERNAL_ERROR] = "internal_error",
        [SBX_STATUS_CANCELED] = "canceled",
};

const char *sbx_status_name(enum sbx_status status)
{
        if ((size_t)status >= SBX_ARRAY_SIZE(status_names) || status_names[status] == NULL)
                return "internal_error";
        return status_names[status];
}

bool sbx_status_has_error(enum sbx_status status)
{
        return status == SBX_STATUS_INTERNAL_ERROR || status == SBX_STATUS_CANCELED ||
               status == SBX_STATUS_COMPILE_ERROR;
}

static bool scratch_full(const struct sbx_run *run)
{
        if (!run->disk_known || run->disk_total_bytes == 0)
                return false;
        if (run->inodes_free == 0)
                return true;
        return run->disk_total_bytes - run->disk_used_bytes < DISK_FULL_SLACK_BYTES;
}

enum sbx_status sbx_classify(const struct sbx_run *run, const struct sbx_evidence *evidence,
                             const struct sbx_limits *limits)
{
        if (run->output_limit)
                return SBX_STATUS_OUTPUT_LIMIT;
        if (run->wall_timeout)
                return SBX_STATUS_TIMEOUT;
        if (evidence->oom_kills > 0)
                return SBX_STATUS_MEMORY_LIMIT;
        if (evidence->pids_max_events > 0)
                return SBX_STATUS_PIDS_LIMIT;
        if (scratch_full(run) || (!run->exited && run->signal == SIGXFSZ))
                return SBX_STATUS_DISK_FULL;
        /* RLIMIT_CPU sends SIGXCPU at the soft limit and SIGKILL at the hard one. */
        if (!run->exited && run->signal == SIGXCPU)
                return SBX_STATUS_TIMEOUT;
        if (!run->exited && run->signal == SIGKILL && limits->cpu_ms > 0 &&
            evidence->cpu_usage_us >= limits->cpu_ms * 1000)
                return SBX_STATUS_TIMEOUT; /* a program that caught SIGXCPU met the hard limit */
        if (!run->exited)
                return SBX_STATUS_SIGNALED;
        if (run->exit_code != 0)
                return SBX_STATUS_EXIT_NONZERO;
        return SBX_STATUS_OK;
}

int sbx_result_cli_exit_code(const struct sbx_result *result)
{
        switch (result->status) {
        case SBX_STATUS_OK:
                return 0;
        case SBX_STATUS_EXIT_NONZERO:
                return result->exit_code;
        case SBX_STATUS_SIGNALED:
                return 128 + result->signal;
        case SBX_STATUS_TIMEOUT:
                return 124;
        case SBX_STATUS_MEMORY_LIMIT:
                return 125;
        case SBX_STATUS_PIDS_LIMIT:
                return 123;
        case SBX_STATUS_OUTPUT_LIMIT:
                return 122;
        case SBX_STATUS_DISK_FULL:
                return 121;
        case SBX_STATUS_COMPILE_ERROR:
                return 1;
        case SBX_STATUS_INTERNAL_ERROR:
                return 70;
        case SBX_STATUS_CANCELED:
                return 75; /* EX_TEMPFAIL: nothing wrong with the program; run it again */
        }
        return 70;
}

void sbx_result_set_internal_error(struct sbx_result *result, const char *execution_id,
                                   const struct sbx_limits *limits, const char *backend,
                                   const char *error)
{
        *result = (struct sbx_result){
                .status = SBX_STATUS_INTERNAL_ERROR,
                .exit_code = -1,
                .backend = backend,
        };
        if (limits != NULL)
                result->limits = *limits;
        snprintf(result->id, sizeof(result->id), "%s", execution_id ? execution_id : "");
        snprintf(result->error, sizeof(result->error), "%s", error);
}

uint64_t sbx_result_cpu_ms(const struct sbx_result *result)
{
        uint64_t us = result->evidence.cpu_usage_us;
        if (result->compile != NULL)
                us += result->compile->evidence.cpu_usage_us;
        return us / 1000;
}

void sbx_result_free(struct sbx_result *result)
{
        sbx_run_free(&result->run);
        if (result->compile != NULL) {
                sbx_result_free(result->compile);
                free(result->compile);
                result->compile = NULL;
        }
}

void sbx_run_free(struct sbx_run *run)
{
        sbx_buffer_free(&run->out);
        sbx_buffer_free(&run->err);
}
