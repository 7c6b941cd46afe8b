#include "sandbox/sandbox.h"

#include <string.h>

#include "model/backend.h"
#include "sandbox/gvisor/gvisor.h"
#include "sandbox/native/native.h"
#include "sandbox/uml/uml.h"
#include "util/cleanup.h"

/* The operations behind each name of model/backend.c. */
static const struct sbx_backend *const backends[] = {&sbx_native_backend, &sbx_gvisor_backend,
                                                     &sbx_uml_backend};

const struct sbx_backend *sbx_backend_find(const char *name)
{
        if (name == NULL)
                name = SBX_BACKEND_DEFAULT;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(backends); i++)
                if (strcmp(backends[i]->name, name) == 0)
                        return backends[i];
        return NULL;
}
