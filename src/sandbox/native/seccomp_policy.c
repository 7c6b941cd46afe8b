/* The seccomp policy as data: what the sandboxed program may not call, with the errno it gets and
 * the reason. The filter's default is to allow: Landlock, the mount layout, the namespaces and the
 * empty capability sets do the confining; this list removes kernel attack surface and the calls
 * that would undo those layers. seccomp.c turns the table into BPF.
 *
 * Arguments are compared as 64-bit values, while the kernel often reads only the low 32 bits
 * (int/unsigned int parameters). Each argument rule below says why a caller cannot slip past it
 * with high bits set. */
#define _GNU_SOURCE /* CLONE_NEW* in <sched.h> */
#include "sandbox/native/seccomp.h"

#include <errno.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "util/cleanup.h"

#define REFUSE(name, why)                                                                          \
        {                                                                                          \
                .syscall = (name), .errnum = EPERM, .match = SECCOMP_MATCH_ALWAYS, .reason = (why) \
        }

/* clone(2) on x86_64 takes the flags in argument 0. A masked compare looks at one bit, so high
 * bits (which the kernel drops: it reads the lower 32 bits) change nothing. */
#define REFUSE_CLONE_FLAG(flag, why)                                                               \
        {                                                                                          \
                .syscall = "clone", .errnum = EPERM, .match = SECCOMP_MATCH_ARG_MASKED_EQ,         \
                .arg = 0, .mask = (flag), .value = (flag), .reason = (why)                         \
        }

/* ioctl(2) takes `unsigned int cmd`: the kernel ignores the upper 32 bits of argument 1, so only
 * the lower 32 are compared (TIOCSTI | 1 << 32 is still TIOCSTI to the kernel). */
#define REFUSE_IOCTL(request, why)                                                                 \
        {                                                                                          \
                .syscall = "ioctl", .errnum = EPERM, .match = SECCOMP_MATCH_ARG_MASKED_EQ,         \
                .arg = 1, .mask = 0xffffffffu, .value = (request), .reason = (why)                 \
        }

/* socket(2)/socketpair(2) take `int family`. Families 0..AF_INET6 are listed one by one; every
 * value above AF_INET6 is refused by one "greater than" row, and any value with high bits set is
 * above AF_INET6 as a 64-bit number, so the only values that pass are exactly 1, 2 and 10. */
#define REFUSE_FAMILY(call, family, why)                                                           \
        {                                                                                          \
                .syscall = (call), .errnum = EAFNOSUPPORT, .match = SECCOMP_MATCH_ARG_EQ,          \
                .arg = 0, .value = (family), .reason = (why)                                       \
        }
#define REFUSE_FAMILIES(call)                                                                      \
        REFUSE_FAMILY(call, AF_UNSPEC, "no address family: nothing legitimate asks for it"),       \
                REFUSE_FAMILY(call, AF_AX25, LEGACY_FAMILY_REASON),                                \
                REFUSE_FAMILY(call, AF_IPX, LEGACY_FAMILY_REASON),                                 \
                REFUSE_FAMILY(call, AF_APPLETALK, LEGACY_FAMILY_REASON),                           \
                REFUSE_FAMILY(call, AF_NETROM, LEGACY_FAMILY_REASON),                              \
                REFUSE_FAMILY(call, AF_BRIDGE, LEGACY_FAMILY_REASON),                              \
                REFUSE_FAMILY(call, AF_ATMPVC, LEGACY_FAMILY_REASON),                              \
                REFUSE_FAMILY(call, AF_X25, LEGACY_FAMILY_REASON),                                 \
        {                                                                                          \
                .syscall = (call), .errnum = EAFNOSUPPORT, .match = SECCOMP_MATCH_ARG_GT,          \
                .arg = 0, .value = AF_INET6,                                                       \
                .reason =                                                                          \
                        "every family after AF_INET6 (netlink, packet, key, alg, vsock, "          \
                        "bluetooth, ...): raw-frame, crypto and kernel-configuration sockets "     \
                        "are the kernel's largest socket attack surface; programs here get UNIX "  \
                        "sockets and IP over their own loopback only"                              \
        }
#define LEGACY_FAMILY_REASON                                                                       \
        "legacy protocol family (amateur radio, IPX, AppleTalk, bridge, ATM, X.25): old, rarely "  \
        "audited kernel code that no sandboxed program needs"

/* personality(2) takes `unsigned int`. Allowed: 0 (PER_LINUX) and 0xffffffff (query). A 32-bit
 * value is neither all zeros nor all ones exactly when, going round its bits cyclically, some set
 * bit is followed by a clear one; one masked rule per bit position catches each such value (a
 * libseccomp rule can test an argument only once, so "0 < x < 0xffffffff" is not expressible as
 * one rule). Upper bits are never looked at, as the kernel never reads them. */
#define REFUSE_PERSONALITY_AT(bit)                                                                 \
        {                                                                                          \
                .syscall = "personality", .errnum = EPERM, .match = SECCOMP_MATCH_ARG_MASKED_EQ,   \
                .arg = 0, .mask = (1ull << (bit)) | (1ull << (((bit) + 1) % 32)),                  \
                .value = 1ull << (bit),                                                            \
                .reason = "execution domains and flags (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, "    \
                          "UNAME26, MMAP_PAGE_ZERO) weaken ASLR and W^X or leak kernel memory "    \
                          "(CVE-2012-0957); only PER_LINUX and the query are allowed"              \
        }

#define SOCKET_TYPE_MASK 0xfu /* the kernel's SOCK_TYPE_MASK: the rest are SOCK_NONBLOCK etc. */

const struct seccomp_rule seccomp_policy[] = {
        /* Namespaces: a new user namespace hands its creator every capability inside it, and
         * with that new mounts, networks and the kernel code behind them. */
        REFUSE("unshare", "new namespaces give back full capabilities over fresh mounts and "
                          "networks; nested user namespaces are how CVE-2022-0492 reached "
                          "release_agent"),
        REFUSE("setns", "joining another namespace through a leaked fd leaves the sandbox"),
        {.syscall = "clone3",
         .errnum = ENOSYS,
         .match = SECCOMP_MATCH_ALWAYS,
         .reason = "its flags live in memory, which seccomp cannot read; with ENOSYS glibc falls "
                   "back to clone(2), whose flags the rules below inspect"},
        REFUSE_CLONE_FLAG(CLONE_NEWUSER, "a new user namespace: full capabilities inside it"),
        REFUSE_CLONE_FLAG(CLONE_NEWNS, "a new mount namespace: remounting what the sandbox fixed"),
        REFUSE_CLONE_FLAG(CLONE_NEWPID, "a new pid namespace: no program here needs one"),
        REFUSE_CLONE_FLAG(CLONE_NEWNET, "a new network namespace: new interfaces, netfilter code"),
        REFUSE_CLONE_FLAG(CLONE_NEWIPC, "a new IPC namespace: no program here needs one"),
        REFUSE_CLONE_FLAG(CLONE_NEWUTS, "a new UTS namespace: no program here needs one"),
        REFUSE_CLONE_FLAG(CLONE_NEWCGROUP, "a new cgroup namespace: no program here needs one"),
        REFUSE_CLONE_FLAG(CLONE_NEWTIME, "a new time namespace; clone(2) itself has no room for "
                                         "it (its low byte is the exit signal), so this row only "
                                         "matches exit signals >= 128, which nothing uses"),

        /* The filesystem: the root is built and final before exec. */
        REFUSE("mount", "remounting / or /usr read-write is the first step of a filesystem escape"),
        REFUSE("umount2", "unmounting would uncover what a mount hides"),
        REFUSE("pivot_root", "the root is final"),
        REFUSE("chroot", "chroot plus a directory fd kept outside it is the classic escape"),
        REFUSE("open_tree", "new mount API: the powers of mount(2) through another door"),
        REFUSE("move_mount", "new mount API: the powers of mount(2) through another door"),
        REFUSE("fsopen", "new mount API: the powers of mount(2) through another door"),
        REFUSE("fsconfig", "new mount API: the powers of mount(2) through another door"),
        REFUSE("fsmount", "new mount API: the powers of mount(2) through another door"),
        REFUSE("fspick", "new mount API: the powers of mount(2) through another door"),
        REFUSE("mount_setattr", "changes mount flags (read-only, nosuid) of existing mounts"),
        REFUSE("open_by_handle_at", "a file handle reaches files outside the root, bypassing path "
                                    "lookup (the 'shocker' container escape)"),
        REFUSE("name_to_handle_at", "makes the handles open_by_handle_at consumes"),
        REFUSE("quotactl", "disk quota administration of host filesystems"),
        REFUSE("quotactl_fd", "disk quota administration of host filesystems"),
        REFUSE("swapon", "host memory administration"),
        REFUSE("swapoff", "host memory administration"),
        REFUSE("acct", "process accounting writes a record of every exit to a file, host-wide"),
        REFUSE("fanotify_init", "filesystem-wide event monitoring; unprivileged fanotify is young "
                                "kernel code that no sandboxed program needs"),
        REFUSE("inotify_init", "inotify instances are counted per user and charged to the user "
                               "namespace's owner, host root, whose 128 (fs.inotify."
                               "max_user_instances) every host daemon shares: a sandbox could "
                               "use them all up; and its events would show when other "
                               "sandboxes read the shared /usr"),
        REFUSE("inotify_init1", "inotify: see inotify_init"),

        /* Kernel attack surface: interfaces with a long exploit record that programs run here
         * do not use. */
        REFUSE("io_uring_setup", "io_uring runs operations outside the syscall path seccomp "
                                 "sees and has a long exploit record (CVE-2022-29582, "
                                 "CVE-2023-2598)"),
        REFUSE("io_uring_enter", "io_uring: see io_uring_setup"),
        REFUSE("io_uring_register", "io_uring: see io_uring_setup"),
        REFUSE("bpf", "eBPF verifier bugs are kernel code execution (CVE-2021-3490, "
                      "CVE-2023-2163)"),
        REFUSE("perf_event_open", "performance counters leak kernel addresses and cross-process "
                                  "timing, and keep yielding kernel bugs (CVE-2023-6931)"),
        REFUSE("userfaultfd", "stalls kernel page faults at will: the standard tool to win kernel "
                              "races in exploits"),
        REFUSE("keyctl", "the kernel keyrings are keyed by uid, not by sandbox, and their code "
                         "has had use-after-frees (CVE-2016-0728)"),
        REFUSE("add_key", "kernel keyrings: see keyctl"),
        REFUSE("request_key", "kernel keyrings: see keyctl; it can also start a host upcall"),
        REFUSE("lookup_dcookie", "an old profiling interface that resolves kernel cookies to "
                                 "paths"),

        /* Other processes: the pid namespace hides the host's, these would still reach into
         * siblings and weaken the layers set on them. */
        {.syscall = "ptrace",
         .errnum = EPERM,
         .match = SECCOMP_MATCH_ALWAYS,
         .reason = "rewrites another process's memory and system calls",
         .uml_kernel_needs = true},
        REFUSE("process_vm_readv", "reads another process's memory"),
        REFUSE("process_vm_writev", "writes another process's memory"),
        REFUSE("pidfd_getfd", "steals a file descriptor from another process"),
        REFUSE("kcmp", "compares kernel object identities of two processes: an information leak "
                       "that helps exploits"),

        /* The host itself: clock, kernel, machine. */
        REFUSE("settimeofday", "the wall clock is shared with the host: no namespace covers it"),
        REFUSE("clock_settime", "the wall clock is shared with the host: no namespace covers it"),
        REFUSE("clock_adjtime", "the wall clock is shared with the host: no namespace covers it"),
        REFUSE("adjtimex", "the wall clock is shared with the host: no namespace covers it"),
        REFUSE("kexec_load", "loads a new kernel"),
        REFUSE("kexec_file_load", "loads a new kernel"),
        REFUSE("init_module", "kernel modules are kernel code"),
        REFUSE("finit_module", "kernel modules are kernel code"),
        REFUSE("delete_module", "unloading kernel modules"),
        REFUSE("reboot", "reboots or halts the host (or its pid namespace)"),
        REFUSE("syslog", "the kernel log leaks kernel addresses and host activity (dmesg)"),
        REFUSE("vhangup", "hangs up the controlling terminal"),
        REFUSE("iopl", "direct access to hardware I/O ports"),
        REFUSE("ioperm", "direct access to hardware I/O ports"),

        /* Terminals: the program may hold a pty; these reach past it. */
        REFUSE_IOCTL(TIOCSTI, "fakes terminal input: types commands into the shell that owns the "
                              "terminal (CVE-2016-7545 class)"),
        REFUSE_IOCTL(TIOCLINUX, "virtual console tricks: selection paste is TIOCSTI by another "
                                "name (CVE-2023-28100)"),
        REFUSE_IOCTL(TIOCSETD, "attaching a line discipline loads rarely used kernel code "
                               "(n_gsm, n_hdlc: CVE-2023-6546, CVE-2017-2636)"),

        REFUSE_PERSONALITY_AT(0),
        REFUSE_PERSONALITY_AT(1),
        REFUSE_PERSONALITY_AT(2),
        REFUSE_PERSONALITY_AT(3),
        REFUSE_PERSONALITY_AT(4),
        REFUSE_PERSONALITY_AT(5),
        REFUSE_PERSONALITY_AT(6),
        REFUSE_PERSONALITY_AT(7),
        REFUSE_PERSONALITY_AT(8),
        REFUSE_PERSONALITY_AT(9),
        REFUSE_PERSONALITY_AT(10),
        REFUSE_PERSONALITY_AT(11),
        REFUSE_PERSONALITY_AT(12),
        REFUSE_PERSONALITY_AT(13),
        REFUSE_PERSONALITY_AT(14),
        REFUSE_PERSONALITY_AT(15),
        REFUSE_PERSONALITY_AT(16),
        REFUSE_PERSONALITY_AT(17),
        REFUSE_PERSONALITY_AT(18),
        REFUSE_PERSONALITY_AT(19),
        REFUSE_PERSONALITY_AT(20),
        REFUSE_PERSONALITY_AT(21),
        REFUSE_PERSONALITY_AT(22),
        REFUSE_PERSONALITY_AT(23),
        REFUSE_PERSONALITY_AT(24),
        REFUSE_PERSONALITY_AT(25),
        REFUSE_PERSONALITY_AT(26),
        REFUSE_PERSONALITY_AT(27),
        REFUSE_PERSONALITY_AT(28),
        REFUSE_PERSONALITY_AT(29),
        REFUSE_PERSONALITY_AT(30),
        REFUSE_PERSONALITY_AT(31),

        /* Sockets: UNIX, IPv4 and IPv6 only. */
        REFUSE_FAMILIES("socket"),
        REFUSE_FAMILIES("socketpair"),
        {.syscall = "socket",
         .errnum = EAFNOSUPPORT,
         .match = SECCOMP_MATCH_ARG_MASKED_EQ,
         .arg = 1,
         .mask = SOCKET_TYPE_MASK,
         .value = SOCK_PACKET,
         .reason = "the kernel turns AF_INET + SOCK_PACKET into an AF_PACKET socket, which the "
                   "family rows refuse"},
        /* EAFNOSUPPORT like the family rows: when a call matches rows on different arguments,
         * libseccomp does not say which row answers, so all rows of one call share an errno. */
        {.syscall = "socket",
         .errnum = EAFNOSUPPORT,
         .match = SECCOMP_MATCH_ARG_MASKED_EQ,
         .arg = 1,
         .mask = SOCKET_TYPE_MASK,
         .value = SOCK_RAW,
         .reason = "raw sockets forge packets; without capabilities the kernel refuses them too, "
                   "this keeps them refused when that layer is off"},
};

const size_t seccomp_policy_len = SBX_ARRAY_SIZE(seccomp_policy);
