"""Tunables and job lookup as a user meets them: `loom help tunables`
prints every row of the one table (src/core/tun.h) but the internal ones
(--all adds them), docs/tunables.md is what `loom help tunables
--markdown` prints, `loom --version` is the file VERSION, a bad value is a warning that names the variable, the
value and the range (and the default is used), and JOB is an id, a unique
prefix or `last`, an ambiguous prefix naming its candidates."""
import re

from conftest import ROOT

TABLE = ROOT / "src" / "core" / "tun.h"


DOC = ROOT / "docs" / "tunables.md"


def table_rows():
    """(variable, internal) for every row the table declares, in its order:
    a row is internal when its doc string starts with "internal:"."""
    text = TABLE.read_text()
    starts = list(re.finditer(r'^\s*[NW]\(\w+,\s*"(LOOM_[A-Z0-9_]+)"', text, re.M))
    assert len(starts) > 30, "the table's rows were not found"
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [(m.group(1), '"internal:' in text[m.end():end])
            for m, end in zip(starts, ends)]


def table_variables(internal=False):
    """The variables `loom help tunables` lists (with --all: internal too)."""
    return [v for v, i in table_rows() if internal or not i]


def test_help_tunables_lists_the_table(loom):
    r = loom.run("help", "tunables")
    assert r.returncode == 0, r.stderr
    listed = [l.split()[0] for l in r.stdout.splitlines() if l.startswith("LOOM_")]
    assert listed == table_variables()
    assert "LOOM_PREV_PORT" not in listed  # internal: the coordinator's word to an agent
    r = loom.run("help", "tunables", "--all")
    assert r.returncode == 0, r.stderr
    listed = [l.split()[0] for l in r.stdout.splitlines() if l.startswith("LOOM_")]
    assert listed == table_variables(internal=True)
    assert loom.run("help", "tunables", "--bogus").returncode == 2
    row = next(l for l in r.stdout.splitlines() if l.startswith("LOOM_MAX_FRAME "))
    assert row.split()[1:5] == ["4", "MiB", "4", "KiB..1"], row
    # the usage points there
    assert "loom help tunables" in loom.run("help").stdout


def test_tunables_doc_is_generated(loom):
    r = loom.run("help", "tunables", "--markdown")
    assert r.returncode == 0, r.stderr
    assert r.stdout == DOC.read_text(), (
        "docs/tunables.md is not what `loom help tunables --markdown` prints: "
        "regenerate it with `loom help tunables --markdown > docs/tunables.md`")
    rows = [l.split("`")[1] for l in r.stdout.splitlines() if l.startswith("| `LOOM_")]
    assert rows == table_variables()


def test_version_is_the_version_file(loom):
    version = (ROOT / "VERSION").read_text().strip()
    r = loom.run("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"loom {version}\n"
    assert loom.run("help").stdout.startswith(f"loom {version}: ")


def test_bad_value_warns_and_uses_default(loom):
    spec = loom.spec("name: tun\nroles:\n  worker: {command: 'true'}\n")
    r = loom.run("run", spec, env={"LOOM_RENDEZVOUS_TIMEOUT": "soon",
                                   "LOOM_HEARTBEAT": "5"})
    assert r.returncode == 0, r.stderr
    assert ("LOOM_RENDEZVOUS_TIMEOUT=soon is not a whole number (1 ms..604800000 ms); "
            "using the default 60000 ms") in r.stderr
    assert ("LOOM_HEARTBEAT=5 is out of range (10 ms..3600000 ms); "
            "using the default 1000 ms") in r.stderr
    # once per process, not once per read
    assert r.stderr.count("LOOM_HEARTBEAT=5") <= 2  # the coordinator and the agent


def test_job_lookup_prefix_ambiguous_last(loom):
    spec = loom.spec("name: look\nroles:\n  worker: {command: 'true'}\n")
    for _ in range(2):
        assert loom.run("run", spec).returncode == 0
    ids = sorted(p.name for p in loom.jobs())
    newest = loom.run("status", "last", "--json")
    assert newest.returncode == 0, newest.stderr
    r = loom.run("status", "look")
    assert r.returncode == 2
    assert "'look' matches 2 jobs:" in r.stderr and all(i in r.stderr for i in ids)
    assert "give more of the id" in r.stderr
    r = loom.run("events", ids[0][:-1])  # unique: the hex differs... or not
    assert r.returncode in (0, 2)
    assert loom.run("events", ids[0]).returncode == 0
    r = loom.run("logs", "nope")
    assert r.returncode == 2 and "no job 'nope' under" in r.stderr
