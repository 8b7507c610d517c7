"""Logs where Hadoop users look, with log aggregation on (issue 31 item 3),
on the Hadoop cluster whose hosts are really apart (conftest's
hadoop_hosts: scripts/yarn-cluster.sh --hosts turns aggregation on, into
/app-logs on its HDFS): each task's output is in its container's `stdout`
and `stderr`, which each NodeManager uploads when the application ends,
and the real `yarn logs -applicationId <id>` (Hadoop's LogsCLI, in Java,
on the script's classpath) prints every task's lines."""
import json
import re
import signal
import subprocess
import urllib.error
import urllib.request

import pytest

from clusters import JAVA_OPTS, hadoop_available, hadoop_classpath

pytestmark = pytest.mark.skipif(
    not hadoop_available(),
    reason="java and mvn are not installed (scripts/setup.sh installs a JDK and Maven)")

TASKS = ["chief:0", "worker:0", "worker:1"]
LIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")


def apps(h):
    return (h.rest("apps").get("apps") or {}).get("app") or []


@pytest.fixture
def hloom(loom, hadoop_hosts):
    """loom with the cluster's HADOOP_CONF_DIR, as the client's user; no
    application of the test live after it."""
    h = hadoop_hosts
    loom.env["HADOOP_CONF_DIR"] = str(h.conf)
    loom.env.pop("HADOOP_USER_NAME", None)
    loom.wait_for(lambda: sorted(n["state"] for n in h.rest("nodes")["nodes"]["node"]) ==
                  ["RUNNING", "RUNNING"], timeout=120, what="both NodeManagers RUNNING")
    yield loom
    # the RM's reports reach an application's final state a moment after
    # its AM unregistered (or was killed)
    live = []

    def none_live():
        live[:] = [a for a in apps(h) if a["state"] in LIVE]
        return not live
    try:
        loom.wait_for(none_live, timeout=20, what="no live YARN application")
    except AssertionError:
        pass
    assert not live, live


def yarn_logs(h, app, *more):
    """`yarn logs -applicationId app [more...]`: {container: {log type:
    contents}}, and LogsCLI's whole output."""
    cp = f"{h.conf}:{hadoop_classpath()}"
    r = subprocess.run(["java", *JAVA_OPTS, "-cp", cp,
                        "org.apache.hadoop.yarn.client.cli.LogsCLI", "-applicationId", app,
                        *more],
                       capture_output=True, text=True, timeout=180,
                       env={"PATH": "/usr/bin:/bin", "HADOOP_CONF_DIR": str(h.conf)})
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    out = {}
    for block in re.split(r"^Container: ", r.stdout, flags=re.M)[1:]:
        cid = block.split()[0]
        # a block per container and log file (LogsCLI repeats the header)
        out.setdefault(cid, {}).update({m.group(1): m.group(2) for m in re.finditer(
            r"^LogType:(\S+)\n.*?^LogContents:\n(.*?)^End of LogType:\1", block, re.M | re.S)})
    return out, r.stdout


def wait_aggregated(hloom, h, app):
    def aggregated():
        st = h.rest(f"apps/{app}")["app"].get("logAggregationStatus")
        assert st not in ("FAILED", "TIME_OUT", "DISABLED"), st
        return st == "SUCCEEDED"
    hloom.wait_for(aggregated, timeout=120, what="the NodeManagers to aggregate the logs")


def run_aggregated(hloom, h, name, worker_command):
    """Runs a job named name across the nodes (a chief that prints OUT- and
    ERR- lines, 2 workers running worker_command; the coordinator where the
    nodes reach it, the client's address), waits for the NodeManagers to
    aggregate its logs, and returns its application id and what `yarn logs`
    prints of it (yarn_logs)."""
    s = hloom.spec(f"""
name: {name}
backend: yarn
roles:
  chief: {{command: 'echo "OUT-$LOOM_TASK"; echo "ERR-$LOOM_TASK" >&2'}}
  worker:
    instances: 2
    command: '{worker_command}'
""")
    r = hloom.run("run", "--backend", "yarn", "--bind", h.addrs["client"], s, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    found = [a["id"] for a in apps(h) if a["name"] == name]
    assert len(found) == 1, found
    app = found[0]
    wait_aggregated(hloom, h, app)
    return (app, *yarn_logs(h, app))


def test_yarn_logs_prints_every_tasks_lines(hloom, hadoop_hosts):
    h = hadoop_hosts
    app, logs, text = run_aggregated(
        hloom, h, "yhlogs",
        'echo "OUT-$LOOM_TASK"; echo "ERR-$LOOM_TASK" >&2; echo "OUT2-$LOOM_TASK"')
    seen = {}
    for cid, files in logs.items():
        assert cid.startswith("container_" + app[len("application_"):]), (cid, app)
        out, err = files.get("stdout", ""), files.get("stderr", "")
        mine = [t for t in TASKS if f"OUT-{t}\n" in out]
        assert len(mine) == 1, (cid, files)  # one task per container, its lines only
        t = mine[0]
        assert t not in seen, (t, cid, seen)
        seen[t] = cid
        assert f"ERR-{t}\n" in err and "ERR-" not in out and "OUT-" not in err, (cid, files)
        if t.startswith("worker"):
            assert out.index(f"OUT-{t}\n") < out.index(f"OUT2-{t}\n"), out
    assert sorted(seen) == TASKS, text[-4000:]


def test_a_failed_tasks_logs_are_named_for_after_aggregation(hloom, hadoop_hosts):
    """On failure the console names the container's page on its NodeManager
    and, since this cluster aggregates logs (after which the NodeManager
    serves that page no more), the `yarn logs` command that reads them
    then; that command prints the task's stderr."""
    h = hadoop_hosts
    s = hloom.spec("""
name: yhlogfail
backend: yarn
retries: 0
roles:
  chief: {command: 'echo "ERR-$LOOM_TASK-BOOM" >&2; exit 3'}
""")
    r = hloom.run("run", "--backend", "yarn", "--bind", h.addrs["client"], s, timeout=240)
    assert r.returncode == 1, r.stderr[-3000:]
    found = [a["id"] for a in apps(h) if a["name"] == "yhlogfail"]
    assert len(found) == 1, found
    app = found[0]
    m = re.search(r"^loom: chief:0's container logs: http://\S+/node/containerlogs/"
                  r"(container_\w+)/\S+\nloom:   once aggregated: (.*)$", r.stderr, re.M)
    assert m, r.stderr[-3000:]
    cid = m.group(1)
    assert m.group(2) == f"yarn logs -applicationId {app} -containerId {cid}", m.group(2)
    wait_aggregated(hloom, h, app)
    logs, text = yarn_logs(h, app, "-containerId", cid)
    assert list(logs) == [cid], text[-3000:]
    assert logs[cid].get("stderr", "").startswith("ERR-chief:0-BOOM\n"), logs


def test_only_the_rm_proxy_reads_the_dashboard_without_its_token(hloom, hadoop_hosts):
    """The dashboard (at the client's address) serves a token-less request
    that comes through the ResourceManager's web proxy (from the head
    host's address), and refuses the same request from anywhere else (the
    client's own address): 401."""
    h = hadoop_hosts
    s = hloom.spec("""
name: yhproxy
backend: yarn
roles:
  chief: {command: 'sleep 120'}
""")
    p = hloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    try:
        dash = hloom.wait_for(lambda: hloom.jobs() and hloom.state().get("dashboard"),
                              timeout=90, what="the dashboard in state.json")
        base, token = dash.split("?token=")
        assert base.startswith(f"http://{h.addrs['client']}:"), dash
        app = hloom.wait_for(lambda: [a for a in apps(h) if a["name"] == "yhproxy" and
                                      a["state"] == "RUNNING"], timeout=90,
                             what="the application RUNNING")[0]["id"]

        def via_proxy():
            try:
                with urllib.request.urlopen(f"{h.web}/proxy/{app}/api/job", timeout=10) as r:
                    return json.load(r)
            except (OSError, ValueError):
                return None
        j = hloom.wait_for(via_proxy, timeout=60, what="api/job through the proxy")
        assert j["name"] == "yhproxy", j
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}api/job", timeout=10)
        assert e.value.code == 401
        with urllib.request.urlopen(f"{base}api/job?token={token}", timeout=10) as r:
            assert json.load(r)["name"] == "yhproxy"
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "interrupted" in err, err[-3000:]


def test_loom_logs_reads_the_aggregated_logs_when_the_job_directory_is_gone(hloom, hadoop_hosts):
    """`loom logs` from YARN's aggregated logs (src/cli/aggrlogs.c, loom's
    own TFile reader over its HDFS client): after the job's directory is
    gone, `loom logs <application>` prints every task's lines, prefixed,
    exactly as `yarn logs` has them in the task's container; with --task,
    the task's own; and `loom logs JOB` of a job whose directory lost its
    logs reads them from its application too."""
    h = hadoop_hosts
    app, logs, text = run_aggregated(
        hloom, h, "yhaggr",
        'for i in 1 2 3; do echo "OUT$i-$LOOM_TASK"; done; echo "ERR-$LOOM_TASK" >&2')
    # each task's lines as the reference (Hadoop's LogsCLI) has them: the
    # task named by the container's own first line
    # (LogsCLI ends each file's contents with a newline of its own)
    want = {}
    for cid, files in logs.items():
        out, err = (files.get(f, "")[:-1] for f in ("stdout", "stderr"))
        m = re.match(r"OUT1?-(\S+)\n", out)
        if m:
            want[m.group(1)] = out + err
    assert sorted(want) == TASKS, text[-3000:]
    job = hloom.job_dir()
    # the job directory lost its logs: `loom logs JOB` reads the application's
    for f in (job / "logs").iterdir():
        f.unlink()
    r = hloom.run("logs", job.name, "--task", "worker:1", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == want["worker:1"], (r.stdout, want["worker:1"])
    # the job directory gone: by the application id
    import shutil
    shutil.rmtree(job)
    r = hloom.run("logs", app, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    expect = "".join(f"[{t}] {l}\n" for t in TASKS for l in want[t].splitlines())
    assert r.stdout == expect, (r.stdout, expect)
    for t in TASKS:
        r = hloom.run("logs", app, "--task", t, timeout=120)
        assert r.returncode == 0 and r.stdout == want[t], (t, r.stdout, r.stderr[-2000:])
    r = hloom.run("logs", app, "--task", "worker:7", timeout=120)
    assert r.returncode == 2 and "no task worker:7" in r.stderr, (r.returncode, r.stderr)
    r = hloom.run("logs", "application_1_0001", timeout=120)
    assert r.returncode == 2 and "no aggregated logs of application_1_0001" in r.stderr, r.stderr


def leaks(secret, texts):
    """The names of the texts that hold the secret or any 16 hex digits of
    it (as test_security's)."""
    parts = [secret[i:i + 16] for i in range(0, len(secret) - 15, 4)]
    return [name for name, t in texts if any(p in t for p in parts)]


def test_the_secret_is_in_no_launch_script_nor_aggregated_log(hloom, hadoop_hosts):
    """The job's secret reaches each task container in its credentials
    (the container's private container_tokens, HADOOP_TOKEN_FILE_LOCATION),
    not its environment: the NodeManager's launch_container.sh (which it
    keeps in nmPrivate and the container's log directory, and aggregates
    with the logs) holds LOOM_TASK but no LOOM_SECRET, and `yarn logs` of the
    application shows no part of it; the agent reads it from the
    credentials and the tasks have it in LOOM_SECRET as elsewhere."""
    h = hadoop_hosts
    s = hloom.spec("""
name: yhsecret
backend: yarn
roles:
  chief: {command: 'echo "LEN-$LOOM_TASK-${#LOOM_SECRET}"'}
  worker:
    instances: 2
    command: 'echo "LEN-$LOOM_TASK-${#LOOM_SECRET}"'
""")
    r = hloom.run("run", "--backend", "yarn", "--bind", h.addrs["client"], s, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    secret = (hloom.job_dir() / "secret").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", secret), secret
    found = [a["id"] for a in apps(h) if a["name"] == "yhsecret"]
    assert len(found) == 1, found
    app = found[0]
    # the NodeManagers keep what they wrote a while
    # (yarn.nodemanager.delete.debug-delay-sec): each launch script, in
    # nmPrivate and the container's log directory, and each container's
    # credentials (nmPrivate's <container>.tokens, which the container
    # gets as container_tokens)
    scripts = [p for p in h.dir.rglob("launch_container.sh") if app in str(p)]
    tokens = [p for p in h.dir.rglob("*tokens") if app in str(p) and p.is_file() and
              not p.name.startswith(".")]
    assert len(scripts) >= len(TASKS) and len(tokens) >= len(TASKS), (scripts, tokens)
    texts = [(str(p), p.read_bytes().decode("utf-8", "replace")) for p in scripts]
    assert sum("LOOM_TASK=" in t for _, t in texts) >= len(TASKS), texts[0]
    assert not [n for n, t in texts if "LOOM_SECRET" in t]
    assert not leaks(secret, texts)
    # the check can fail: the secret is in each task container's
    # credentials, under its key
    creds = [(str(p), p.read_bytes().decode("latin-1")) for p in tokens]
    assert len(leaks(secret, creds)) == len(creds), creds
    assert all(t.startswith("HDTS") and "loom.job.secret" in t for _, t in creds), creds
    wait_aggregated(hloom, h, app)
    logs, text = yarn_logs(h, app)
    assert "LogType:launch_container.sh" in text and "LOOM_TASK=" in text, text[-3000:]
    assert not leaks(secret, [("yarn logs", text)])
    # the tasks have it, from the agent (64 hex digits)
    outs = "".join(f.get("stdout", "") for f in logs.values())
    for t in TASKS:
        assert f"LEN-{t}-64\n" in outs, outs
