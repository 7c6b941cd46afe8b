#!/usr/bin/env python3
"""Build step: writes a C file defining `const char NAME[]` with the text of a file.

usage: embed_text.py INPUT OUTPUT NAME
"""
import sys


def escape(text):
    """text as the inside of a C string literal: backslash, quote, "?" (or "??-" and the like are
    trigraphs), and control characters escaped."""
    out = []
    for char in text:
        if char in '\\"?':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif ord(char) < 0x20 or ord(char) == 0x7f:
            out.append("\\%03o" % ord(char))
        else:
            out.append(char)
    return "".join(out)


def main():
    source, output, name = sys.argv[1:4]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    lines = ["/* Generated from %s by scripts/embed_text.py: do not edit. */" % source.split("/")[-1],
             "const char %s[] =" % name]
    # One C line per line of text (split at "\n" only: splitlines() would also split at the
    # other line boundaries Unicode knows, which a bundle's strings hold).
    pieces = text.split("\n")
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        if last and piece == "" and i > 0:
            break  # the text ended with a newline
        lines.append('        "%s"' % escape(piece if last else piece + "\n"))
    lines[-1] += ";"
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
