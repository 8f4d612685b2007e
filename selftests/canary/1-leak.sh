#!/usr/bin/env bash
# Canary: rsiw_canary provokes leak; the harness must fail this test for it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
provoke leak
