#include "util/hex.h"

#include <string.h>

void sbx_hex_encode(const uint8_t *bytes, size_t n, char *out)
{
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[bytes[i] >> 4];
                out[2 * i + 1] = digits[bytes[i] & 0x0f];
        }
        out[2 * n] = '\0';
}

static int digit_value(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

bool sbx_hex_decode(const char *hex, uint8_t *bytes, size_t n)
{
        if (hex == NULL || strnlen(hex, 2 * n + 1) != 2 * n)
                return false;
        /* Every digit is checked before any byte is written: bytes stays untouched on failure. */
        for (size_t i = 0; i < 2 * n; i++)
                if (digit_value(hex[i]) < 0)
                        return false;
        for (size_t i = 0; i < n; i++)
                bytes[i] = (uint8_t)(digit_value(hex[2 * i]) << 4 | digit_value(hex[2 * i + 1]));
        return true;
}
