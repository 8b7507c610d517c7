"""Bad specs are refused with exit 2 and file:line:column, before anything
starts."""
import resource

import pytest

CASES = [
    # (spec text, expected location, expected words)
    ("name: x\nroles:\n  worker: {command: 'true'\n", "4:1", "YAML syntax error"),
    ("name: x\nroles:\n  worker:\n    comand: ./train\n", "4:5",
     "unknown key 'comand' in role 'worker': did you mean 'command'?"),
    ("name: x\nrolez: {}\n", "2:1", "did you mean 'roles'?"),
    ("name: x\nroles:\n  worker: {instances: two, command: x}\n", "3:23",
     "roles.worker.instances must be a whole number"),
    ("name: x\nroles:\n  worker: {instances: 0, command: x}\n", "3:23",
     "roles.worker.instances must be between 1 and"),
    ("name: x\nroles:\n  worker: {instances: -2, command: x}\n", "3:23", "-2"),
    ("name: x\nroles:\n  worker: {memory: 2 GiG, command: x}\n", "3:20",
     "'2 GiG' is not a size"),
    ("name: x\nroles:\n  worker: {command: x}\n  worker: {command: y}\n", "4:3",
     "duplicate key 'worker' (first at line 3)"),
    ("name: x\nroles: {}\n", "2:8", "at least one role"),
    ("name: x\n", "1:1", "the spec has no roles"),
    ("name: x\nroles:\n  worker: {instances: 2}\n", "3:11", "role 'worker' has no command"),
    ("name: Bad Name\nroles:\n  w: {command: x}\n", "1:7", "name 'Bad Name' is not valid"),
    ("roles:\n  w: {command: x}\n", "1:1", "the spec has no name"),
    ("name: x\nretries: [1]\nroles:\n  w: {command: x}\n", "2:10", "retries must be a whole number"),
    ("name: x\nroles:\n  w: {command: {a: b}}\n", "3:16", "must be a string or a list"),
    ("name: x\nenv: {1BAD: x}\nroles:\n  w: {command: x}\n", "2:7", "not a valid environment"),
    ("name: x\nfiles: {data: ./does-not-exist}\nroles:\n  w: {command: x}\n", "2:15",
     "No such file"),
    ("name: x\nroles:\n  ps: {command: x}\n", "3:3", "every role is a service"),
    ("- a\n- b\n", "1:1", "a job spec is a map"),
    ("name: x\nroles:\n  w: {command: x}\n---\nbogus: 1\n", "4:1",
     "a second YAML document starts here: a spec is one document"),
    # TensorFlow's rules, at submit (issue 19.6)
    ("name: x\nroles:\n  chief: {command: x}\n  evaluator: {instances: 2, command: x}\n",
     "4:26", "TensorFlow allows at most one evaluator"),
    ("name: x\nroles:\n  chief: {instances: 2, command: x}\n", "3:22",
     "TensorFlow allows at most one chief"),
    ("name: x\nenv: {TF_CONFIG: '{}'}\nroles:\n  w: {command: x}\n", "2:7",
     "env.TF_CONFIG: loom sets TF_CONFIG for each task"),
    ("name: x\nroles:\n  w: {command: x, env: {MASTER_PORT: '1'}}\n", "3:25",
     "roles.w.env.MASTER_PORT: loom sets MASTER_PORT"),
]


@pytest.mark.parametrize("text,where,words", CASES)
def test_bad_spec(loom, text, where, words):
    spec = loom.spec(text)
    r = loom.run("run", spec)
    assert r.returncode == 2, r.stderr
    assert f"{spec}:{where}:" in r.stderr, r.stderr
    assert words in r.stderr, r.stderr
    assert loom.jobs() == []


def test_set_overrides(loom):
    spec = loom.spec("name: s\nroles:\n  worker: {command: 'echo $LOOM_INDEX'}\n")
    r = loom.run("run", spec, "--set", "roles.worker.instances=3", "--set", "env.X=1")
    assert r.returncode == 0, r.stderr
    assert sorted(l for l in r.stdout.splitlines()) == [f"[worker:{i}] {i}" for i in range(3)]
    r = loom.run("run", spec, "--set", "roles.worker.instances=abc")
    assert r.returncode == 2
    assert "--set roles.worker.instances=abc:1:1: roles.worker.instances must be a whole number" \
        in r.stderr
    r = loom.run("run", spec, "--set", "noequals")
    assert r.returncode == 2 and "expected key=value" in r.stderr


def test_missing_spec_file_and_usage(loom):
    r = loom.run("run", loom.tmp / "nope.yaml")
    assert r.returncode == 2 and "nope.yaml: cannot read the spec: no such file" in r.stderr
    r = loom.run("run")
    assert r.returncode == 2 and "missing SPEC" in r.stderr
    r = loom.run("run", "a.yaml", "--bogus")
    assert r.returncode == 2 and "unknown option --bogus" in r.stderr


def laughs():
    """A "billion laughs": nine levels of nine aliases each, 9**9 copies."""
    t = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for i in range(1, 10):
        t += f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n"
    return t


# Refused while parsing, in milliseconds: libyaml's document loader took
# seconds on 40,000 brackets and more than half a minute on 100,000 before
# loom's depth check ran.
HOSTILE = [
    ("env: " + "[" * 40_000 + "]" * 40_000 + "\n", "4:38: nested too deeply (at most 32 levels"),
    ("env: " + "[" * 100_000 + "]" * 100_000 + "\n", "4:38: nested too deeply (at most 32 levels"),
    ("env: " + "{a: " * 100_000 + "}" * 100_000 + "\n", "4:131: nested too deeply"),
    (laughs(), " the document is too large (more than 100000 nodes)"),
]


@pytest.mark.parametrize("body,where", HOSTILE, ids=["40k", "100k", "100k-maps", "laughs"])
def test_hostile_spec_refused_fast(loom, body, where):
    spec = loom.spec("name: x\nroles:\n  w: {command: 'true'}\n" + body)
    def cpu():
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    t0 = cpu()
    r = loom.run("run", spec, timeout=60)
    took = cpu() - t0  # CPU time, not wall: the machine may be busy
    assert r.returncode == 2, r.stderr
    assert f"{spec}:{where}" in r.stderr, r.stderr
    assert took < 1.0, f"took {took:.1f} s of CPU"
    assert loom.jobs() == []


def test_tensorflow_rules_that_are_warnings(loom):
    """An evaluator with no chief, and a command that sets TF_CONFIG itself,
    are allowed but said at submit, located, before the job runs."""
    spec = loom.spec("name: x\nroles:\n  worker: {command: 'TF_CONFIG={} true'}\n"
                     "  evaluator: {command: 'true'}\n")
    r = loom.run("run", spec)
    assert r.returncode == 0, r.stderr
    warns = [l for l in r.stderr.splitlines() if l.startswith("loom: warning: ")]
    assert warns == [
        f"loom: warning: {spec}:4:14: roles.evaluator: the job has an evaluator but no "
        "chief: TensorFlow's evaluator evaluates the checkpoints the chief writes (Estimator "
        "refuses such a cluster; under MultiWorkerMirroredStrategy worker 0 writes them)",
        f"loom: warning: {spec}:3:21: roles.worker.command sets TF_CONFIG itself: that "
        "replaces the one loom made from the ports it reserved for the job (LOOM_CLUSTER has "
        "them)"], r.stderr
    ok = loom.spec("name: y\nroles:\n  chief: {command: 'true'}\n"
                   "  evaluator: {command: 'true'}\n", name="ok.yaml")
    r = loom.run("run", ok)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_set_with_trailing_text_is_refused(loom):
    """--set's value is one YAML value: text after it is an error, not
    silently dropped (roles.w.command="echo" there ran plain echo)."""
    spec = loom.spec("name: x\nroles:\n  w: {command: 'true'}\n")
    for val in ('"echo" there', "[echo, a] b"):
        r = loom.run("run", spec, "--set", f"roles.w.command={val}")
        assert r.returncode == 2, (val, r.stderr)
        assert f"--set roles.w.command={val}:1:" in r.stderr and "YAML syntax error" in r.stderr
    assert loom.jobs() == []
