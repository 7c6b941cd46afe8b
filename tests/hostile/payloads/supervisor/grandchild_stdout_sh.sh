# The main process exits at once while descendants keep its stdout and stderr open: a
# backgrounded sleep, a subshell's orphan, and one in a new session via setsid.
sleep 3600 &
( sleep 3600 & )
setsid sleep 3600 &
echo '{"op": "spawn", "ret": 0, "errno": null}'
exit 0
