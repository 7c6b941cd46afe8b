# Fill /workspace with 1 MiB files (head -c) until one fails or $1 MiB are written; the failing
# write's error text is mapped back to its errno.
want=${1:-48}
written=0
for (( i = 0; i < want; i++ )); do
        if ! err=$(head -c 1M /dev/zero 2>&1 >"/workspace/fill-$i"); then
                size=$(stat -c %s "/workspace/fill-$i")
                written=$(( written + size ))
                case $err in
                *"No space left on device"*) e=ENOSPC ;;
                *"File too large"*) e=EFBIG ;;
                *) e="OTHER:$err" ;;
                esac
                echo '{"op": "fill", "ret": -1, "errno": "'"$e"'", "bytes": '"$written"'}'
                exit 0
        fi
        written=$(( written + 1048576 ))
done
echo '{"op": "fill", "ret": 0, "errno": null, "bytes": '"$written"'}'
