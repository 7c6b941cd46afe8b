#include "sandbox/agent.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/file.h"

static json_t *header_json(const struct sbx_spec *spec)
{
        json_t *argv = json_array();
        json_t *env = json_object();
        json_t *files = json_array();
        json_t *header = json_pack("{s:o, s:s, s:o, s:o}", "argv", argv, "main", spec->argv[1],
                                   "env", env, "files", files);
        if (header == NULL)
                return NULL;
        for (size_t i = 1; spec->argv[i] != NULL; i++)
                json_array_append_new(argv, json_string(spec->argv[i]));
        for (size_t i = 0; spec->envp[i] != NULL; i++) {
                const char *equals = strchr(spec->envp[i], '=');
                if (equals == NULL)
                        continue;
                char name[128];
                size_t length = (size_t)(equals - spec->envp[i]);
                if (length >= sizeof(name))
                        continue;
                memcpy(name, spec->envp[i], length);
                name[length] = '\0';
                json_object_set_new(env, name, json_string(equals + 1));
        }
        for (size_t i = 0; i < spec->n_files; i++)
                json_array_append_new(files,
                                      json_pack("{s:s, s:I, s:b}", "path", spec->files[i].path,
                                                "size", (json_int_t)spec->files[i].size,
                                                "executable", spec->files[i].executable));
        return header;
}

int sbx_agent_send_execution(int fd, const struct sbx_spec *spec, struct sbx_error *err)
{
        if (spec->argv[0] == NULL || spec->argv[1] == NULL)
                return sbx_error_set(err, EINVAL, "agent: no program file in argv");
        json_auto_t *header = header_json(spec);
        _cleanup_free_ char *text = header ? json_dumps(header, JSON_COMPACT) : NULL;
        if (text == NULL)
                return sbx_error_set(err, ENOMEM, "agent: encode the execution");
        size_t length = strlen(text);
        uint8_t prefix[4] = {(uint8_t)length, (uint8_t)(length >> 8), (uint8_t)(length >> 16),
                             (uint8_t)(length >> 24)};
        if (sbx_write_all(fd, prefix, sizeof(prefix)) < 0 || sbx_write_all(fd, text, length) < 0)
                return sbx_error_set(err, errno, "agent: send the execution");
        for (size_t i = 0; i < spec->n_files; i++)
                if (sbx_write_all(fd, spec->files[i].data, spec->files[i].size) < 0)
                        return sbx_error_set(err, errno, "agent: send %s", spec->files[i].path);
        return 0;
}
