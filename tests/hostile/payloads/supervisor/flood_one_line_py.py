"""Output flood: one 1 GiB line (no newline anywhere), written in 1 MiB pieces."""
import os

piece = b"A" * (1 << 20)
for _ in range(1024):
    os.write(1, piece)
