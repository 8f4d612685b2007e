#!/usr/bin/env bash
# Canary: rsiw_canary reads a freed object that KFENCE guards; the harness must
# fail this test for KFENCE's report. A sample interval of 1 ms makes KFENCE
# guard an allocation soon.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
echo 1 >/sys/module/kfence/parameters/sample_interval
provoke use-after-free
