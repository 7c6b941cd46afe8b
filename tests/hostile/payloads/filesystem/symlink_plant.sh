# Hostile payload (filesystem): leave traps for the supervisor's cleanup. Symlinks to a host
# canary (its path is $1), to /, /etc/passwd and to the program's own files, placed where a
# cleanup walks (/workspace, /tmp, /dev/shm), main.sh itself replaced by a link, a hardlink to the
# canary, link loops, unreadable and unwritable directories, names with newlines and "..". Then
# write through the links here: the host canary must not be reachable from inside, and after the
# run (the supervisor's teardown) it must be unchanged. One JSON line per attempt on stdout.
canary=$1

# $1 op, $2 target, $3 exit status, $4 error message (its first line). Shell builtins only: a
# fork costs ~80 ms under gVisor, and this reports 58 attempts.
report() {
    case "$4" in
        # dash says "Directory nonexistent" and chmod "dangling symlink" for ENOENT
        *"No such file"*|*"nonexistent"*|*"dangling"*) errno='"ENOENT"' ;;
        *"cross-device"*) errno='"EXDEV"' ;;
        *"not permitted"*) errno='"EPERM"' ;;
        *"Permission denied"*) errno='"EACCES"' ;;
        *"Read-only"*) errno='"EROFS"' ;;
        *"File exists"*) errno='"EEXIST"' ;;
        *"Too many levels"*) errno='"ELOOP"' ;;
        *) errno='"UNKNOWN"' ;;
    esac
    if [ "$3" = 0 ]; then ret=0; errno=null; else ret=-1; fi
    # The message without the characters JSON would need escaped.
    rest=$4 detail=
    while :; do
        case $rest in
            *[\"\\]*) head=${rest%%[\"\\]*}; detail=$detail$head; rest=${rest#"$head"?} ;;
            *) detail=$detail$rest; break ;;
        esac
    done
    printf '{"op": "%s", "target": "%s", "ret": %s, "errno": %s, "detail": "%s"}\n' \
        "$1" "$2" "$ret" "$errno" "$detail"
}

try() { # op target command...
    op=$1 target=$2
    shift 2
    "$@" 2>/tmp/err.txt
    status=$?
    message=
    IFS= read -r message </tmp/err.txt
    report "$op" "$target" $status "$message"
}

# Inside, the cwd is /workspace. Unsandboxed (the harness's outside control) only the cwd, a temp
# dir the harness removes: never leave traps in a host's /tmp.
dirs=$PWD
[ "$PWD" = /workspace ] && dirs="/workspace /tmp /dev/shm"
for dir in $dirs; do
    try plant "$dir/canary" ln -s "$canary" "$dir/canary"
    try plant "$dir/canary-dir" ln -s "$(dirname "$canary")" "$dir/canary-dir"
    try plant "$dir/root" ln -s / "$dir/root"
    try plant "$dir/passwd" ln -s /etc/passwd "$dir/passwd"
    try plant "$dir/loop" ln -s "$dir/loop" "$dir/loop"
    try plant "$dir/up" ln -s ../../../../../../.. "$dir/up"
    try plant "$dir/deep" mkdir -p "$dir/deep/a/b/c/d"
    try plant "$dir/deep/a/b/c/d/out" ln -s "$canary" "$dir/deep/a/b/c/d/out"
    try plant "$dir/newline" sh -c "ln -s '$canary' '$dir/new
line'"
    try plant "$dir/..." ln -s "$canary" "$dir/..."
    try plant "$dir/locked" sh -c "mkdir '$dir/locked' && ln -s '$canary' '$dir/locked/x' && chmod 000 '$dir/locked'"
    try plant "$dir/immutable-ish" sh -c "mkdir '$dir/sticky' && chmod 1000 '$dir/sticky'"
    try hardlink "$dir/hard" ln "$canary" "$dir/hard"
    try hardlink "$dir/hard-runtime" ln /usr/bin/python3 "$dir/hard-runtime"
    # The attack from inside: follow the links to the host file.
    try write_through_link "$dir/canary" sh -c "echo pwned >> '$dir/canary'"
    try write_through_link "$dir/deep/a/b/c/d/out" sh -c "echo pwned >> '$dir/deep/a/b/c/d/out'"
    try write_through_link "$dir/canary-dir/canary" sh -c "echo pwned >> '$dir/canary-dir/canary'"
    try chmod_through_link "$dir/canary" chmod 0777 "$dir/canary"
    try truncate_through_link "$dir/canary" sh -c ": > '$dir/canary'"
done
# The program's own file, which the supervisor created: replaced by a link to the canary.
try plant "$PWD/main.sh" sh -c "rm -f '$PWD/main.sh' && ln -s '$canary' '$PWD/main.sh'"
exit 0
