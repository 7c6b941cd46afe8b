/* libFuzzer harness for the settings pipeline (service/settings.h): the JSON body of
 * POST /v1/executions, which any tenant controls entirely, becomes an execution's settings.
 * The input is parsed as the HTTP layer parses a body (duplicates refused, NUL allowed inside
 * strings); bytes that are not JSON are skipped, jansson is not under test.
 *
 * Beyond "no crash, no leak", two properties the API relies on are checked:
 * - a refusal is a 400, 403 or 500 whose detail and error texts are valid UTF-8 (they go into
 *   an application/problem+json reply);
 * - accepted settings always make a RUN message the engine accepts (sbx_message_encode_run
 *   decodes what it encodes), so the pipeline never lets through what the protocol refuses. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/protocol.h"
#include "service/config.h"
#include "service/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The embedded default configuration with one tenant, as `sandboxd serve` without --config
 * runs it. Loaded once: the pipeline only reads it. */
static struct sbx_config config;

static void fail(const char *what, const char *detail)
{
        fprintf(stderr, "fuzz_settings: %s: %s\n", what, detail);
        abort();
}

static const struct sbx_tenant *fuzz_tenant(void)
{
        static bool loaded;
        if (!loaded) {
                struct sbx_error err = {0};
                static const uint8_t token_sha256[SBX_SHA256_SIZE] = {1};
                if (sbx_config_load_string(sbx_config_default_text, "<embedded>", &config, &err) <
                            0 ||
                    sbx_config_add_tenant(&config, "fuzz", "default", token_sha256, &err) < 0)
                        fail("load the embedded configuration", err.message);
                loaded = true;
        }
        return &config.tenants[0];
}

static void check_utf8(const char *what, const char *text)
{
        /* json_string() refuses invalid UTF-8: the reply would not serialise. */
        json_t *string = json_string(text);
        if (string == NULL)
                fail(what, "not valid UTF-8");
        json_decref(string);
}

static void check_problem(const struct sbx_problem *problem)
{
        if (problem->status != 400 && problem->status != 403 && problem->status != 500)
                fail("refused with an unexpected status", problem->detail);
        if (problem->slug == NULL)
                fail("refused without a slug", problem->detail);
        if (problem->n_errors > SBX_PROBLEM_MAX_ERRORS)
                fail("more errors than the problem holds", problem->detail);
        check_utf8("problem detail", problem->detail);
        for (size_t i = 0; i < problem->n_errors; i++) {
                check_utf8("problem error field", problem->errors[i].field);
                check_utf8("problem error message", problem->errors[i].message);
        }
        /* What the client gets: it must build (valid UTF-8 throughout). */
        json_t *body = sbx_problem_to_json(problem);
        if (body == NULL)
                fail("the problem body does not build", problem->detail);
        json_decref(body);
}

static void check_settings(const struct sbx_settings *settings)
{
        struct sbx_request request;
        sbx_settings_to_request(settings, &request);
        void *message = NULL;
        size_t message_len = 0;
        struct sbx_error err = {0};
        if (sbx_message_encode_run(1, settings->id, &request, &message, &message_len, &err) < 0)
                fail("accepted settings the engine protocol cannot carry", err.message);
        free(message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const struct sbx_tenant *tenant = fuzz_tenant();
        json_error_t error;
        json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                                  &error);
        if (body == NULL)
                return 0;

        struct sbx_settings *settings = NULL;
        struct sbx_problem problem;
        memset(&problem, 0, sizeof(problem));
        if (sbx_settings_build(body, tenant, &settings, &problem) == 0)
                check_settings(settings);
        else
                check_problem(&problem);
        sbx_settings_free(settings);
        json_decref(body);
        return 0;
}
