#!/usr/bin/env python3
"""Build step: writes a C file defining `const char NAME[]` with the text of a file.

usage: embed_text.py INPUT OUTPUT NAME
"""
import sys


def main():
    source, output, name = sys.argv[1:4]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    lines = ["/* Generated from %s by scripts/embed_text.py: do not edit. */" % source.split("/")[-1],
             "const char %s[] =" % name]
    for line in text.splitlines(keepends=True):
        escaped = line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append('        "%s"' % escaped)
    lines[-1] += ";"
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
