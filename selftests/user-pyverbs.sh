#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it in
# /usr/share/doc/rdma-core/tests, partly gzipped) on a C siw device and on the
# device under test, in this VM: every test that passes on siw must pass on
# rsiw (one that does not in the suite's run gets 8 more runs alone, as the
# suite draws its parameters at random). Prints the table (test, siw, rsiw); a
# test siw does not pass is listed with siw's reason.
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
beside_siw $dut $dutnd $dutmac $dutip $ref $refnd $refmac $refip

suite=$TEST_TMP/tests
cp -r "$src" "$suite" && gunzip -f "$suite"/*.gz || tap_bail "cannot unpack the suite"

# run_suite DEV OUT: the whole suite on DEV, unittest's verbose lines in OUT.
run_suite() {
	(cd "$suite" && timeout 600 /usr/bin/python3 run_tests.py --dev "$1" -v) >"$2" 2>&1
}

# results OUT: "ID RESULT" per test (ok, skip, xfail, FAIL or ERROR), from
# unittest's verbose lines ("test_x (module.Class.test_x) ... ok"; a class or
# module skipped as a whole shows as setUpClass or setUpModule).
results() {
	/usr/bin/python3 - "$1" <<'PY'
import re, sys
# "test_x (module.Class.test_x) ... ok", or with a docstring the id alone on
# one line and "First line of the docstring ... ok" on the next.
idline = re.compile(r"^(\w+) \(([^)]+)\)(?: \.\.\. (.*))?$")
result = re.compile(r" \.\.\. (ok|skipped|FAIL|ERROR|expected failure|unexpected success)")
short = {"skipped": "skip", "expected failure": "xfail", "unexpected success": "FAIL"}
last = None
for line in open(sys.argv[1], errors="replace"):
    line = line.rstrip("\n")
    m = idline.match(line)
    if m:
        name, where = m.group(1), m.group(2)
        last = where if where.endswith("." + name) else where + "." + name
    r = result.search(line)
    if r and last:
        print(last, short.get(r.group(1), r.group(1)))
        last = None
PY
}

# summary OUT: unittest's closing lines ("Ran N tests in T s", "OK (skipped=M)").
summary() {
	grep -E '^(Ran [0-9]+ tests|OK|FAILED)' "$1" | tr '\n' ' '
}
t0=$(date +%s)
run_suite $ref "$TEST_TMP/siw.out"
tap_diag "siw: $(summary "$TEST_TMP/siw.out"), $(($(date +%s) - t0)) s in all"
t0=$(date +%s)
run_suite $dut "$TEST_TMP/dut.out"
tap_diag "$RSIW_MODULE: $(summary "$TEST_TMP/dut.out"), $(($(date +%s) - t0)) s in all"
# The whole outputs stay with the results.
[ -z "${TEST_OUT:-}" ] || cp "$TEST_TMP/siw.out" "$TEST_TMP/dut.out" "$TEST_OUT/"
results "$TEST_TMP/siw.out" | sort >"$TEST_TMP/siw.res"
results "$TEST_TMP/dut.out" | sort >"$TEST_TMP/dut.res"
tap_result "$([ -s "$TEST_TMP/siw.res" ]; echo $?)" "the suite ran on siw" "$(tail -n 20 "$TEST_TMP/siw.out")"

# The table, and a check for each test siw passes.
join -a 1 -a 2 -e - -o 0,1.2,2.2 "$TEST_TMP/siw.res" "$TEST_TMP/dut.res" >"$TEST_TMP/table"
tap_diag "$(printf '%-70s %-6s %s\n' test siw "$RSIW_MODULE"; column -t "$TEST_TMP/table")"
# The suite draws QP sizes and creation masks at random (tests/utils.py), so a
# test may be skipped in one run ("not supported") and pass in the next, on
# either device. A test siw passed that did not pass on rsiw runs again alone,
# up to 8 times: it passes if one run does; a real failure fails every run.
retry() {
	local name=$1 i out
	for i in 1 2 3 4 5 6 7 8; do
		out=$(cd "$suite" && timeout 120 /usr/bin/python3 run_tests.py --dev $dut -v "$name" 2>&1)
		if grep -qE ' \.\.\. ok$' <<<"$out"; then
			RETRY_MSG="passed on run $((i + 1)) (alone)"
			return 0
		fi
	done
	RETRY_MSG=$(grep -A 12 -E "^(FAIL|ERROR): " <<<"$out" | head -n 14)
	[ -n "$RETRY_MSG" ] || RETRY_MSG=$(grep -E ' \.\.\. ' <<<"$out" | tail -n 1)
	return 1
}
while read -r name s d; do
	[ "$s" = ok ] || continue
	if [ "$d" = ok ]; then
		tap_ok "pyverbs $name"
	elif retry "$name"; then
		tap_ok "pyverbs $name"
		tap_diag "$name: $d in the suite's run on $RSIW_MODULE, $RETRY_MSG"
	else
		tap_fail "pyverbs $name" "passes on siw, $d on $RSIW_MODULE, and in 8 runs alone:" "$RETRY_MSG"
	fi
done <"$TEST_TMP/table"
# Tests siw does not pass: with siw's reason. One pass in Python: a pipeline
# per test took over 2 minutes for the 248 under TCG.
/usr/bin/python3 - "$TEST_TMP/siw.out" "$TEST_TMP/table" "$RSIW_MODULE" <<'PY' | while IFS= read -r line; do tap_diag "$line"; done
import re, sys
out, table, dut = sys.argv[1:]
# The result is on the id's line, or on the next (after a docstring's first line).
idline = re.compile(r"^(\w+) \(([^)]+)\)")
reason, last = {}, None
for line in open(out, errors="replace"):
    line = line.rstrip("\n")
    m = idline.match(line)
    if m:
        name, where = m.group(1), m.group(2)
        last = where if where.endswith("." + name) else where + "." + name
    if last and " ... " in line:
        reason.setdefault(last, line.split(" ... ", 1)[1])
        last = None
for row in open(table):
    name, s, d = row.split()
    if s != "ok":
        print(f"not passed on siw: {name}: siw {s}, {dut} {d} ({reason.get(name, '')[:100]})")
PY

tap_done
