#!/bin/sh
# Hostile payload (failclosed): run with one setup step forced to fail (--test-fail-step STEP; one declaration per step).
# If it runs at all, the sandbox started user code although that step failed: a
# half-isolated execution. It prints the run token (argument 1) to stdout and stderr, leaves it
# in /tmp and the workspace, and starts a background process that outlives it; the harness
# requires status internal_error naming the step, the token absent from the output, and nothing
# of the run left on the host. The control is the same run without the forced failure: the token
# appears.
token=${1:?token}
echo "$token"
echo "$token" >&2
echo "$token" > /tmp/failclosed-token 2>/dev/null
echo "$token" > ./failclosed-token 2>/dev/null
( exec </dev/null >/dev/null 2>&1; sleep 30 & ) # outlives the payload, off its stdio
exit 0
