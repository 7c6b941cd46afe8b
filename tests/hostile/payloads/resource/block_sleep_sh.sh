# Block forever in sleep (and in the shell's wait for it).
echo '{"op": "sleep", "ret": 0, "errno": null}'
sleep 3600
