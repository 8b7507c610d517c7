"""The suite's sanitizer scan finds reports: throwaway programs built with
-fsanitize=address,undefined trigger one each, under the suite's sanitizer
environment but with log_path pointed at this test's own directory (so the
suite itself does not fail), and conftest.sanitizer_reports() must find them,
in a log_path directory and in a job-style *.log."""
import os
import subprocess

import pytest

from conftest import SAN_DIR, sanitizer_reports

BAD = {
    "overflow.c": "#include <stdlib.h>\nint main(int c, char **v) { char *p = malloc(8); "
                  "p[8 + c - 1] = 1; return p[0]; }\n",
    "leak.c": "#include <stdlib.h>\nvoid *keep;\nint main(void) { keep = malloc(99); keep = 0; "
              "return 0; }\n",
    "ub.c": "#include <limits.h>\n#include <stdio.h>\nint main(int c, char **v) { "
            "volatile int i = INT_MAX - 1 + c; int j = i + 1; printf(\"%d\\n\", j); return 0; }\n",
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    d = tmp_path_factory.mktemp("san")
    out = {}
    for name, src in BAD.items():
        (d / name).write_text(src)
        exe = d / name[:-2]
        r = subprocess.run(["gcc", "-g", "-fsanitize=address,undefined",
                            "-fno-sanitize-recover=undefined", "-o", str(exe), str(d / name)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[name[:-2]] = exe
    return out


def run(exe, logdir=None):
    """Runs exe with the suite's ASAN_OPTIONS/UBSAN_OPTIONS (as a job's
    process would get them), log_path moved to logdir or removed."""
    env = dict(os.environ)
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        opts = [o for o in env[var].split(":") if not o.startswith("log_path=")]
        assert f"log_path={SAN_DIR}/report" in env[var]  # what every process inherits
        if logdir:
            opts.append(f"log_path={logdir}/report")
        env[var] = ":".join(opts + ["detect_leaks=1"] * (var == "ASAN_OPTIONS"))
    return subprocess.run([str(exe)], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("kind, first", [("overflow", "ERROR: AddressSanitizer: heap-buffer-overflow"),
                                         ("leak", "ERROR: LeakSanitizer: detected memory leaks")])
def test_scan_finds_a_report_in_log_path(programs, tmp_path, kind, first):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    assert sanitizer_reports(logdir) == []
    r = run(programs[kind], logdir)
    assert r.returncode != 0
    found = sanitizer_reports(logdir)
    assert len(found) == 1, found
    path, text = found[0]
    assert path.name.startswith("report.") and first in text, text


# UBSan in GCC's combined ASan + UBSan runtime ignores log_path and reports
# on stderr: those are found in the logs (and in `loom run`'s stderr).
@pytest.mark.parametrize("kind, first", [("overflow", "ERROR: AddressSanitizer: heap-buffer-overflow"),
                                         ("ub", "runtime error: signed integer overflow")])
def test_scan_finds_a_report_in_a_job_log(programs, tmp_path, kind, first):
    r = run(programs[kind])
    assert r.returncode != 0 and first in r.stderr
    logs = tmp_path / "home/jobs/j-1/logs"
    logs.mkdir(parents=True)
    (logs / "worker-0.log").write_text("=== loom: attempt 0 ===\nhello\n" + r.stderr)
    (logs / "chief-0.log").write_text("fine\n")
    found = sanitizer_reports(tmp_path / "home", logs_only=True)
    assert [p.name for p, _ in found] == ["worker-0.log"]
    assert first in found[0][1].splitlines()[0], found
