/* What a sandbox sees of the host, the same under every backend: the parts of the host's /usr a
 * program runs from, the top-level links into it, the distribution's /etc files programs read,
 * and the /etc files generated to describe the sandbox rather than the host. The native backend
 * builds its tree from these (native/mount.c), the gVisor backend its OCI mounts and root
 * directory (gvisor/spec.c): a payload that sees a path under one sees it under the other. */
#pragma once

#include <stddef.h>

#include "util/error.h"

/* /usr/NAME bound read-only, nosuid, nodev (FHS 4.1-4.8, games aside; not /usr/local, the host's
 * own installs, nor /usr/src, its kernel trees). */
extern const char *const sbx_view_usr_parts[];
extern const size_t sbx_view_n_usr_parts;

/* Those without which nothing runs. */
extern const char *const sbx_view_usr_required[];
extern const size_t sbx_view_n_usr_required;

/* /NAME as the host has it: a link (merged /usr: bin -> usr/bin) or a directory, bound. */
extern const char *const sbx_view_aliases[];
extern const size_t sbx_view_n_aliases;

/* /etc/NAME from the host: the distribution's, identical on every host of one release; plus
 * every /etc/python3* entry (Debian's python3 and python3.X configuration: the interpreter's
 * sitecustomize lives there). */
extern const char *const sbx_view_etc_host_entries[];
extern const size_t sbx_view_n_etc_host_entries;
#define SBX_VIEW_ETC_PREFIX "python3"

/* Calls each(name, ctx, err) for every /etc entry of the host the sandbox sees: the names of
 * sbx_view_etc_host_entries, then those /etc/python3* names the host has ("ssl/certs",
 * "python3.11"; whether each exists is the callback's to find out). Stops at the first that
 * returns -1, and returns -1 then (or when /etc cannot be read), else 0. */
int sbx_view_each_etc_entry(int (*each)(const char *name, void *ctx, struct sbx_error *err),
                            void *ctx, struct sbx_error *err);

/* Written by sandboxd: path relative to the root ("etc/passwd"), and its text. */
struct sbx_view_file {
        const char *path;
        const char *text;
};
extern const struct sbx_view_file sbx_view_etc_generated[];
extern const size_t sbx_view_n_etc_generated;

/* Links made by sandboxd: path relative to the root, and the link's target text. */
struct sbx_view_link {
        const char *path;
        const char *target;
};
extern const struct sbx_view_link sbx_view_etc_links[];
extern const size_t sbx_view_n_etc_links;
