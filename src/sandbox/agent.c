#include "sandbox/agent.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/buffer.h"
#include "util/file.h"

/* The header never holds file contents, only names and numbers, and every request field in it is
 * bounded (SBX_MAX_* of engine/execution.h): 4 MiB is far beyond any valid one. */
#define AGENT_HEADER_MAX (4u * 1024u * 1024u)

static int put_field(struct sbx_buffer *header, const char *field)
{
        return sbx_buffer_append(header, field, strlen(field) + 1); /* with its NUL */
}

static int put_number(struct sbx_buffer *header, uint64_t value)
{
        char text[24];
        snprintf(text, sizeof(text), "%" PRIu64, value);
        return put_field(header, text);
}

static int build_header(const struct sbx_spec *spec, struct sbx_buffer *header)
{
        size_t n_argv = 0, n_env = 0;
        while (spec->argv[1 + n_argv] != NULL)
                n_argv++;
        while (spec->envp[n_env] != NULL)
                n_env++;
        int rc = put_number(header, n_argv);
        for (size_t i = 0; i < n_argv && rc == 0; i++)
                rc = put_field(header, spec->argv[1 + i]);
        rc = rc < 0 ? rc : put_number(header, n_env);
        for (size_t i = 0; i < n_env && rc == 0; i++)
                rc = put_field(header, spec->envp[i]);
        rc = rc < 0 ? rc : put_number(header, spec->n_files);
        for (size_t i = 0; i < spec->n_files && rc == 0; i++) {
                rc = put_field(header, spec->files[i].path);
                rc = rc < 0 ? rc : put_number(header, spec->files[i].size);
                rc = rc < 0 ? rc : put_field(header, spec->files[i].executable ? "1" : "0");
        }
        rc = rc < 0 ? rc : put_field(header, spec->argv[1]);
        return rc < 0 || header->overflow ? -1 : 0;
}

int sbx_agent_send_execution(int fd, const struct sbx_spec *spec, struct sbx_error *err)
{
        if (spec->argv[0] == NULL || spec->argv[1] == NULL)
                return sbx_error_set(err, EINVAL, "agent: no program file in argv");
        struct sbx_buffer header;
        sbx_buffer_init(&header, AGENT_HEADER_MAX);
        if (build_header(spec, &header) < 0) {
                sbx_buffer_free(&header);
                return sbx_error_set(err, E2BIG, "agent: the execution does not fit a header");
        }
        /* The last field's NUL is the loader's split point too: it is not sent. */
        size_t length = header.len - 1;
        uint8_t prefix[4] = {(uint8_t)length, (uint8_t)(length >> 8), (uint8_t)(length >> 16),
                             (uint8_t)(length >> 24)};
        int rc = 0;
        if (sbx_write_all(fd, prefix, sizeof(prefix)) < 0 ||
            sbx_write_all(fd, header.data, length) < 0)
                rc = sbx_error_set(err, errno, "agent: send the execution");
        sbx_buffer_free(&header);
        for (size_t i = 0; rc == 0 && i < spec->n_files; i++)
                if (sbx_write_all(fd, spec->files[i].data, spec->files[i].size) < 0)
                        rc = sbx_error_set(err, errno, "agent: send %s", spec->files[i].path);
        return rc;
}
