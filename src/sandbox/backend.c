#include "sandbox/sandbox.h"

#include <string.h>

#include "sandbox/native/native.h"

const struct sbx_backend *sbx_backend_find(const char *name)
{
        if (name == NULL || strcmp(name, "native") == 0)
                return &sbx_native_backend;
        return NULL;
}

void sbx_run_free(struct sbx_run *run)
{
        sbx_buffer_free(&run->out);
        sbx_buffer_free(&run->err);
}
