#include "sandbox/view.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>

#include "util/cleanup.h"

const char *const sbx_view_usr_parts[] = {
        "bin", "include", "lib", "lib32", "lib64", "libexec", "libx32", "sbin", "share",
};
const size_t sbx_view_n_usr_parts = SBX_ARRAY_SIZE(sbx_view_usr_parts);

const char *const sbx_view_usr_required[] = {"/usr/bin", "/usr/lib"};
const size_t sbx_view_n_usr_required = SBX_ARRAY_SIZE(sbx_view_usr_required);

const char *const sbx_view_aliases[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
const size_t sbx_view_n_aliases = SBX_ARRAY_SIZE(sbx_view_aliases);

/* Never the host's accounts, secrets (shadow, ssl/private), machine identity (machine-id,
 * hostname, resolv.conf) or daemon configuration. ld.so.conf{,.d} are left out: only ldconfig
 * reads them, and the loader uses ld.so.cache. */
const char *const sbx_view_etc_host_entries[] = {
        "ld.so.cache",     /* the loader's library index: without it every lookup walks */
        "alternatives",    /* Debian's links (python, java, editors...) point through it */
        "os-release",      /* platform, distro tools; on Debian a link into /usr/lib */
        "debian_version",  /* what Debian's own tools read besides os-release */
        "services",        /* getservbyname, getaddrinfo(..., "http"), socket.getservbyname */
        "protocols",       /* getprotobyname, Python's socket module */
        "mime.types",      /* Python's mimetypes and others read it */
        "ssl/certs",       /* public CA certificates only; ssl/private is never bound */
        "ssl/openssl.cnf", /* OpenSSL reads it at start-up (Python's ssl, curl) */
        "fonts",           /* Fontconfig's configuration (links into /usr/share) */
        "matplotlibrc",    /* Debian's matplotlib looks for its defaults here */
        "java-17-openjdk", /* the JDK's java.security and policy (links from /usr) */
};
const size_t sbx_view_n_etc_host_entries = SBX_ARRAY_SIZE(sbx_view_etc_host_entries);

/* The sandbox's own accounts (native/userns.h for the ids: root is the sandbox's root, `sandbox`
 * and nobody are unprivileged ids of its range, for chown and for subprocess(user=...)); name
 * service from files only; the clock in UTC, as a server's; the names of its own loopback. Home
 * is the workspace, where tools look for $HOME files. */
const struct sbx_view_file sbx_view_etc_generated[] = {
        {"etc/passwd", "root:x:0:0:root:/workspace:/bin/sh\n"
                       "sandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n"
                       "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
        {"etc/group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"},
        {"etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\n"
                              "hosts: files dns\nnetworks: files\nprotocols: files\n"
                              "services: files\nethers: files\nrpc: files\n"},
        {"etc/hosts", "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost "
                      "ip6-loopback\n"},
        {"etc/hostname", "sandbox\n"},
        {"etc/timezone", "Etc/UTC\n"},
};
const size_t sbx_view_n_etc_generated = SBX_ARRAY_SIZE(sbx_view_etc_generated);

const struct sbx_view_link sbx_view_etc_links[] = {
        /* Dangling (glibc then uses UTC as well) where tzdata is not installed. */
        {"etc/localtime", "/usr/share/zoneinfo/Etc/UTC"},
        {"etc/mtab", "../proc/self/mounts"}, /* df and mount read it */
};
const size_t sbx_view_n_etc_links = SBX_ARRAY_SIZE(sbx_view_etc_links);

int sbx_view_each_etc_entry(int (*each)(const char *name, void *ctx, struct sbx_error *err),
                            void *ctx, struct sbx_error *err)
{
        for (size_t i = 0; i < sbx_view_n_etc_host_entries; i++)
                if (each(sbx_view_etc_host_entries[i], ctx, err) < 0)
                        return -1;
        _cleanup_closedir_ DIR *etc = opendir("/etc");
        if (etc == NULL)
                return sbx_error_set(err, errno, "opendir /etc");
        struct dirent *entry;
        while ((errno = 0, entry = readdir(etc)) != NULL) {
                if (strncmp(entry->d_name, SBX_VIEW_ETC_PREFIX, strlen(SBX_VIEW_ETC_PREFIX)) != 0)
                        continue;
                if (each(entry->d_name, ctx, err) < 0)
                        return -1;
        }
        if (errno != 0)
                return sbx_error_set(err, errno, "readdir /etc");
        return 0;
}
