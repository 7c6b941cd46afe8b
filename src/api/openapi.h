/* The OpenAPI 3.1 document of the HTTP API, served as-is by GET /v1/openapi.json.
 *
 * It describes exactly what the server does: every path and method, the request schema of
 * POST /v1/executions (unknown fields refused), the result and audit-record schemas (every field,
 * no others), the problem+json body of every error, bearer authentication, and the headers that
 * go with 401 (WWW-Authenticate), 405 (Allow) and 429 (Retry-After). The schemas are JSON Schema
 * draft 2020-12 and precise enough that the integration tests validate real responses against
 * them: change the server and this document together. */
#pragma once

#include <stddef.h>

/* The Content-Type of the document. */
#define SBX_OPENAPI_CONTENT_TYPE "application/json"

/* The document as NUL-terminated JSON text (made at the first call, by whichever thread; never
 * freed), or NULL when it could not be made (memory ran out). */
const char *sbx_openapi_json(void);

/* Its length in bytes, without the NUL (0 when there is no document). */
size_t sbx_openapi_json_length(void);
