#!/usr/bin/env bash
# The control: rsiw_canary loaded, refusing an unknown request (EINVAL) and
# unloaded. The harness must pass it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
echo "TAP version 13"
if insmod "$CANARY_KO"; then echo "ok 1 - insmod rsiw_canary"; else echo "not ok 1 - insmod $CANARY_KO"; fi
if (echo nothing >"$PROVOKE") 2>/dev/null; then
	echo "not ok 2 - an unknown request is refused"
else
	echo "ok 2 - an unknown request is refused"
fi
if rmmod rsiw_canary; then echo "ok 3 - rmmod rsiw_canary"; else echo "not ok 3 - rmmod rsiw_canary"; fi
echo "1..3"
