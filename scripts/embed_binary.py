#!/usr/bin/env python3
"""Build step: writes a C file defining `const unsigned char NAME[]` with the bytes of a file and
`const size_t NAME_size`.

usage: embed_binary.py INPUT OUTPUT NAME
"""
import sys


def main():
    source, output, name = sys.argv[1:4]
    with open(source, "rb") as f:
        data = f.read()
    lines = ["/* Generated from %s by scripts/embed_binary.py: do not edit. */" % source.split("/")[-1],
             "#include <stddef.h>",
             "",
             "const unsigned char %s[] = {" % name]
    for at in range(0, len(data), 16):
        lines.append("        " + " ".join("0x%02x," % byte for byte in data[at:at + 16]))
    lines.append("};")
    lines.append("const size_t %s_size = %d;" % (name, len(data)))
    with open(output, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
