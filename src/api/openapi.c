#include "api/openapi.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "api/languages.h"
#include "model/language.h"
#include "model/limits.h"
#include "model/result_json.h"
#include "util/cleanup.h"

/* The document is the template below with its null placeholders filled from the tables the
 * server itself runs on (see generate()): the limit schemas from model/limits.h, the language and
 * backend enums from model/language.c and model/backend.c, the Usage, Evidence and Timing schemas
 * from what sbx_result_to_json writes (model/result_json.h, whose lists the records' rows make). So
 * the document cannot drift from them, and a unit test (tests/unit/test_openapi.c) checks it
 * against the tables again.
 *
 * The template is written below as plain JSON, not as an escaped C string: the preprocessor's
 * # operator turns the tokens into a string literal, escaping every quote and backslash itself.
 * That works because JSON is made of tokens C also has (string literals, numbers, punctuators,
 * and the identifiers true/false/null, which # does not macro-expand), and it keeps the document
 * readable and diffable. The cost: line breaks become single spaces, which JSON does not mind.
 * Regular expressions in the document are written with JSON escapes ("\\." is the regex \.). */
#define JSON_TEXT(...) #__VA_ARGS__

// clang-format off
static const char openapi_template[] = JSON_TEXT(
{
  "openapi": "3.1.0",
  "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
  "info": {
    "title": "sandboxd",
    "version": "1.0.0",
    "summary": "Run untrusted code in a kernel-enforced sandbox.",
    "description": "Errors are RFC 9457 application/problem+json bodies. A request to a path that does not exist answers 404, a method a path does not support answers 405 with an Allow header; both with a problem body. Every GET also answers HEAD (the same headers, no body). A request the server has no room for, or takes while shutting down, answers 503 with Retry-After; nothing was run then, and no audit record is kept.",
    "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}
  },
  "security": [{"bearer": []}],
  "paths": {
    "/v1/executions": {
      "post": {
        "operationId": "createExecution",
        "summary": "Run code in a fresh sandbox and return its result (or, asynchronously, queue it).",
        "description": "Limits above the tenant tier's ceilings are clamped, not refused; the response lists them in clamped and reports the effective limits. With \"wait\": false or the header Prefer: respond-async the execution is committed to the queue and answered 202 at once: GET /v1/executions/{id} (Location) then shows it queued, running, or its record with the output. Queued executions run per tenant in order, tenants taking turns, each within its max_concurrency and CPU budget; a tier's max_queued bounds how many of a tenant's wait (429 past it). An accepted one is never lost: after a crash the queued ones run, and those that were running are recorded interrupted (or run again with \"retry\": true).",
        "parameters": [
          {"name": "Prefer", "in": "header", "required": false, "description": "respond-async: as \"wait\": false.", "schema": {"type": "string"}}
        ],
        "requestBody": {
          "required": true,
          "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ExecutionRequest"}}
          }
        },
        "responses": {
          "200": {
            "description": "The execution ran, or started: status internal_error when sandboxd failed to set it up, canceled when the server's shutdown stopped it. Either way it has an audit record.",
            "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/ExecutionResult"}},
              "text/event-stream": {"schema": {"type": "string", "description": "With Accept: text/event-stream, Server-Sent Events as the program runs: stdout and stderr events ({\"text\"}) as it writes, within the output cap, cut at UTF-8 character ends; then one last event, end (the ExecutionResult) or problem (a problem body: the engine gave no result). A client that hangs up cancels the execution (status canceled). Refusals before the run (400, 401, 429, ...) are plain problem responses."}}
            }
          },
          "202": {
            "description": "Queued (\"wait\": false or Prefer: respond-async): committed to the store's queue; Location names the execution.",
            "headers": {"Location": {"schema": {"type": "string"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ExecutionQueued"}}}
          },
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "415": {"$ref": "#/components/responses/UnsupportedMediaType"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      },
      "get": {
        "operationId": "listExecutions",
        "summary": "The caller's most recent executions, newest first: their audit records without stdout, stderr and compile (GET /v1/executions/{id} has them).",
        "parameters": [
          {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
          {"name": "before", "in": "query", "required": false, "description": "Only those created before this time (milliseconds since the epoch): the created_at of a page's last one gives the next page.", "schema": {"type": "integer", "minimum": 0}}
        ],
        "responses": {
          "200": {"description": "The records.", "content": {"application/json": {"schema": {"type": "object", "required": ["executions"], "properties": {"executions": {"type": "array", "items": {"type": "object", "description": "An AuditRecord without stdout, stderr and compile."}}}}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/executions/{id}": {
      "get": {
        "operationId": "getExecution",
        "summary": "The audit record of an execution of the caller's tenant (status queued while it waits, running while it runs).",
        "parameters": [
          {
            "name": "id",
            "in": "path",
            "required": true,
            "description": "The id a POST /v1/executions response carried. An id of another tenant answers 404, like an unknown one.",
            "schema": {"type": "string"}
          },
          {
            "name": "wait",
            "in": "query",
            "required": false,
            "description": "Long poll: while the execution is queued or running (asynchronously), wait up to this many seconds for its end before answering.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 60}
          }
        ],
        "responses": {
          "200": {
            "description": "The audit record.",
            "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/AuditRecord"}}
            }
          },
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      },
      "delete": {
        "operationId": "cancelExecution",
        "summary": "Cancel a queued or running asynchronous execution; answers its record (status canceled, unless it ended first).",
        "parameters": [
          {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}
        ],
        "responses": {
          "200": {
            "description": "The record after the cancel: a queued one never runs; a running one's sandbox is killed (the answer waits up to 10 s for its end).",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AuditRecord"}}}
          },
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/batches": {
      "post": {
        "operationId": "createBatch",
        "summary": "Queue many executions at once: test cases of one program, or a list of executions.",
        "description": "{program, cases, compare}: each case runs the program (language, code or files and entrypoint, compile_limits, env, backend, network, retry) with its stdin, args and limits in a fresh sandbox, and is judged against its expected_stdout with compare (exact, trim: trailing whitespace of lines and trailing blank lines aside, tokens; default trim): accepted, wrong_answer, or the run's own status (timeout, memory_limit, compile_error, ...). A compiled program compiles once (its first case runs first; the others take the artifact from the compile cache). Every case must be valid, or the batch is refused with the offending cases[i].field or program.field. {executions: [...]}: independent POST /v1/executions bodies, each validated on its own: the invalid ones are answered in rejected, the others run (none valid: 400 with rejected). All of a batch is committed to the queue in one transaction before the 202; its executions count against the tenant's max_queued and run as asynchronous executions do.",
        "requestBody": {
          "required": true,
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchRequest"}}}
        },
        "responses": {
          "202": {
            "description": "Queued. Location names the batch.",
            "headers": {"Location": {"schema": {"type": "string"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchQueued"}}}
          },
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/batches/{id}": {
      "get": {
        "operationId": "getBatch",
        "summary": "A batch of the caller's tenant: counts by verdict, whether it is done, and each case's result.",
        "parameters": [
          {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
          {"name": "fields", "in": "query", "required": false, "description": "Comma-separated members each result keeps besides index: id, status, verdict, exit_code, signal, error, stdout, stderr, usage, timing.", "schema": {"type": "string"}}
        ],
        "responses": {
          "200": {
            "description": "The batch.",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Batch"}}}
          },
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/webhooks/deliveries": {
      "get": {
        "operationId": "listWebhookDeliveries",
        "summary": "The caller's webhook deliveries, newest first (at most 1000).",
        "parameters": [
          {"name": "status", "in": "query", "required": false, "schema": {"type": "string", "enum": ["pending", "delivered", "failed"]}}
        ],
        "responses": {
          "200": {
            "description": "The deliveries.",
            "content": {"application/json": {"schema": {"type": "object", "required": ["deliveries"], "properties": {"deliveries": {"type": "array", "items": {"$ref": "#/components/schemas/WebhookDelivery"}}}}}}
          },
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/webhooks/deliveries/{id}/retry": {
      "post": {
        "operationId": "retryWebhookDelivery",
        "summary": "Send a failed delivery again (its attempts counted anew).",
        "parameters": [
          {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}
        ],
        "responses": {
          "202": {"description": "Pending again.", "content": {"application/json": {"schema": {"type": "object", "required": ["id", "status"], "properties": {"id": {"type": "string"}, "status": {"const": "pending"}}}}}},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/languages": {
      "get": {
        "operationId": "listLanguages",
        "summary": "Every language a request may name, with its aliases, its toolchain's version and whether the caller's tier allows it.",
        "responses": {
          "200": {
            "description": "The languages, in the server's order.",
            "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/LanguageList"}}
            }
          },
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "500": {"$ref": "#/components/responses/Internal"}
        }
      }
    },
    "/v1/sessions": {
      "post": {
        "operationId": "createSession",
        "summary": "Open a session: a sandbox kept for many runs, with a persistent Python interpreter or bash shell.",
        "description": "Limits above the tier's ceilings are clamped (listed in clamped). A tier allows max_sessions open sessions per tenant (429 past it). The session ends when deleted, after idle_timeout_s without a run or file operation, at max_lifetime_s, or when its interpreter's keeper dies; an ended session answers 404 with end_reason.",
        "requestBody": {
          "required": true,
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SessionRequest"}}}
        },
        "responses": {
          "201": {"description": "Open.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Session"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      },
      "get": {
        "operationId": "listSessions",
        "summary": "The caller's open sessions.",
        "responses": {
          "200": {"description": "Open sessions.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SessionList"}}}},
          "401": {"$ref": "#/components/responses/Unauthorized"}
        }
      }
    },
    "/v1/sessions/{id}": {
      "parameters": [{"$ref": "#/components/parameters/SessionId"}],
      "get": {
        "operationId": "getSession",
        "summary": "One open session of the caller's.",
        "responses": {
          "200": {"description": "The session.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Session"}}}},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"}
        }
      },
      "delete": {
        "operationId": "deleteSession",
        "summary": "End the session: its sandbox and everything in it are destroyed.",
        "responses": {
          "204": {"description": "Ended."},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      }
    },
    "/v1/sessions/{id}/run": {
      "parameters": [{"$ref": "#/components/parameters/SessionId"}],
      "post": {
        "operationId": "runInSession",
        "summary": "Run code in the session; globals (Python) or variables (bash) survive between runs.",
        "description": "A run past timeout_ms is interrupted (KeyboardInterrupt; SIGINT to bash's foreground command); one that does not stop within 2 s, or whose interpreter the memory cap killed, gets a fresh interpreter (restarted true; files stay). Each run counts against the tier's max_concurrency and CPU budget, and is audited: GET /v1/executions/{id} answers for its id.",
        "requestBody": {
          "required": true,
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SessionRunRequest"}}}
        },
        "responses": {
          "200": {"description": "The run's result.", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/SessionRunResult"}},
            "text/event-stream": {"schema": {"type": "string", "description": "With Accept: text/event-stream, Server-Sent Events as the run goes: stdout, stderr, result (a display or the last expression's value) and error events, then end (the SessionRunResult) or problem. A client that hangs up cancels the run."}}
          }},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/sessions/{id}/files": {
      "parameters": [
        {"$ref": "#/components/parameters/SessionId"},
        {"name": "path", "in": "query", "required": false, "description": "A directory under /workspace (relative, or absolute under it); default the workspace.", "schema": {"type": "string"}}
      ],
      "get": {
        "operationId": "listSessionFiles",
        "summary": "The entries of a directory of the session's workspace.",
        "responses": {
          "200": {"description": "The listing.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileListing"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      }
    },
    "/v1/sessions/{id}/files/{path}": {
      "parameters": [
        {"$ref": "#/components/parameters/SessionId"},
        {"name": "path", "in": "path", "required": true, "description": "A file under /workspace. A path that leaves it (.., an absolute path elsewhere, a symlink), a FIFO or a device answers 400 naming the path.", "schema": {"type": "string"}}
      ],
      "put": {
        "operationId": "putSessionFile",
        "summary": "Write the raw body to the file (directories are made); ?mode=0755 sets its mode. A file that does not fit the session's disk answers 413 and leaves nothing.",
        "parameters": [{"name": "mode", "in": "query", "required": false, "schema": {"type": "string", "pattern": "^[0-7]{1,4}$"}}],
        "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        "responses": {
          "201": {"description": "Written.", "content": {"application/json": {"schema": {"type": "object", "required": ["path", "size"], "properties": {"path": {"type": "string"}, "size": {"type": "integer", "minimum": 0}}}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"}
        }
      },
      "get": {
        "operationId": "getSessionFile",
        "summary": "The file's bytes, with a content type from its name.",
        "responses": {
          "200": {"description": "The file.", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"}
        }
      },
      "delete": {
        "operationId": "deleteSessionFile",
        "summary": "Remove the file (or an empty directory).",
        "responses": {
          "204": {"description": "Removed."},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      }
    },
    "/v1/episodes": {
      "post": {
        "operationId": "createEpisodes",
        "summary": "Open an RL episode: a Gymnasium-shaped environment (a class with reset and step, or module-level reset and step functions) in a sandbox of its own, reset once.",
        "description": "The environment's module is imported once and lives on between steps. With count K, K identical environments open side by side (seeds seed + i) and the answer lists them; all open or none. A tier allows max_episodes open episodes per tenant (429 past it); an environment whose first reset raises answers 422 with its error. The episode ends when deleted, after idle_timeout_s without an operation, at max_lifetime_s, or at a step past step_timeout_ms.",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EpisodeRequest"}}}},
        "responses": {
          "201": {"description": "Open, with the first reset's observation.", "content": {"application/json": {"schema": {"oneOf": [
            {"$ref": "#/components/schemas/EpisodeOpened"},
            {"type": "object", "required": ["episodes"], "properties": {"episodes": {"type": "array", "items": {"$ref": "#/components/schemas/EpisodeOpened"}}}}
          ]}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "422": {"$ref": "#/components/responses/EnvironmentFailed"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      },
      "get": {
        "operationId": "listEpisodes",
        "summary": "The caller's open episodes.",
        "responses": {
          "200": {"description": "Open episodes.", "content": {"application/json": {"schema": {"type": "object", "required": ["episodes"], "properties": {"episodes": {"type": "array", "items": {"$ref": "#/components/schemas/Episode"}}}}}}},
          "401": {"$ref": "#/components/responses/Unauthorized"}
        }
      }
    },
    "/v1/episodes/step": {
      "post": {
        "operationId": "stepEpisodes",
        "summary": "Step many episodes of the caller's in one round trip, side by side; each item answers on its own, in order.",
        "description": "The steps run at once up to the tier's max_concurrency, in waves past it. An item that cannot run (an unknown or ended episode, one that failed or is done, one already stepping) answers status rejected with its problem; the others are unaffected.",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "additionalProperties": false, "required": ["steps"],
          "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "object", "additionalProperties": false, "required": ["id", "action"], "properties": {"id": {"type": "string"}, "action": {"$ref": "#/components/schemas/EpisodeValue"}}}}}
        }}}},
        "responses": {
          "200": {"description": "One answer per item.", "content": {"application/json": {"schema": {"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": {"oneOf": [
            {"$ref": "#/components/schemas/EpisodeStep"},
            {"type": "object", "required": ["id", "status", "problem"], "properties": {"id": {}, "status": {"const": "rejected"}, "problem": {"$ref": "#/components/schemas/Problem"}}}
          ]}}}}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"}
        }
      }
    },
    "/v1/episodes/{id}": {
      "parameters": [{"$ref": "#/components/parameters/EpisodeId"}],
      "get": {
        "operationId": "getEpisode",
        "summary": "One open episode: its state, steps and total reward since its last reset, and over its life.",
        "responses": {
          "200": {"description": "The episode.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Episode"}}}},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"}
        }
      },
      "delete": {
        "operationId": "deleteEpisode",
        "summary": "Call the environment's close() and destroy its sandbox; a step in progress is canceled (it answers status canceled). close() runs as a step does (a concurrency slot, its CPU charged): a tenant at its concurrency or out of CPU budget has the episode deleted without it.",
        "responses": {
          "204": {"description": "Ended."},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      }
    },
    "/v1/episodes/{id}/step": {
      "parameters": [{"$ref": "#/components/parameters/EpisodeId"}],
      "post": {
        "operationId": "stepEpisode",
        "summary": "One step: the action in, (observation, reward, terminated, truncated, info) out.",
        "description": "An exception in step answers status error with the environment's traceback, and the episode is failed until a reset; a step past step_timeout_ms answers status timeout and ends the episode; the memory cap's kill answers memory_limit (failed until a reset). A step of a failed or done episode (terminated, truncated, max_steps) is 409. Each step counts against max_concurrency while it runs; its CPU is charged to the CPU budget.",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "additionalProperties": false, "required": ["action"], "properties": {"action": {"$ref": "#/components/schemas/EpisodeValue"}}}}}},
        "responses": {
          "200": {"description": "The step's outcome.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EpisodeStep"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/episodes/{id}/reset": {
      "parameters": [{"$ref": "#/components/parameters/EpisodeId"}],
      "post": {
        "operationId": "resetEpisode",
        "summary": "reset(seed, options): a new episode of the same environment (a failed one's module is imported anew).",
        "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object", "additionalProperties": false, "properties": {"seed": {"type": ["integer", "null"]}, "options": {"$ref": "#/components/schemas/EpisodeValue"}}}}}},
        "responses": {
          "200": {"description": "The first observation.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EpisodeStep"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"},
          "429": {"$ref": "#/components/responses/QuotaExceeded"},
          "500": {"$ref": "#/components/responses/Internal"},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/v1/episodes/{id}/files": {
      "parameters": [
        {"$ref": "#/components/parameters/EpisodeId"},
        {"name": "path", "in": "query", "required": false, "schema": {"type": "string"}}
      ],
      "get": {
        "operationId": "listEpisodeFiles",
        "summary": "As GET /v1/sessions/{id}/files, for the episode's /workspace (replay buffers, checkpoints).",
        "responses": {
          "200": {"description": "The listing.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileListing"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      }
    },
    "/v1/episodes/{id}/files/{path}": {
      "parameters": [
        {"$ref": "#/components/parameters/EpisodeId"},
        {"name": "path", "in": "path", "required": true, "schema": {"type": "string"}}
      ],
      "get": {
        "operationId": "getEpisodeFile",
        "summary": "As GET /v1/sessions/{id}/files/{path}.",
        "responses": {
          "200": {"description": "The file.", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      },
      "put": {
        "operationId": "putEpisodeFile",
        "summary": "As PUT /v1/sessions/{id}/files/{path}.",
        "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        "responses": {
          "201": {"description": "Written.", "content": {"application/json": {"schema": {"type": "object", "required": ["path", "size"]}}}},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "413": {"$ref": "#/components/responses/PayloadTooLarge"}
        }
      },
      "delete": {
        "operationId": "deleteEpisodeFile",
        "summary": "As DELETE /v1/sessions/{id}/files/{path}.",
        "responses": {
          "204": {"description": "Removed."},
          "400": {"$ref": "#/components/responses/InvalidRequest"},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "421": {"$ref": "#/components/responses/Misdirected"},
          "409": {"$ref": "#/components/responses/Conflict"}
        }
      }
    },
    "/health": {
      "get": {
        "operationId": "getHealth",
        "summary": "Liveness, and whether the engine answers a ping.",
        "security": [],
        "responses": {
          "200": {
            "description": "The API and the engine are up.",
            "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/Health"}}
            }
          },
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/metrics": {
      "get": {
        "operationId": "getMetrics",
        "summary": "Prometheus metrics, text exposition format 0.0.4.",
        "description": "Open to anyone unless the server is configured with server.metrics_token_sha256; then only the bearer of that token (not a tenant's) may read it: the figures name every tenant.",
        "security": [{}, {"bearer": []}],
        "responses": {
          "200": {
            "description": "sandboxd_executions_total, sandboxd_phase_duration_seconds, sandboxd_quota_rejections_total, sandboxd_sandboxes_alive, sandboxd_pool_entries, sandboxd_pool_created_total, sandboxd_pool_destroyed_total, sandboxd_pool_hits_total, sandboxd_pool_misses_total, sandboxd_pool_refill_seconds, sandboxd_http_requests_total.",
            "content": {"text/plain": {"schema": {"type": "string"}}}
          },
          "401": {"$ref": "#/components/responses/Unauthorized"}
        }
      }
    },
    "/v1/openapi.json": {
      "get": {
        "operationId": "getOpenApi",
        "summary": "This document.",
        "security": [],
        "responses": {
          "200": {
            "description": "The OpenAPI 3.1 document.",
            "content": {"application/json": {"schema": {"type": "object"}}}
          }
        }
      }
    }
  },
  "components": {
    "securitySchemes": {
      "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A tenant token (sbx_...), as printed by `sandboxd token`; the server stores only its SHA-256."
      }
    },
    "headers": {
      "RetryAfter": {
        "description": "Seconds until the quota or the server that refused the request is expected to have room again: from how long recent executions took, never past the running ones' deadlines, at least 1.",
        "required": true,
        "schema": {"type": "integer", "minimum": 1}
      },
      "Allow": {
        "description": "The methods the path supports.",
        "required": true,
        "schema": {"type": "string"}
      },
      "WwwAuthenticate": {
        "description": "The authentication scheme to use.",
        "required": true,
        "schema": {"type": "string", "pattern": "^Bearer"}
      }
    },
    "parameters": {
      "SessionId": {"name": "id", "in": "path", "required": true, "description": "The id POST /v1/sessions answered. Another tenant's id answers 404, like an unknown one.", "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"}},
      "EpisodeId": {"name": "id", "in": "path", "required": true, "description": "The id POST /v1/episodes answered. Another tenant's id, or a session's, answers 404, like an unknown one.", "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"}}
    },
    "responses": {
      "Conflict": {
        "description": "Another run or file operation of this session is in progress: one at a time.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "EnvironmentFailed": {
        "description": "The environment could not be made or its first reset did not succeed (an exception, a timeout, a cap): error is its {name, value, traceback}, reset_status the reset's status; nothing stays open.",
        "content": {
          "application/problem+json": {"schema": {"allOf": [{"$ref": "#/components/schemas/Problem"}, {"type": "object", "required": ["error", "reset_status"], "properties": {"error": {"type": ["object", "null"]}, "reset_status": {"type": "string"}}}]}}
        }
      },
      "InvalidRequest": {
        "description": "Malformed JSON, a wrong type, an unknown field, a bad value or an unknown language; errors names each field.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "Unauthorized": {
        "description": "The bearer token is missing or matches no tenant.",
        "headers": {"WWW-Authenticate": {"$ref": "#/components/headers/WwwAuthenticate"}},
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "Forbidden": {
        "description": "The language or backend is not allowed for the tenant's tier.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "NotFound": {
        "description": "No execution, session or episode with this id for this tenant. type node-gone: in a fleet ([store] url), the session or episode lived on a node that died (node names it, node_alive_until when its liveness lapsed): its sandbox and state are lost.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "Misdirected": {
        "description": "In a fleet ([store] url): the session or episode lives on another node, which is alive (node names it), and this node could not forward the request there (the request came forwarded already, or that node could not be reached at the address it advertises); a request that can be forwarded is answered by the holder itself.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "MethodNotAllowed": {
        "description": "The path exists but not with this method (not listed per operation: it applies to every path).",
        "headers": {"Allow": {"$ref": "#/components/headers/Allow"}},
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "PayloadTooLarge": {
        "description": "The body is larger than server.max_body_bytes.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "UnsupportedMediaType": {
        "description": "The body is not application/json.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "QuotaExceeded": {
        "description": "The tenant is at its concurrency limit or has used its CPU budget for the rolling window. Nothing is queued: retry after Retry-After seconds.",
        "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "Internal": {
        "description": "sandboxd failed in a way the request did not cause.",
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      },
      "Unavailable": {
        "description": "Nothing was run (unless execution_id names a record that says otherwise). type at-capacity: the server runs server.max_sandboxes executions; shutting-down: SIGTERM arrived and running executions are finishing; store-unavailable: the fleet's PostgreSQL store ([store] url) cannot be reached, so no quota can be checked and no record read or written; engine-unavailable: the engine process is gone or did not answer in time (then execution_id names the execution, which may have run: its record says what is known).",
        "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
        "content": {
          "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
      }
    },
    "schemas": {
      "SessionRequest": {
        "type": "object",
        "additionalProperties": false,
        "required": ["language"],
        "properties": {
          "language": {"type": "string", "enum": ["python", "bash"]},
          "limits": {"type": "object", "description": "As an execution's limits (memory_mb, pids, disk_mb, open_files for the session's life; wall_ms and output_bytes as each run's defaults), except cpu_ms: a run's CPU is measured instead.", "additionalProperties": {"type": "integer", "minimum": 1}},
          "env": {"type": "object", "maxProperties": 64, "additionalProperties": {"type": "string"}},
          "files": {"type": "array", "maxItems": 64, "items": {"$ref": "#/components/schemas/File"}},
          "idle_timeout_s": {"type": "integer", "minimum": 1, "maximum": 86400, "default": 300},
          "max_lifetime_s": {"type": "integer", "minimum": 1, "description": "At most the tier's max_session_lifetime_s, which is also the default."}
        }
      },
      "Session": {
        "type": "object",
        "required": ["id", "language", "state", "created_at", "last_activity_at", "expires_at", "idle_timeout_s", "limits", "clamped", "pooled"],
        "properties": {
          "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
          "language": {"type": "string", "enum": ["python", "bash"]},
          "state": {"type": "string", "enum": ["idle", "running"]},
          "created_at": {"type": "integer", "description": "Milliseconds since the Unix epoch."},
          "last_activity_at": {"type": "integer"},
          "expires_at": {"type": "integer", "description": "When max_lifetime_s ends it."},
          "idle_timeout_s": {"type": "integer"},
          "limits": {"$ref": "#/components/schemas/EffectiveLimits"},
          "pooled": {"type": "boolean", "description": "The session took one its session pool ([session_pool.LANGUAGE]) opened ahead of time."},
          "clamped": {"type": "array", "items": {"type": "string"}}
        }
      },
      "SessionList": {
        "type": "object",
        "required": ["sessions"],
        "properties": {"sessions": {"type": "array", "items": {"$ref": "#/components/schemas/Session"}}}
      },
      "SessionRunRequest": {
        "type": "object",
        "additionalProperties": false,
        "required": ["code"],
        "properties": {
          "code": {"type": "string", "maxLength": 4194304},
          "stdin": {"type": "string", "description": "What the run reads on its standard input."},
          "env": {"type": "object", "maxProperties": 64, "additionalProperties": {"type": "string"}, "description": "For this run only."},
          "timeout_ms": {"type": "integer", "minimum": 1, "description": "Default the session's wall_ms; at most the tier's max_wall_ms."}
        }
      },
      "MimeBundle": {
        "type": "object",
        "description": "A rich output, like Jupyter's display_data: text/plain always; text/html, text/markdown, image/png (base64), image/svg+xml, application/json and others where the object has them.",
        "required": ["text/plain"],
        "additionalProperties": true
      },
      "SessionRunResult": {
        "type": "object",
        "required": ["id", "session_id", "status", "stdout", "stderr", "truncated", "results", "results_truncated", "error", "exit_code", "execution_count", "restarted", "evidence", "usage", "timing"],
        "properties": {
          "id": {"$ref": "#/components/schemas/ExecutionId"},
          "session_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
          "status": {"type": "string", "enum": ["ok", "error", "exit_nonzero", "timeout", "memory_limit", "pids_limit", "output_limit", "disk_full", "canceled", "internal_error"]},
          "stdout": {"type": "string"},
          "stderr": {"type": "string"},
          "truncated": {"type": "object", "required": ["stdout", "stderr"], "properties": {"stdout": {"type": "boolean"}, "stderr": {"type": "boolean"}}},
          "results": {"type": "array", "items": {"$ref": "#/components/schemas/MimeBundle"}},
          "results_truncated": {"type": "boolean"},
          "error": {
            "oneOf": [
              {"type": "null"},
              {"type": "object", "required": ["name", "value", "traceback"], "properties": {"name": {"type": "string"}, "value": {"type": "string"}, "traceback": {"type": "array", "items": {"type": "string"}}}}
            ]
          },
          "exit_code": {"type": ["integer", "null"], "description": "bash: the cell's status."},
          "execution_count": {"type": ["integer", "null"]},
          "restarted": {"type": "boolean", "description": "The interpreter was restarted: variables are gone, files stay."},
          "evidence": {"type": ["object", "null"], "description": "The kernel's counters for this run (deltas; memory_peak_bytes and pids_peak: the session's so far)."},
          "usage": {"type": "object", "required": ["cpu_ms", "memory_peak_bytes", "session_cpu_ms"], "properties": {"cpu_ms": {"type": "integer", "description": "The run's CPU (its processes and the interpreter, as the session's cgroup counted it)."}, "memory_peak_bytes": {"type": "integer"}, "session_cpu_ms": {"type": "integer", "description": "The session's CPU over its life so far, background processes between runs included. The tenant's CPU budget is charged all of it: each run charges its own CPU and what was used since the previous run; the session's end charges the rest."}}},
          "timing": {"type": "object", "required": ["total_us"], "properties": {"total_us": {"type": "integer"}}},
          "internal_error": {"type": "string"}
        }
      },
      "EpisodeValue": {
        "description": "An observation, action, info or option: any JSON value; bytes travel as {\"$bytes\": base64}, numpy arrays as {\"$ndarray\": {dtype, shape, data (base64, C order)}}, a float that is not finite as {\"$float\": \"nan\" | \"inf\" | \"-inf\"}, both ways."
      },
      "EpisodeRequest": {
        "type": "object",
        "additionalProperties": false,
        "description": "Either code (the module env.py) or files with an entrypoint naming the environment's module.",
        "properties": {
          "language": {"const": "python"},
          "code": {"type": "string", "maxLength": 4194304},
          "files": {"type": "array", "maxItems": 64, "items": {"$ref": "#/components/schemas/File"}},
          "entrypoint": {"type": "string", "description": "A relative path of a .py file among files; its directory is first on sys.path."},
          "env_class": {"type": ["string", "null"], "description": "The environment's class in the module (instantiated with no arguments); absent: the module's own reset and step functions."},
          "seed": {"type": ["integer", "null"], "description": "The first reset's seed (episode i of a count: seed + i)."},
          "options": {"$ref": "#/components/schemas/EpisodeValue"},
          "limits": {"type": "object", "description": "As a session's: caps for the episode's life.", "additionalProperties": {"type": "integer", "minimum": 1}},
          "step_timeout_ms": {"type": "integer", "minimum": 1, "description": "A step's deadline; default the limits' wall_ms, at most the tier's max_wall_ms."},
          "max_steps": {"type": ["integer", "null"], "minimum": 1, "description": "The step that reaches it answers truncated (Gymnasium's TimeLimit)."},
          "idle_timeout_s": {"type": "integer", "minimum": 1, "maximum": 86400, "default": 300},
          "max_lifetime_s": {"type": "integer", "minimum": 1},
          "count": {"type": "integer", "minimum": 1, "maximum": 64, "description": "How many identical environments to open; the answer is then {episodes: [...]}."},
          "sandbox": {"type": "string", "enum": ["own", "shared"], "default": "own", "description": "own: a sandbox each. shared: the count's environments are instances of env_class in one sandbox and one interpreter (as Gymnasium's SyncVectorEnv): a batch step of them is one message; they share the caps, the files, the step's deadline (a step past it ends them all) and the interpreter's fate (a memory kill fails them all); the server counts one sandbox."}
        }
      },
      "Episode": {
        "type": "object",
        "required": ["id", "state", "created_at", "last_activity_at", "expires_at", "idle_timeout_s", "limits", "clamped", "pooled", "entrypoint", "env_class", "step_timeout_ms", "max_steps", "steps", "total_reward", "resets", "lifetime_steps", "lifetime_reward", "cpu_ms", "sandbox"],
        "properties": {
          "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
          "state": {"type": "string", "enum": ["ready", "running", "done", "failed"], "description": "done: terminated or truncated; done and failed take a reset."},
          "created_at": {"type": "integer"},
          "last_activity_at": {"type": "integer"},
          "expires_at": {"type": "integer"},
          "idle_timeout_s": {"type": "integer"},
          "limits": {"$ref": "#/components/schemas/EffectiveLimits"},
          "clamped": {"type": "array", "items": {"type": "string"}},
          "pooled": {"type": "boolean", "description": "Its sandbox was a python session its pool ([session_pool.python]) opened ahead of time."},
          "entrypoint": {"type": "string"},
          "env_class": {"type": ["string", "null"]},
          "step_timeout_ms": {"type": "integer"},
          "max_steps": {"type": ["integer", "null"]},
          "steps": {"type": "integer", "description": "Since the last reset."},
          "total_reward": {"type": "number", "description": "Since the last reset."},
          "resets": {"type": "integer"},
          "lifetime_steps": {"type": "integer"},
          "lifetime_reward": {"type": "number"},
          "cpu_ms": {"type": "integer", "description": "The CPU charged to the tenant so far (a shared sandbox's: for all its episodes)."},
          "sandbox": {"type": "string", "enum": ["own", "shared"]}
        }
      },
      "EpisodeOpened": {
        "allOf": [{"$ref": "#/components/schemas/Episode"}, {"type": "object", "required": ["observation", "info", "timing"], "properties": {"observation": {"$ref": "#/components/schemas/EpisodeValue"}, "info": {"$ref": "#/components/schemas/EpisodeValue"}, "timing": {"type": "object"}}}]
      },
      "EpisodeStep": {
        "type": "object",
        "required": ["id", "status", "step", "episode_reward", "state"],
        "description": "A step's (or reset's) outcome. status ok: observation, info (and for a step reward, terminated, truncated); status error: error; timeout ends the episode.",
        "properties": {
          "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
          "status": {"type": "string", "enum": ["ok", "error", "timeout", "memory_limit", "pids_limit", "output_limit", "disk_full", "canceled", "internal_error", "exit_nonzero"]},
          "observation": {"$ref": "#/components/schemas/EpisodeValue"},
          "reward": {"type": "number"},
          "terminated": {"type": "boolean"},
          "truncated": {"type": "boolean", "description": "The environment's, or max_steps reached."},
          "info": {"$ref": "#/components/schemas/EpisodeValue"},
          "error": {"type": "object", "required": ["name", "value", "traceback"], "properties": {"name": {"type": "string"}, "value": {"type": "string"}, "traceback": {"type": "array", "items": {"type": "string"}}}},
          "step": {"type": "integer", "description": "Steps since the last reset, this one included."},
          "episode_reward": {"type": "number", "description": "The reward since the last reset."},
          "state": {"type": "string", "enum": ["ready", "done", "failed", "ended"]},
          "stdout": {"type": "string", "description": "What the environment printed during the step."},
          "stderr": {"type": "string"},
          "usage": {"type": "object"},
          "evidence": {"type": ["object", "null"], "description": "The kernel's counters for this step (deltas)."},
          "timing": {"type": "object", "required": ["total_us"], "properties": {"total_us": {"type": "integer", "description": "The step inside the engine, in microseconds."}}}
        }
      },
      "FileListing": {
        "type": "object",
        "required": ["path", "entries"],
        "properties": {
          "path": {"type": "string"},
          "entries": {
            "type": "array",
            "items": {
              "type": "object",
              "required": ["name", "type", "size", "mtime", "mode"],
              "properties": {
                "name": {"type": "string"},
                "type": {"type": "string", "enum": ["file", "dir", "symlink", "other"]},
                "size": {"type": "integer"},
                "mtime": {"type": "integer", "description": "Seconds since the Unix epoch."},
                "mode": {"type": "integer"}
              }
            }
          }
        }
      },
      "ExecutionRequest": {
        "type": "object",
        "description": "Either code, or files with an entrypoint naming one of them.",
        "additionalProperties": false,
        "required": ["language"],
        "properties": {
          "language": {"type": "string", "enum": null},
          "code": {"type": "string", "description": "The program, run as /workspace/main.py or /workspace/main.sh."},
          "files": {
            "type": "array",
            "minItems": 1,
            "maxItems": 64,
            "items": {"$ref": "#/components/schemas/File"}
          },
          "entrypoint": {"$ref": "#/components/schemas/WorkspacePath"},
          "stdin": {"type": "string"},
          "args": {
            "type": "array",
            "maxItems": 64,
            "items": {"type": "string"},
            "description": "Extra arguments after the program file."
          },
          "env": {
            "type": "object",
            "maxProperties": 64,
            "description": "Extra environment variables. sandboxd sets PATH, HOME, TMPDIR and LANG itself; LD_* variables are refused.",
            "propertyNames": {
              "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$",
              "not": {"anyOf": [{"pattern": "^LD_"}, {"enum": ["PATH", "HOME", "TMPDIR", "LANG"]}]}
            },
            "additionalProperties": {"type": "string"}
          },
          "limits": {"$ref": "#/components/schemas/RequestLimits"},
          "compile_limits": {"$ref": "#/components/schemas/RequestLimits", "description": "A compiled language's compile stage (400 for a language without one). Defaults: the run's limits, with at least the language's wall clock and CPU time (10 s to 30 s), memory (512 MiB to 1 GiB), 128 pids and 256 MiB of disk; clamped to the tier's max_compile_NAME."},
          "network": {"type": "string", "enum": ["none"]},
          "backend": {"type": "string", "enum": null},
          "wait": {"type": "boolean", "default": true, "description": "false: answer 202 at once and run it from the queue."},
          "retry": {"type": "boolean", "default": false, "description": "With \"wait\": false only: run it again if a crash interrupted its run (otherwise it is recorded interrupted)."},
          "callback_url": {"type": "string", "maxLength": 2048, "description": "With \"wait\": false only: POST the record there once it has ended, signed per Standard Webhooks with the tenant's webhook_secret; its host must resolve to public addresses unless the tier's webhook_allow allows it."}
        },
        "oneOf": [
          {"required": ["code"], "not": {"anyOf": [{"required": ["files"]}, {"required": ["entrypoint"]}]}},
          {"required": ["files", "entrypoint"], "not": {"required": ["code"]}}
        ]
      },
      "File": {
        "type": "object",
        "additionalProperties": false,
        "required": ["path", "content"],
        "properties": {
          "path": {"$ref": "#/components/schemas/WorkspacePath"},
          "content": {"type": "string", "description": "The file's bytes: the string's UTF-8, or with encoding base64 what the text decodes to (binaries, images)."},
          "encoding": {"type": "string", "enum": ["utf8", "base64"], "default": "utf8", "description": "base64: standard alphabet with padding (RFC 4648, section 4)."},
          "executable": {"type": "boolean", "default": false}
        }
      },
      "WorkspacePath": {
        "type": "string",
        "description": "Relative to /workspace: printable ASCII without backslash, no empty, . or .. component.",
        "minLength": 1,
        "maxLength": 255,
        "pattern": "^(?!/)(?!.*//)(?!.*/$)(?!(?:.*/)?\\.\\.?(?:/|$))[\\x20-\\x5b\\x5d-\\x7e]+$"
      },
      "RequestLimits": null,
      "LimitName": null,
      "Status": {
        "type": "string",
        "enum": ["ok", "exit_nonzero", "signaled", "timeout", "memory_limit", "pids_limit", "output_limit", "disk_full", "compile_error", "internal_error", "canceled"]
      },
      "ExecutionId": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
      "ExecutionResult": {
        "type": "object",
        "additionalProperties": false,
        "required": ["id", "status", "exit_code", "signal", "stdout", "stderr", "truncated", "usage", "limits", "clamped", "evidence", "timing", "backend", "pooled", "compile"],
        "properties": {
          "id": {"$ref": "#/components/schemas/ExecutionId"},
          "status": {"$ref": "#/components/schemas/Status"},
          "exit_code": {"type": ["integer", "null"], "minimum": 0, "maximum": 255, "description": "null when the program did not exit normally."},
          "signal": {"type": ["integer", "null"], "minimum": 1, "description": "The signal that killed the program, else null."},
          "stdout": {"type": "string", "description": "At most limits.output_bytes bytes; invalid UTF-8 replaced by U+FFFD."},
          "stderr": {"type": "string"},
          "truncated": {"$ref": "#/components/schemas/Truncated"},
          "usage": {"$ref": "#/components/schemas/Usage"},
          "limits": {"$ref": "#/components/schemas/EffectiveLimits"},
          "clamped": {
            "type": "array",
            "uniqueItems": true,
            "items": {"$ref": "#/components/schemas/ClampedName"},
            "description": "The requested limits that were lowered to the tier's ceiling (compile_limits.NAME: a compile limit, to max_compile_NAME)."
          },
          "evidence": {"$ref": "#/components/schemas/Evidence"},
          "timing": {"$ref": "#/components/schemas/Timing"},
          "backend": {"type": "string", "enum": null},
          "pooled": {"type": "boolean"},
          "error": {"type": "string", "description": "What failed, or why it was stopped; present exactly when status is internal_error, canceled or compile_error (then the program did not run)."},
          "compile": {
            "oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/CompileStage"}],
            "description": "A compiled language's compile stage (its own sandbox and limits, no network); null for the others. A compile that did not succeed gives the execution status compile_error and no run; the compiler's diagnostics are in its stderr, whole up to the output cap."
          }
        },
        "if": {"properties": {"status": {"enum": ["internal_error", "canceled", "compile_error"]}}},
        "then": {"required": ["error"]},
        "else": {"not": {"required": ["error"]}}
      },
      "LanguageList": {
        "type": "object",
        "additionalProperties": false,
        "required": ["languages"],
        "properties": {
          "languages": {
            "type": "array",
            "items": {
              "type": "object",
              "additionalProperties": false,
              "required": ["name", "aliases", "extensions", "entrypoint", "compiled", "pooled", "version", "allowed", "backends"],
              "properties": {
                "name": {"type": "string"},
                "aliases": {"type": "array", "items": {"type": "string"}, "description": "Other names a request may use."},
                "extensions": {"type": "array", "items": {"type": "string"}},
                "entrypoint": {"type": "string", "description": "The program's name in /workspace when a request sends code."},
                "compiled": {"type": "boolean", "description": "Runs a compile stage first (its result is the execution's compile object)."},
                "pooled": {"type": "boolean", "description": "This server keeps warm sandboxes of it."},
                "version": {"type": ["string", "null"], "description": "The toolchain's version, as it prints it; null when it is not installed."},
                "allowed": {"type": "boolean", "description": "The caller's tier allows it."},
                "backends": {"type": "array", "items": {"type": "string", "enum": null}, "description": "The backends that run it (uml has no compile stage)."}
              }
            }
          }
        }
      },
      "ClampedName": {
        "anyOf": [
          {"$ref": "#/components/schemas/LimitName"},
          {"type": "string", "pattern": "^compile_limits\\.[a-z_]+$"}
        ]
      },
      "CompileStage": {
        "type": "object",
        "additionalProperties": false,
        "required": ["status", "exit_code", "signal", "stdout", "stderr", "truncated", "usage", "limits", "evidence", "timing", "cached", "pooled"],
        "properties": {
          "status": {"$ref": "#/components/schemas/Status"},
          "exit_code": {"type": ["integer", "null"], "minimum": 0, "maximum": 255},
          "signal": {"type": ["integer", "null"], "minimum": 1},
          "stdout": {"type": "string"},
          "stderr": {"type": "string", "description": "The compiler's diagnostics."},
          "truncated": {"$ref": "#/components/schemas/Truncated"},
          "usage": {"$ref": "#/components/schemas/Usage"},
          "limits": {"$ref": "#/components/schemas/EffectiveLimits"},
          "evidence": {"$ref": "#/components/schemas/Evidence"},
          "timing": {"$ref": "#/components/schemas/Timing"},
          "cached": {"type": "boolean", "description": "The artifact came from the compile cache: no compile ran."},
          "pooled": {"type": "boolean", "description": "The compile ran in a warm pool entry's compile sandbox (made before the request came)."},
          "error": {"type": "string"}
        }
      },
      "Truncated": {
        "type": "object",
        "additionalProperties": false,
        "required": ["stdout", "stderr"],
        "properties": {"stdout": {"type": "boolean"}, "stderr": {"type": "boolean"}}
      },
      "Usage": null,
      "EffectiveLimits": null,
      "Evidence": null,
      "Timing": null,
      "BatchRequest": {
        "type": "object",
        "oneOf": [
          {
            "additionalProperties": false,
            "required": ["program", "cases"],
            "properties": {
              "program": {"type": "object", "description": "A POST /v1/executions body's language, code or files and entrypoint, compile_limits, env, backend, network, retry (a case that a crash or its node's death interrupted is queued again instead of ending as internal_error)."},
              "cases": {
                "type": "array", "minItems": 1, "maxItems": 10000,
                "items": {
                  "type": "object",
                  "additionalProperties": false,
                  "properties": {
                    "stdin": {"type": "string"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "limits": {"$ref": "#/components/schemas/RequestLimits"},
                    "expected_stdout": {"type": "string", "description": "Absent: a run that ends ok is accepted."}
                  }
                }
              },
              "compare": {"type": "string", "enum": ["exact", "trim", "tokens"], "default": "trim"},
              "callback_url": {"type": "string", "maxLength": 2048, "description": "POST the batch there once its last case has ended (as for an execution's)."}
            }
          },
          {
            "additionalProperties": false,
            "required": ["executions"],
            "properties": {
              "executions": {"type": "array", "minItems": 1, "maxItems": 10000, "items": {"$ref": "#/components/schemas/ExecutionRequest"}},
              "callback_url": {"type": "string", "maxLength": 2048}
            }
          }
        ]
      },
      "BatchQueued": {
        "type": "object",
        "required": ["id", "status", "cases", "queue_position"],
        "properties": {
          "id": {"$ref": "#/components/schemas/ExecutionId"},
          "status": {"const": "queued"},
          "cases": {"type": "integer", "minimum": 1, "description": "The executions queued."},
          "queue_position": {"type": "integer", "minimum": 1, "description": "The first's place in the tenant's queue."},
          "rejected": {"type": "array", "description": "A list of executions only: those not queued, each {index, problem}.", "items": {"type": "object", "required": ["index", "problem"], "properties": {"index": {"type": "integer", "minimum": 0}, "problem": {"$ref": "#/components/schemas/Problem"}}}}
        }
      },
      "Batch": {
        "type": "object",
        "required": ["id", "created_at", "compare", "callback_url", "cases", "done", "summary", "results"],
        "properties": {
          "id": {"$ref": "#/components/schemas/ExecutionId"},
          "created_at": {"type": "integer", "minimum": 0},
          "compare": {"type": ["string", "null"], "description": "null for a list of executions."},
          "callback_url": {"type": ["string", "null"]},
          "cases": {"type": "integer", "minimum": 1},
          "done": {"type": "boolean", "description": "No case is queued or running any more."},
          "summary": {"type": "object", "description": "Cases by verdict: pending (queued or running), accepted, wrong_answer, or a run's own status; unjudged for an ok run whose output was not kept (a result recovered after a crash).", "additionalProperties": {"type": "integer", "minimum": 1}},
          "results": {
            "type": "array",
            "items": {
              "type": "object",
              "required": ["index"],
              "properties": {
                "index": {"type": "integer", "minimum": 0},
                "id": {"$ref": "#/components/schemas/ExecutionId"},
                "status": {"type": "string"},
                "verdict": {"type": "string"},
                "exit_code": {"type": ["integer", "null"]},
                "signal": {"type": ["integer", "null"]},
                "error": {"type": ["string", "null"]},
                "stdout": {"type": ["string", "null"]},
                "stderr": {"type": ["string", "null"]},
                "usage": {"oneOf": [{"$ref": "#/components/schemas/Usage"}, {"type": "null"}]},
                "timing": {"oneOf": [{"$ref": "#/components/schemas/Timing"}, {"type": "null"}]}
              }
            }
          }
        }
      },
      "WebhookDelivery": {
        "type": "object",
        "required": ["id", "kind", "target_id", "url", "status", "attempts", "next_attempt_at", "last_error", "created_at", "finished_at"],
        "properties": {
          "id": {"type": "string", "description": "msg_ and 32 hex digits: the webhook-id header of every attempt."},
          "kind": {"type": "string", "enum": ["execution", "batch"]},
          "target_id": {"$ref": "#/components/schemas/ExecutionId"},
          "url": {"type": "string"},
          "status": {"type": "string", "enum": ["pending", "delivered", "failed"]},
          "attempts": {"type": "integer", "minimum": 0},
          "next_attempt_at": {"type": "integer", "description": "Milliseconds since the epoch."},
          "last_error": {"type": ["string", "null"]},
          "created_at": {"type": "integer"},
          "finished_at": {"type": ["integer", "null"]}
        }
      },
      "ExecutionQueued": {
        "type": "object",
        "additionalProperties": false,
        "required": ["id", "status", "queue_position", "clamped"],
        "properties": {
          "id": {"$ref": "#/components/schemas/ExecutionId"},
          "status": {"const": "queued"},
          "queue_position": {"type": "integer", "minimum": 1, "description": "1: the next of the tenant's to run."},
          "clamped": {"type": "array", "uniqueItems": true, "items": {"$ref": "#/components/schemas/ClampedName"}}
        }
      },
      "AuditRecord": {
        "type": "object",
        "description": "One row of the audit log, written when the execution starts (status running, its outcome null), or when it is queued (status queued), and completed when it ends. Every key is present; a value that was not recorded is null. stdout and stderr are null unless the server stores output (server.store_output) or the execution was asynchronous. A queued one also has queue_position and estimated_start_ms.",
        "additionalProperties": false,
        "required": ["id", "tenant", "created_at", "finished_at", "language", "status", "exit_code", "signal", "error", "requested", "effective", "clamped", "usage", "evidence", "timing", "stdout_bytes", "stderr_bytes", "stdout_sha256", "stderr_sha256", "stdout", "stderr", "compile"],
        "properties": {
          "id": {"$ref": "#/components/schemas/ExecutionId"},
          "tenant": {"type": "string"},
          "created_at": {"type": "integer", "minimum": 0, "description": "Request accepted, milliseconds since the Unix epoch."},
          "finished_at": {"type": ["integer", "null"], "minimum": 0, "description": "Result known, milliseconds since the Unix epoch; null while running."},
          "language": {"type": "string"},
          "status": {"anyOf": [{"$ref": "#/components/schemas/Status"}, {"enum": ["running", "queued"]}]},
          "queue_position": {"type": "integer", "minimum": 1, "description": "Queued only: its place in its tenant's queue (1: next)."},
          "estimated_start_ms": {"type": "integer", "minimum": 0, "description": "Queued only: the milliseconds until it is expected to start (the runs ahead of it at the mean run time)."},
          "exit_code": {"type": ["integer", "null"], "minimum": 0, "maximum": 255},
          "signal": {"type": ["integer", "null"], "minimum": 1},
          "error": {"type": ["string", "null"]},
          "requested": {"type": ["object", "null"], "description": "The request as received, except that code, stdin and each file's content are replaced by {bytes, sha256} of their text."},
          "effective": {"oneOf": [{"$ref": "#/components/schemas/EffectiveLimits"}, {"type": "null"}]},
          "clamped": {
            "oneOf": [
              {"type": "array", "uniqueItems": true, "items": {"$ref": "#/components/schemas/ClampedName"}},
              {"type": "null"}
            ]
          },
          "usage": {"oneOf": [{"$ref": "#/components/schemas/Usage"}, {"type": "null"}]},
          "evidence": {"oneOf": [{"$ref": "#/components/schemas/Evidence"}, {"type": "null"}]},
          "timing": {"oneOf": [{"$ref": "#/components/schemas/Timing"}, {"type": "null"}]},
          "stdout_bytes": {"type": ["integer", "null"], "minimum": 0},
          "stderr_bytes": {"type": ["integer", "null"], "minimum": 0},
          "stdout_sha256": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$", "description": "SHA-256 of the output bytes the program wrote (after the cap)."},
          "stderr_sha256": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
          "stdout": {"type": ["string", "null"]},
          "stderr": {"type": ["string", "null"]},
          "compile": {"type": ["object", "null"], "description": "A compiled language's compile stage as the response had it (a CompileStage), its stdout and stderr under the same rule as the run's; null for a language without one, or while it has not ended."}
        }
      },
      "Health": {
        "type": "object",
        "additionalProperties": false,
        "required": ["status", "engine"],
        "properties": {"status": {"const": "ok"}, "engine": {"const": "up"}}
      },
      "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details.",
        "additionalProperties": false,
        "required": ["type", "title", "status", "detail", "errors"],
        "properties": {
          "type": {
            "type": "string",
            "enum": [
              "https://sandboxd.dev/problems/invalid-request",
              "https://sandboxd.dev/problems/unauthorized",
              "https://sandboxd.dev/problems/forbidden",
              "https://sandboxd.dev/problems/not-found",
              "https://sandboxd.dev/problems/node-gone",
              "https://sandboxd.dev/problems/method-not-allowed",
              "https://sandboxd.dev/problems/conflict",
              "https://sandboxd.dev/problems/payload-too-large",
              "https://sandboxd.dev/problems/unsupported-media-type",
              "https://sandboxd.dev/problems/misdirected",
              "https://sandboxd.dev/problems/quota-exceeded",
              "https://sandboxd.dev/problems/engine-unavailable",
              "https://sandboxd.dev/problems/at-capacity",
              "https://sandboxd.dev/problems/shutting-down",
              "https://sandboxd.dev/problems/store-unavailable",
              "https://sandboxd.dev/problems/internal"
            ]
          },
          "execution_id": {"$ref": "#/components/schemas/ExecutionId", "description": "On a 503 for an execution that may have run: its audit record."},
          "end_reason": {"type": "string", "description": "On the 404 of a session that ended: deleted, idle_timeout, max_lifetime, agent_died, shutdown, gone, never_opened."},
          "node": {"type": "string", "description": "On a node-gone 404 or a 421 (a fleet): the node that holds or held the session or episode."},
          "node_alive_until": {"type": "integer", "description": "On a node-gone 404: when that node's liveness lapsed, milliseconds since the Unix epoch."},
          "title": {"type": "string"},
          "status": {"type": "integer", "minimum": 400, "maximum": 599},
          "detail": {"type": "string"},
          "errors": {
            "type": "array",
            "description": "The offending request fields; empty when no field is to blame.",
            "items": {
              "type": "object",
              "additionalProperties": false,
              "required": ["field", "message"],
              "properties": {"field": {"type": "string"}, "message": {"type": "string"}}
            }
          }
        }
      }
    }
  }
}
);
// clang-format on

/* Sets the member at path ("components/schemas/RequestLimits") to value (stolen), where the
 * template has a null placeholder: a path that is missing or not a placeholder fails, so that the
 * template and this file cannot disagree silently. */
static int fill(json_t *document, const char *path, json_t *value)
{
        char copy[128];
        snprintf(copy, sizeof(copy), "%s", path);
        json_t *parent = document;
        char *key = copy;
        for (char *slash = strchr(key, '/'); slash != NULL; slash = strchr(key, '/')) {
                *slash = '\0';
                parent = json_object_get(parent, key);
                key = slash + 1;
        }
        if (value == NULL || !json_is_object(parent) ||
            !json_is_null(json_object_get(parent, key))) {
                json_decref(value);
                return -1;
        }
        return json_object_set_new(parent, key, value);
}

/* {"type": "integer", "minimum": minimum} */
static json_t *integer_schema(uint64_t minimum)
{
        return json_pack("{s:s, s:I}", "type", "integer", "minimum", (json_int_t)minimum);
}

/* Adds name: schema (stolen) to properties, and name to required when required is not NULL. */
static int add_property(json_t *properties, json_t *required, const char *name, json_t *schema)
{
        if (schema == NULL || json_object_set_new(properties, name, schema) < 0)
                return -1;
        return required == NULL ? 0 : json_array_append_new(required, json_string(name));
}

/* An object schema of properties (stolen), every one of them required when required (stolen)
 * is not NULL, nothing else allowed. */
static json_t *object_schema(const char *description, json_t *properties, json_t *required)
{
        json_t *schema = json_pack("{s:s}", "type", "object");
        if (schema != NULL && description != NULL)
                json_object_set_new(schema, "description", json_string(description));
        if (schema != NULL)
                json_object_set_new(schema, "additionalProperties", json_false());
        if (schema != NULL && required != NULL)
                json_object_set(schema, "required", required);
        if (schema != NULL)
                json_object_set(schema, "properties", properties);
        json_decref(properties);
        json_decref(required);
        return schema;
}

/* RequestLimits: each settable limit, an integer from its API minimum; no maximum, since a value
 * above the tier's ceiling is clamped, not refused. */
static json_t *request_limits_schema(void)
{
        json_t *properties = json_object();
        for (size_t i = 0; properties != NULL && i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *limit = &sbx_limit_fields[i];
                if (limit->kind == SBX_LIMIT_SETTABLE &&
                    add_property(properties, NULL, limit->name,
                                 integer_schema(sbx_limit_api_min(limit))) < 0)
                        return json_decref(properties), NULL;
        }
        return object_schema("Each limit is optional (defaults apply) and clamped to the tier's "
                             "ceiling.",
                             properties, NULL);
}

/* EffectiveLimits: every limit, as sbx_limits_to_json writes it. */
static json_t *effective_limits_schema(void)
{
        json_t *properties = json_object(), *required = json_array();
        for (size_t i = 0; properties != NULL && required != NULL && i < SBX_LIMIT_COUNT; i++) {
                const struct sbx_limit_field *limit = &sbx_limit_fields[i];
                json_t *schema =
                        limit->kind == SBX_LIMIT_CORES
                                ? json_pack("{s:s, s:i, s:s}", "type", "number", "exclusiveMinimum",
                                            0, "description", "CPU bandwidth in cores.")
                                : integer_schema(1);
                if (add_property(properties, required, limit->name, schema) < 0)
                        return json_decref(properties), json_decref(required), NULL;
        }
        return object_schema(NULL, properties, required);
}

/* The names of the settable limits (a response's clamped). */
static json_t *limit_names(void)
{
        json_t *names = json_array();
        for (size_t i = 0; names != NULL && i < SBX_LIMIT_COUNT; i++)
                if (sbx_limit_fields[i].kind == SBX_LIMIT_SETTABLE)
                        json_array_append_new(names, json_string(sbx_limit_fields[i].name));
        return names;
}

/* Every name a request may give a language by: its own, then its aliases ("js"). */
static json_t *language_names(void)
{
        json_t *names = json_array();
        for (size_t i = 0; names != NULL && i < sbx_language_count(); i++)
                json_array_append_new(names, json_string(sbx_language_at(i)->name));
        for (size_t i = 0; names != NULL && i < sbx_language_count(); i++) {
                json_t *aliases = sbx_language_words_json(sbx_language_at(i)->aliases);
                json_array_extend(names, aliases);
                json_decref(aliases);
        }
        return names;
}

static json_t *backend_names(void)
{
        json_t *names = json_array();
        for (size_t i = 0; names != NULL && i < sbx_backend_count(); i++)
                json_array_append_new(names, json_string(sbx_backend_name_at(i)));
        return names;
}

/* The schema of a result's nested object: members (all required), nothing else. */
static json_t *members_schema(const char *description, const struct sbx_json_member *members,
                              size_t n)
{
        json_t *properties = json_object(), *required = json_array();
        for (size_t i = 0; properties != NULL && required != NULL && i < n; i++) {
                json_t *schema = members[i].boolean ? json_pack("{s:s}", "type", "boolean")
                                                    : integer_schema(0);
                if (add_property(properties, required, members[i].name, schema) < 0)
                        return json_decref(properties), json_decref(required), NULL;
        }
        return object_schema(description, properties, required);
}

/* Evidence: the kernel's counters, and a guest kernel's beside them where there is one. */
static json_t *evidence_schema(void)
{
        json_t *schema = members_schema("The kernel's counters for the sandbox, as deltas over "
                                        "the execution.",
                                        sbx_evidence_json_members, sbx_evidence_json_count);
        json_t *guest = members_schema(
                "The uml backend's: the guest kernel's own counters for the program's cgroup (the "
                "peaks since its start) and the thrash kills of its init, which the host's "
                "counters above include. Absent on the other backends.",
                sbx_guest_evidence_json_members, sbx_guest_evidence_json_count);
        json_t *properties = json_object_get(schema, "properties");
        if (properties == NULL || guest == NULL) {
                json_decref(guest);
                json_decref(schema);
                return NULL;
        }
        if (json_object_set_new(properties, "guest", guest) < 0) {
                json_decref(schema);
                return NULL;
        }
        return schema;
}

static char *document_text;
static size_t document_length;
static pthread_once_t document_once = PTHREAD_ONCE_INIT;

static void generate(void)
{
        json_error_t error;
        json_t *document = json_loads(openapi_template, 0, &error);
        if (document == NULL)
                return;
        json_t *limit_name = limit_names();
        int r = fill(document, "components/schemas/RequestLimits", request_limits_schema()) |
                fill(document, "components/schemas/EffectiveLimits", effective_limits_schema()) |
                fill(document, "components/schemas/LimitName",
                     json_pack("{s:s, s:o}", "type", "string", "enum", limit_name)) |
                fill(document, "components/schemas/ExecutionRequest/properties/language/enum",
                     language_names()) |
                fill(document, "components/schemas/ExecutionRequest/properties/backend/enum",
                     backend_names()) |
                fill(document, "components/schemas/ExecutionResult/properties/backend/enum",
                     backend_names()) |
                fill(document,
                     "components/schemas/LanguageList/properties/languages/items/properties/"
                     "backends/items/enum",
                     backend_names()) |
                fill(document, "components/schemas/Usage",
                     members_schema(NULL, sbx_usage_json_members, sbx_usage_json_count)) |
                fill(document, "components/schemas/Evidence", evidence_schema()) |
                fill(document, "components/schemas/Timing",
                     members_schema("Microseconds spent in each phase; the same phases feed "
                                    "sandboxd_phase_duration_seconds.",
                                    sbx_timing_json_members, sbx_timing_json_count));
        if (r == 0) {
                document_text = json_dumps(document, JSON_COMPACT);
                document_length = document_text ? strlen(document_text) : 0;
        }
        json_decref(document);
}

const char *sbx_openapi_json(void)
{
        pthread_once(&document_once, generate);
        return document_text;
}

size_t sbx_openapi_json_length(void)
{
        pthread_once(&document_once, generate);
        return document_length;
}
