/* libFuzzer harness for the configuration loader (service/config.h): sbx_config_load_string on
 * arbitrary text, then sbx_config_free, which must release everything a load (complete or failed
 * halfway) allocated. A failure must leave the config zeroed, as the header promises. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
        fprintf(stderr, "fuzz_config: %s: %s\n", what, detail);
        abort();
}

/* Zeroed as far as anyone can tell: nothing owned, nothing counted (padding may differ). */
static bool looks_zeroed(const struct sbx_config *config)
{
        return config->server.listen == NULL && config->server.data_dir == NULL &&
               config->tiers == NULL && config->n_tiers == 0 && config->tenants == NULL &&
               config->n_tenants == 0 && config->n_pools == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* The loader takes a C string: a NUL in the input ends the text there. */
        char *text = malloc(size + 1);
        if (text == NULL)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';

        struct sbx_config config;
        struct sbx_error err = {0};
        if (sbx_config_load_string(text, "<fuzz>", &config, &err) < 0) {
                if (!looks_zeroed(&config))
                        fail("a failed load left the config set", err.message);
        } else {
                /* Every tenant's tier pointer must point into the loaded tiers. */
                for (size_t i = 0; i < config.n_tenants; i++)
                        if (sbx_config_find_tier(&config, config.tenants[i].tier->name) !=
                            config.tenants[i].tier)
                                fail("a tenant's tier is not among the tiers",
                                     config.tenants[i].name);
        }
        sbx_config_free(&config);
        free(text);
        return 0;
}
