#!/usr/bin/env bash
# Canary: rsiw_canary provokes sleep-in-atomic; the harness must fail this test for it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
provoke sleep-in-atomic
