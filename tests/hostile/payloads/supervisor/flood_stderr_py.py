"""Output flood on stderr only (stdout stays quiet): the cap applies per stream."""
import os

line = b"E" * 1023 + b"\n"
piece = line * 64
while True:
    os.write(2, piece)
