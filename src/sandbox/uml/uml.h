/* The uml backend: the program runs on a user-mode-linux kernel of its own, and that kernel in a
 * native sandbox (uml.c). */
#pragma once

#include "sandbox/sandbox.h"

extern const struct sbx_backend sbx_uml_backend;
