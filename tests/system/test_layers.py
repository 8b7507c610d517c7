"""The layer graph of loom's C sources: which folder may include which.

This file is the source of truth for the layers (docs/design.md's "Layers"
section describes them and points here). A folder of src/ is a link unit
(CMake takes folders whole) and a layer: ALLOWED below says, for each
folder, the folders whose headers its files may #include. Arrows go one
way: ALLOWED has no cycle, and the test fails on one.

The test reads every `#include "..."` in src/**/*.{c,h} and include/**/*.h
(no build needed), works out the folder the included header lives in, and
fails listing each include that ALLOWED does not allow (file:line ->
folder), each header it cannot place, and each folder of src/ that ALLOWED
does not name. A folder's subfolders are the folder (src/backend/slurm/ is
`backend`); include/ (the public API, loom.h and loom/*.h) is `include`;
the C that protoc-c generates from a folder's proto/*.proto
("RpcHeader.pb-c.h") is that folder's.

To add an arrow: add it to ALLOWED where the design allows it (never one
that makes a cycle: move the shared part down a layer instead, or pass it
in). To add a folder: give it its row.
"""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
INCLUDE = ROOT / "include"

# Every folder a part of libloom, the loom command or both is built from,
# with the folders it may include (its own is always allowed). From the
# bottom up; `core` and the public API are everyone's.
BASE = {"include", "core"}
ALLOWED = {
    # the public API: loom.h and loom/*.h include nothing of src/
    "include": set(),
    # errors, tunables, buffers, CRC32C, rate-limited logs
    "core": {"include"},
    # libloom and the loom command: frames, typed messages, auth, TLS
    "wire": BASE,
    # Hadoop IPC, SASL, configuration, the HDFS client
    "hadoop": BASE,
    # files: local or on HDFS
    "fs": BASE | {"hadoop"},
    # libloom's handle (loom_init, errors)
    "lib": BASE | {"wire"},
    # libloom's parts
    "comm": BASE | {"lib", "wire"},
    "ps": BASE | {"lib", "wire", "fs", "ckpt"},  # ckpt: the checkpoint directory
    "feed": BASE | {"lib", "wire", "fs"},
    "summary": BASE | {"lib", "fs"},
    "ckpt": BASE | {"lib", "fs"},
    # the loom command's parts
    "wireuv": BASE | {"wire"},  # frames on a libuv stream
    "jobdir": BASE,  # a job directory's files
    "spec": BASE,  # the job spec (it asks the program for the backends' names)
    "yarn": BASE | {"hadoop"},  # the YARN client and its application master
    "backend": BASE | {"spec", "jobdir", "fs", "hadoop", "yarn"},
    "http": BASE | {"jobdir", "wire", "wireuv"},  # the dashboard
    "agent": BASE | {"jobdir", "fs", "wire", "wireuv", "hadoop"},  # hadoop: a container's credentials
    "coord": BASE | {"backend", "spec", "jobdir", "feed", "fs", "http", "wire", "wireuv"},
    "cli": BASE | {"agent", "backend", "coord", "spec", "jobdir", "fs", "hadoop", "http", "ps",
                   "wire"},
}
# What libloom (what user programs link) is built from: none of it may
# include the loom command's parts.
LIBLOOM = {"include", "core", "wire", "hadoop", "fs", "lib", "comm", "ps", "feed", "summary",
           "ckpt"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    """The layer a file of src/ or include/ is in."""
    if INCLUDE in path.parents:
        return "include"
    return path.relative_to(SRC).parts[0]


def protos():
    """The folder that holds each generated message header's .proto."""
    out = {}
    for p in SRC.glob("**/proto/*.proto"):
        out[p.stem + ".pb-c.h"] = folder_of(p)
    return out


def place(including, name, generated):
    """The folder the header `name`, included from `including`, is in; None
    if it is nowhere loom's include path (include/, src/, the file's own
    directory, the generated messages) would find it."""
    for base in (including.parent, SRC, INCLUDE):
        p = (base / name).resolve()
        if p.is_file() and (SRC in p.parents or INCLUDE in p.parents):
            return folder_of(p)
    return generated.get(name)


def sources():
    files = [p for p in SRC.rglob("*") if p.suffix in (".c", ".h") and p.is_file()]
    files += [p for p in INCLUDE.rglob("*.h") if p.is_file()]
    return sorted(files)


def arrows():
    """(file, line number, folder it includes) for every include that leaves
    its own folder, and (file, line, name) for every header not placed."""
    generated = protos()
    found, unplaced = [], []
    for f in sources():
        own = folder_of(f)
        for no, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            to = place(f, m.group(1), generated)
            if to is None:
                unplaced.append((f, no, m.group(1)))
            elif to != own:
                found.append((f, no, to))
    return found, unplaced


def disallowed(found):
    """The arrows of found that ALLOWED does not allow."""
    return [(f, no, to) for f, no, to in found if to not in ALLOWED.get(folder_of(f), set())]


def cycle(graph):
    """One cycle in graph as a list of nodes (first == last), or None."""
    state = {}

    def visit(n, path):
        state[n] = "open"
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return path[path.index(m):] + [m] if m in path else [n, m]
            if m not in state:
                c = visit(m, path + [m])
                if c:
                    return c
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n, [n])
            if c:
                return c
    return None


def rel(p):
    return p.relative_to(ROOT).as_posix()


def test_the_allowed_graph_has_no_cycle():
    c = cycle(ALLOWED)
    assert c is None, "ALLOWED has a cycle: " + " -> ".join(c)
    for k, v in ALLOWED.items():
        assert k not in v, f"ALLOWED[{k!r}] names the folder itself"
        unknown = v - ALLOWED.keys()
        assert not unknown, f"ALLOWED[{k!r}] names folders that have no row: {sorted(unknown)}"


def test_libloom_includes_nothing_of_the_command():
    for k in sorted(LIBLOOM):
        out = ALLOWED[k] - LIBLOOM
        assert not out, f"{k} is libloom's but may include the loom command's {sorted(out)}"


def test_every_folder_of_src_is_a_layer():
    folders = {p.name for p in SRC.iterdir() if p.is_dir()}
    missing = sorted(folders - ALLOWED.keys())
    assert not missing, (f"src/ folders with no row in ALLOWED ({__file__}): {missing}: "
                         "give each the folders it may include")


def test_every_include_follows_an_allowed_arrow():
    found, unplaced = arrows()
    assert found, "no include crosses a folder: the test reads nothing"
    bad = [f"{rel(f)}:{no} -> {to}" for f, no, to in disallowed(found)]
    assert not unplaced, "headers the test cannot place:\n" + "\n".join(
        f"{rel(f)}:{no}: \"{name}\"" for f, no, name in unplaced)
    assert not bad, ("includes that the layer graph (ALLOWED in this file) does not allow:\n"
                     + "\n".join(bad))


@pytest.mark.parametrize("graph,has", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"a"}}, True),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"c", "a"}}, False),
])
def test_cycle_finds_cycles(graph, has):
    c = cycle(graph)
    assert (c is not None) == has, c
    if c:
        assert c[0] == c[-1] and all(b in graph[a] for a, b in zip(c, c[1:]))


def test_a_disallowed_include_is_reported(tmp_path, monkeypatch):
    """The check can fail: spec including backend's header (the cycle that
    was broken) is reported with its file and line."""
    src = tmp_path / "src"
    (src / "spec").mkdir(parents=True)
    (src / "backend").mkdir()
    (src / "backend" / "backend.h").write_text('#include "spec/spec.h"\n')
    (src / "spec" / "spec.h").write_text("\n")
    (src / "spec" / "spec.c").write_text('#include "spec/spec.h"\n#include "backend/backend.h"\n')
    monkeypatch.setattr(sys.modules[__name__], "SRC", src)
    monkeypatch.setattr(sys.modules[__name__], "INCLUDE", tmp_path / "include")
    found, unplaced = arrows()
    assert not unplaced
    bad = [(f.relative_to(tmp_path).as_posix(), no, to) for f, no, to in disallowed(found)]
    assert bad == [("src/spec/spec.c", 2, "backend")]
