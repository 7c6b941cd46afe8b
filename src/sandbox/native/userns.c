/* User namespace: the parent maps the sandbox's root to its slot's host uid/gid, the child then
 * takes that identity. Until userns_apply() the child still carries the supervisor's host
 * credentials (uid 0, gid 0: unmapped inside, but still what the kernel checks on host files). */
#define _GNU_SOURCE

#include "sandbox/native/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/file.h"

int userns_prepare(pid_t pid, unsigned host_id, struct sbx_error *err)
{
        /* 0 would make the sandbox host root; (unsigned)-1 is the kernel's "no id", and the
         * range must not reach it. */
        if (host_id == 0 || host_id > (unsigned)-1 - SBX_HOST_IDS_PER_SLOT)
                return sbx_error_set(err, EINVAL, "userns: refusing host id range %u+%u", host_id,
                                     SBX_HOST_IDS_PER_SLOT);

        char proc_dir[32];
        snprintf(proc_dir, sizeof(proc_dir), "/proc/%d", (int)pid);
        /* One directory fd for the three writes: they all reach the same process even if the
         * caller broke its promise and the pid were reaped and reused in between. */
        _cleanup_close_ int dir = open(proc_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
                return sbx_error_set(err, errno, "userns: open %s", proc_dir);

        char map[48];
        snprintf(map, sizeof(map), "0 %u %u", host_id, SBX_HOST_IDS_PER_SLOT);
        if (sbx_write_file_at(dir, "uid_map", map, err) < 0)
                return sbx_error_prefix(err, "userns: pid %d", (int)pid);
        /* "deny": the sandbox must never call setgroups(), since dropping a supplementary group
         * can grant what a negative group ACL denies. It has to come before gid_map: the kernel
         * refuses a change to setgroups once gid_map is written. */
        if (sbx_write_file_at(dir, "setgroups", "deny", err) < 0)
                return sbx_error_prefix(err, "userns: pid %d", (int)pid);
        if (sbx_write_file_at(dir, "gid_map", map, err) < 0)
                return sbx_error_prefix(err, "userns: pid %d", (int)pid);
        return 0;
}

int userns_apply(struct sbx_error *err)
{
        /* Group first: while the uid is still the supervisor's, nothing is lost by changing the
         * gid, and no moment exists with the new uid but the supervisor's host gid 0. */
        if (setresgid(0, 0, 0) < 0)
                return sbx_error_set(err, errno, "userns: setresgid 0");
        if (setresuid(0, 0, 0) < 0)
                return sbx_error_set(err, errno, "userns: setresuid 0");
        /* The kernel has now made this process non-dumpable (its credentials changed). That is
         * wanted: its memory is a copy of the supervisor's, and the program, running as the same
         * uid, must not ptrace or read it. Do not set PR_SET_DUMPABLE back. */

        uid_t ruid, euid, suid;
        gid_t rgid, egid, sgid;
        if (getresuid(&ruid, &euid, &suid) < 0 || getresgid(&rgid, &egid, &sgid) < 0)
                return sbx_error_set(err, errno, "userns: getresuid");
        if (ruid != 0 || euid != 0 || suid != 0 || rgid != 0 || egid != 0 || sgid != 0)
                return sbx_error_set(err, EPERM, "userns: not uid/gid 0 after setresuid (maps?)");
        /* Supplementary groups cannot be dropped any more (setgroups is denied): they must have
         * been dropped by the supervisor, or they would still grant host group access. */
        int groups = getgroups(0, NULL);
        if (groups < 0)
                return sbx_error_set(err, errno, "userns: getgroups");
        if (groups != 0)
                return sbx_error_set(err, EPERM, "userns: %d supplementary groups inherited",
                                     groups);
        return 0;
}
