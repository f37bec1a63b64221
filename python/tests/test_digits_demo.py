"""The Python digits demo, run exactly as the README says."""

import subprocess


def test_digits_demo_reaches_95_percent():
    result = subprocess.run(
        ["/usr/bin/python3", "python/examples/digits.py"],
        capture_output=True, text=True, timeout=300, check=True)
    accuracy = float(result.stdout.strip().splitlines()[-1].split()[-1])
    assert accuracy >= 0.95, result.stdout
