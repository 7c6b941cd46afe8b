/* The engine's spool: the RESULTs that workers could not hand to the API process because it was
 * gone (killed, crashed). Every execution that started must end with an audit record (README,
 * "Every execution leaves an audit record"), and the audit store is the API process's; so a
 * worker whose RESULT cannot be sent keeps it here, and the next API process folds it into the
 * store before it serves (api/recover.c).
 *
 * One file per result, <data_dir>/spool/<execution id>.result, holding the RESULT message exactly
 * as the protocol encodes it (protocol/protocol.h). The directory belongs to the API uid (the API
 * process removes what it folded in); the root worker writes into it only through a directory fd
 * opened without following a link, creates each file with O_EXCL|O_NOFOLLOW under a temporary
 * name, hands it to the API uid, and renames it into place, so that a reader never sees half a
 * file and nothing the API process could plant there redirects a root write. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "util/error.h"

#define SBX_SPOOL_DIR_NAME    "spool"   /* inside the data directory */
#define SBX_SPOOL_FILE_SUFFIX ".result" /* after the execution id */

/* Writes the encoded RESULT message message[0..len) of execution_id (32 lowercase hex) into the
 * spool directory dir, owned by owner (uid and gid). Fails when the id is malformed, the
 * directory is missing or a link, or a write fails. */
int sbx_spool_write(const char *dir, uid_t owner, const char *execution_id, const void *message,
                    size_t len, struct sbx_error *err);
