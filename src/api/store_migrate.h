/* `sandboxd store migrate --from sqlite:PATH --to postgresql://... [--node NAME]`: a node's own
 * audit store copied into a fleet's PostgreSQL (service/audit_copy.h), for a node that joins a
 * fleet with its history. */
#pragma once

/* argv[0] is "store". An exit status: 0, 1 when the copy failed (what was copied stays, and a
 * second run copies the rest), 64 for a usage error. */
int sbx_store_main(int argc, char **argv);
