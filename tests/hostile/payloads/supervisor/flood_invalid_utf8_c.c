/* Output flood of invalid UTF-8: only bytes that are invalid on their own (0xff, 0xfe, lone
 * continuation bytes, the never-valid leads 0xc0/0xc1/0xf5), so each must become exactly one
 * U+FFFD in the JSON result and the kept length is still exactly the cap. */
#include <unistd.h>

int main(void)
{
        static const unsigned char bad[] = {0xff, 0xfe, 0x80, 0xbf, 0xc0, 0xc1, 0xf5, 0xa0};
        unsigned char buf[65536];
        for (unsigned i = 0; i < sizeof buf; i++)
                buf[i] = bad[i % sizeof bad];
        for (;;)
                if (write(1, buf, sizeof buf) < 0)
                        return 1;
}
