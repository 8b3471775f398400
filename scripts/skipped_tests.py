#!/usr/bin/env python3
"""Lists the tests one ctest run skipped, each with the reason it gave.

    scripts/skipped_tests.py BUILD_DIR

Reads BUILD_DIR/Testing/ctest-output.txt (what scripts/setup.sh saved of the
run: ctest marks a skipped test "(Skipped)" in its closing list) and
BUILD_DIR/Testing/Temporary/LastTest.log (every test's own output). Prints
one line per skipped test, "NAME: REASON", in ctest's order. The reason is
GoogleTest's GTEST_SKIP message, a script's "SKIP: ..." line, or else the last
line the test printed. Exit 0, also when nothing was skipped; 2 when a file
is missing.
"""

import re
import sys
from pathlib import Path

SKIPPED = re.compile(r"^\s*\d+ - (.+) \(Skipped\)$")
TESTING = re.compile(r"^\d+/\d+ Testing: (.+)$")
GTEST_SKIP = re.compile(r": Skipped$")
SCRIPT_SKIP = re.compile(r"\bSKIP: (.*)$")
BOILERPLATE = re.compile(r"^\[[ =A-Z-]+\]")


def skipped_names(ctest_output):
    names = []
    for line in ctest_output.splitlines():
        match = SKIPPED.match(line)
        if match:
            names.append(match.group(1))
    return names


def outputs(last_test_log):
    """Each test's output lines, by name (the last run of a name wins)."""
    result = {}
    name, lines, inside = None, [], False
    for line in last_test_log.splitlines():
        testing = TESTING.match(line)
        if testing:
            name, lines, inside = testing.group(1), [], False
        elif line == "Output:":
            inside = None  # the dashes come next
        elif inside is None:
            inside = True
        elif line == "<end of output>":
            if name is not None:
                result[name] = lines
            inside = False
        elif inside:
            lines.append(line)
    return result


def said(line):
    return bool(line.strip()) and not BOILERPLATE.match(line)


def reason(lines):
    for i, line in enumerate(lines):
        if GTEST_SKIP.search(line):
            # GTEST_SKIP() << "why": the message follows the marker; a bare
            # GTEST_SKIP() has none, and the rules below take over.
            after = lines[i + 1] if i + 1 < len(lines) else ""
            if said(after):
                return after.strip()
            break
    script_said = [m.group(1) for m in map(SCRIPT_SKIP.search, lines) if m]
    if script_said:
        return script_said[-1].strip()
    printed = [l.strip() for l in lines if said(l) and not GTEST_SKIP.search(l)]
    return printed[-1] if printed else "(no reason printed)"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    testing = Path(argv[1]) / "Testing"
    try:
        names = skipped_names((testing / "ctest-output.txt").read_text(errors="replace"))
        logs = outputs((testing / "Temporary" / "LastTest.log").read_text(errors="replace"))
    except OSError as err:
        print(f"skipped_tests.py: {err}", file=sys.stderr)
        return 2
    for name in names:
        lines = logs.get(name)
        print(f"{name}: {reason(lines) if lines is not None else '(not in LastTest.log)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
