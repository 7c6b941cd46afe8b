# awk memory hog: double a string until it is $1 MiB long.
mib=${1:-128}
exec awk -v n="$(( mib * 1048576 ))" 'BEGIN { s = "x"; while (length(s) < n) s = s s;
        printf "{\"op\": \"alloc\", \"ret\": 0, \"errno\": null, \"bytes\": %d}\n", length(s) }'
