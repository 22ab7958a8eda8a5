#!/usr/bin/env bash
# The ten slowest tests of a nextest run, from its JUnit report (scripts/test.sh calls
# this after each run, so that the CI log says where the suite's time goes).
set -euo pipefail
report="${1:-target/nextest/ci/junit.xml}"
python3 - "$report" <<'PY'
import sys
import xml.etree.ElementTree as tree

cases = [
    (float(case.get("time", 0)), f"{case.get('classname')} {case.get('name')}")
    for case in tree.parse(sys.argv[1]).iter("testcase")
]
total = sum(seconds for seconds, _ in cases)
print(f"the ten slowest of {len(cases)} tests ({total:.0f} s of tests in all):")
for seconds, name in sorted(cases, reverse=True)[:10]:
    print(f"  {seconds:7.1f} s  {name}")
PY
