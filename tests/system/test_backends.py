"""The backend interface: nothing outside src/backend/ names a cluster
manager; the names come from the registry (src/backend/backend.c)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a backend's name as a string, or a Slurm command run from C
NAMES = re.compile(r'"(local|slurm|external|yarn|spark|k8s)"|"(sbatch|srun|squeue|scancel|scontrol|sinfo|sbcast)\b')


def test_no_backend_name_outside_src_backend():
    found = []
    for p in sorted((ROOT / "src").rglob("*.[ch]")):
        if (ROOT / "src" / "backend") in p.parents:
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if NAMES.search(line):
                found.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "backend names outside src/backend/:\n" + "\n".join(found)


def test_backend_names_come_from_the_registry(loom, tmp_path):
    h = loom.run("help", "run")
    assert "backends: local, slurm, yarn, spark, external (default local)" in h.stdout, h.stdout
    spec = loom.spec("name: b\nbackend: nosuch\nroles: {w: {command: 'true'}}\n")
    r = loom.run("run", spec)
    assert r.returncode == 2
    assert "backend 'nosuch' is not known: use one of local, slurm, yarn, spark, external" in r.stderr, r.stderr
    r = loom.run("check", "--backend", "nosuch")
    assert "backend 'nosuch' is not available (local, slurm, yarn, spark, external)" in r.stdout, r.stdout


def test_cluster_that_cannot_be_asked_is_a_backend_error(loom, tmp_path):
    # sinfo failing (a cluster down, a wrong SLURM_CONF) is exit 3, not a
    # refusal of the spec, and nothing is submitted
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("sinfo", "sbatch"):
        (bindir / cmd).write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact "
                                  "slurm controller (connect failure)' >&2\nexit 1\n")
        (bindir / cmd).chmod(0o755)
    spec = loom.spec("name: b\nbackend: slurm\nroles: {w: {command: 'true'}}\n")
    r = loom.run("run", spec, env={"PATH": f"{bindir}:{loom.env['PATH']}"})
    assert r.returncode == 3, r.stdout + r.stderr
    assert "cannot ask Slurm for its nodes (sinfo failed): slurm_load_partitions: Unable to " \
           "contact slurm controller" in r.stderr, r.stderr
    assert loom.jobs() == []
