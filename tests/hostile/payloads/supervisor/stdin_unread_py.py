"""Never read stdin (8 MiB waiting, far more than a pipe holds) and block: a supervisor that
writes stdin synchronously would hang before ever reaching its deadline."""
import signal

print('{"op": "ignore_stdin", "ret": 0, "errno": null}', flush=True)
while True:
    signal.pause()
