#include "model/limits.h"

#include <stddef.h>

#include "util/cleanup.h"

#define MIB (1024ull * 1024ull)

bool sbx_limits_valid(const struct sbx_limits *limits, const char **field)
{
        const struct {
                const char *name;
                uint64_t value, min, max;
        } checks[] = {
                {"wall_ms", limits->wall_ms, 1, SBX_MAX_LIMIT_MS},
                {"cpu_ms", limits->cpu_ms, 1, SBX_MAX_LIMIT_MS},
                {"memory", limits->memory_bytes, SBX_MIN_MEMORY_BYTES, SBX_MAX_MEMORY_BYTES},
                {"pids", limits->pids, SBX_MIN_PIDS, SBX_MAX_PIDS},
                {"disk", limits->disk_bytes, SBX_MIN_DISK_BYTES, SBX_MAX_DISK_BYTES},
                {"output_bytes", limits->output_bytes, 1, SBX_MAX_OUTPUT_BYTES},
                {"open_files", limits->open_files, SBX_MIN_OPEN_FILES, SBX_MAX_OPEN_FILES},
                {"cpu_millicores", limits->cpu_millicores, SBX_MIN_CPU_MILLICORES,
                 SBX_MAX_CPU_MILLICORES},
        };
        for (size_t i = 0; i < SBX_ARRAY_SIZE(checks); i++) {
                if (checks[i].value < checks[i].min || checks[i].value > checks[i].max) {
                        if (field != NULL)
                                *field = checks[i].name;
                        return false;
                }
        }
        return true;
}

void sbx_limits_default(struct sbx_limits *limits)
{
        *limits = (struct sbx_limits){
                .wall_ms = 10 * 1000,
                .cpu_ms = 10 * 1000,
                .memory_bytes = 256 * MIB,
                .pids = 64,
                .disk_bytes = 64 * MIB,
                .output_bytes = 1 * MIB,
                /* The usual soft limit of a Linux login: socket-heavy programs (servers, test
                 * suites, asyncio) hit EMFILE below it. */
                .open_files = 1024,
                .cpu_millicores = 1000,
        };
}
