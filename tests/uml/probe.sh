#!/bin/sh
# The init of the short boot tests/uml/run.sh makes before the real one: can this host's
# user-mode-linux run the programs the stages need? It prints one line run.sh looks for.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
if out=$(/usr/bin/python3 -c 'print("ok")' 2>&1) && [ "$out" = ok ]; then
        echo "sandboxd-uml-probe: ok"
else
        echo "sandboxd-uml-probe: python3 fails in the guest: $(echo "$out" | grep -m 1 -i 'error')"
fi
poweroff -f
