/* Capabilities: the program's root keeps a small documented set over its own user namespace (so
 * that chown and subprocess(user=...) work inside as on the host) and can never gain another;
 * every other uid, and init, hold none. */
#pragma once

#include "util/error.h"

/* Child side: locks the securebits (no root privilege on exec, no setuid fix-ups, no ambient
 * raise), then drops every capability from the bounding, ambient, inheritable, permitted and
 * effective sets. */
int caps_drop_all(struct sbx_error *err);

/* The capabilities the sandbox's root keeps, as a CapEff/CapBnd mask: CHOWN, DAC_OVERRIDE,
 * FOWNER, KILL, SETGID, SETUID (0xeb). */
#define CAPS_ROOT_SET_MASK 0xebULL

/* Child side (the program, before exec): locks the securebits so that uid 0 keeps the classic
 * root rule and nothing else (no keep-caps, no setuid fix-up switch, no ambient raise), reduces
 * the bounding set to CAPS_ROOT_SET_MASK and sets permitted and effective to it, inheritable and
 * ambient empty. An exec as uid 0 then gets that set and no more; a change to another uid drops
 * every capability, as on any Linux. Needs CAP_SETPCAP (held until here). */
int caps_limit_to_root_set(struct sbx_error *err);
