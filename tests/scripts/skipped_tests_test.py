#!/usr/bin/env python3
"""scripts/skipped_tests.py on a made-up ctest run: each kind of skip gives
its own reason, and a test that passed or failed is not listed."""

import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "skipped_tests.py"

PARAM = 'Providers/Engine.Works/shm  # GetParam() = "shm"'

CTEST_OUTPUT = f"""\
1/6 Test #1: Gpu.Runs ...***Skipped   0.21 sec
2/6 Test #2: process.tls ...***Skipped   0.01 sec
3/6 Test #3: {PARAM} ...***Skipped   0.2 sec
4/6 Test #4: Other.Passes ...   Passed    0.01 sec
5/6 Test #5: Bare.Skip ...***Skipped   0.01 sec
6/6 Test #6: Not.Logged ...***Skipped   0.01 sec

The following tests did not run:
\t  1 - Gpu.Runs (Skipped)
\t  2 - process.tls (Skipped)
\t  3 - {PARAM} (Skipped)
\t  5 - Bare.Skip (Skipped)
\t  6 - Not.Logged (Skipped)
"""


def block(n, name, lines):
    return "\n".join([f"{n}/6 Testing: {name}", f"{n}/6 Test: {name}", "Output:",
                      "-" * 58, *lines, "<end of output>", "Test time = 0.1 sec",
                      "-" * 58, "Test Passed.", ""])


LAST_TEST_LOG = "".join([
    block(1, "Gpu.Runs", ["[ RUN      ] Gpu.Runs", "/src/gpu_test.cpp:10: Skipped",
                          "no CUDA device: driver too old", "[  SKIP    ] Gpu.Runs (0 ms)",
                          "[2026-12-07 21:12:00.001] [info] engine stopped"]),
    block(2, "process.tls", ["tls: starting", "tls: SKIP: this CAF has no OpenSSL", ""]),
    block(3, PARAM, ["[ RUN      ] x", "shm closes the region", "[  SKIP    ] x (0 ms)"]),
    block(4, "Other.Passes", ["[       OK ] Other.Passes"]),
    # GTEST_SKIP() with no message: the marker's next line is GoogleTest's own.
    block(5, "Bare.Skip", ["[ RUN      ] Bare.Skip", "/src/t.cpp:3: Skipped",
                           "[  SKIP    ] Bare.Skip (0 ms)"]),
])

EXPECTED = f"""\
Gpu.Runs: no CUDA device: driver too old
process.tls: this CAF has no OpenSSL
{PARAM}: shm closes the region
Bare.Skip: (no reason printed)
Not.Logged: (not in LastTest.log)
"""


def main():
    with tempfile.TemporaryDirectory() as tmp:
        testing = Path(tmp) / "Testing"
        (testing / "Temporary").mkdir(parents=True)
        (testing / "ctest-output.txt").write_text(CTEST_OUTPUT)
        (testing / "Temporary" / "LastTest.log").write_text(LAST_TEST_LOG)
        run = subprocess.run([sys.executable, str(SCRIPT), tmp], capture_output=True, text=True)
        if run.returncode != 0 or run.stdout != EXPECTED:
            print(f"exit {run.returncode}\n--- got\n{run.stdout}{run.stderr}--- wanted\n{EXPECTED}")
            return 1
        missing = subprocess.run([sys.executable, str(SCRIPT), str(Path(tmp) / "none")],
                                 capture_output=True, text=True)
        if missing.returncode != 2:
            print(f"a build folder without a run: exit {missing.returncode}, wanted 2")
            return 1
    print("skipped_tests.py: 5 skips with their reasons; a missing run is exit 2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
