#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it in
# /usr/share/doc/rdma-core/tests, partly gzipped) on a C siw device and on the
# device under test, in this VM: every test that passes on siw must pass on
# rsiw. Prints the table (test, siw, rsiw); a test that fails or is skipped on
# both is listed with siw's reason.
# timeout: 1500
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require rdma

src=/usr/share/doc/rdma-core/tests
dut=pv0 dutnd=pvd0 dutmac=02:52:53:49:57:60 dutip=198.18.60.1
ref=pvsiw0 refnd=pvd1 refmac=02:52:53:49:57:61 refip=198.18.61.1

# Debian's interpreter: pyverbs is installed for it, not for others on PATH.
[ -f "$src/run_tests.py" ] && /usr/bin/python3 -c 'import pyverbs' 2>/dev/null ||
	tap_bail "no pyverbs for /usr/bin/python3 or no $src/run_tests.py (python3-pyverbs)"
tap_check "load $RSIW_MODULE" rsiw_load || tap_bail "cannot load the driver"
if ! rsiw_is_reference; then
	tap_check "load siw" modprobe siw || tap_bail "cannot load siw"
fi
tap_check "dummy $dutnd ($dutip)" netdev_dummy $dutnd $dutmac $dutip/24 || tap_bail "no netdev"
tap_check "dummy $refnd ($refip)" netdev_dummy $refnd $refmac $refip/24 || tap_bail "no netdev"
tap_check "rdma link add $dut type $RSIW_LINK_TYPE" rdma_link_add $dut $dutnd || tap_bail "no device"
if tap_check "rdma link add $ref type siw" rdma link add $ref type siw netdev $refnd; then
	_links+=("$ref")
else
	tap_bail "no siw device"
fi

suite=$TEST_TMP/tests
cp -r "$src" "$suite" && gunzip -f "$suite"/*.gz || tap_bail "cannot unpack the suite"

# run_suite DEV OUT: the whole suite on DEV, unittest's verbose lines in OUT.
run_suite() {
	(cd "$suite" && timeout 600 /usr/bin/python3 run_tests.py --dev "$1" -v) >"$2" 2>&1
}

# results OUT: "ID RESULT" per test (ok, skip, xfail, FAIL or ERROR), from
# unittest's verbose lines ("test_x (module.Class.test_x) ... ok").
results() {
	/usr/bin/python3 - "$1" <<'PY'
import re, sys
pat = re.compile(r"^(test_\S+) \(([^)]+)\)(?: .*)? \.\.\. (ok|skipped|FAIL|ERROR|expected failure|unexpected success)")
short = {"skipped": "skip", "expected failure": "xfail", "unexpected success": "FAIL"}
for line in open(sys.argv[1], errors="replace"):
    m = pat.match(line)
    if m:
        name, where, res = m.groups()
        tid = where if where.endswith("." + name) else where + "." + name
        print(tid, short.get(res, res))
PY
}

t0=$(date +%s)
run_suite $ref "$TEST_TMP/siw.out"
tap_diag "siw: $(tail -n 1 "$TEST_TMP/siw.out") in $(($(date +%s) - t0)) s"
t0=$(date +%s)
run_suite $dut "$TEST_TMP/dut.out"
tap_diag "$RSIW_MODULE: $(tail -n 1 "$TEST_TMP/dut.out") in $(($(date +%s) - t0)) s"
results "$TEST_TMP/siw.out" | sort >"$TEST_TMP/siw.res"
results "$TEST_TMP/dut.out" | sort >"$TEST_TMP/dut.res"
tap_result "$([ -s "$TEST_TMP/siw.res" ]; echo $?)" "the suite ran on siw" "$(tail -n 20 "$TEST_TMP/siw.out")"

# The table, and a check for each test siw passes.
join -a 1 -a 2 -e - -o 0,1.2,2.2 "$TEST_TMP/siw.res" "$TEST_TMP/dut.res" >"$TEST_TMP/table"
tap_diag "$(printf '%-70s %-6s %s\n' test siw "$RSIW_MODULE"; column -t "$TEST_TMP/table")"
while read -r name s d; do
	[ "$s" = ok ] || continue
	if [ "$d" = ok ]; then
		tap_ok "pyverbs $name"
	else
		tap_fail "pyverbs $name" "passes on siw, $d on $RSIW_MODULE" \
			"$(grep -A 12 -E "^(FAIL|ERROR): ${name##*.} " "$TEST_TMP/dut.out" | head -n 14)"
	fi
done <"$TEST_TMP/table"
# Tests siw does not pass: with siw's reason.
while read -r name s d; do
	[ "$s" = ok ] && continue
	reason=$(grep -m 1 -E "^${name##*.} \(.*\) \.\.\. " "$TEST_TMP/siw.out" | sed -E 's/.* \.\.\. //')
	tap_diag "not passed on siw: $name: siw $s, $RSIW_MODULE $d (${reason:0:100})"
done <"$TEST_TMP/table"

tap_done
