"""Logs where Hadoop users look (issue 31 item 3): each task's output is
also in its container's log directory, stdout to `stdout` and stderr to
`stderr`, as YARN users expect (the NodeManager's yarn.nodemanager.log-dirs,
what `yarn logs` and the ResourceManager UI's log links show)."""
import json
import re
import urllib.error
import urllib.request

import pytest

from conftest import no_process_left


def test_each_tasks_output_is_in_its_containers_log_files(yloom, yarn):
    s = yloom.spec("""
name: ylogs
backend: yarn
roles:
  chief: {command: 'echo "OUT-$LOOM_TASK"; echo "ERR-$LOOM_TASK" >&2'}
  worker:
    instances: 2
    command: 'echo "OUT-$LOOM_TASK"; echo "ERR-$LOOM_TASK" >&2; echo "OUT2-$LOOM_TASK"'
""")
    r = yloom.run("run", s, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    apps = [a["id"] for a in yarn.apps() if a["name"] == "ylogs"]
    assert len(apps) == 1, apps
    app = apps[0]
    containers = sorted(yarn.dir.glob(f"nm*/logs/{app}/container_*"))
    tasks = ["chief:0", "worker:0", "worker:1"]
    assert len(containers) == len(tasks), containers
    seen = {}
    for c in containers:
        out = (c / "stdout").read_text()
        err = (c / "stderr").read_text()
        mine = [t for t in tasks if f"OUT-{t}\n" in out]
        assert len(mine) == 1, (c, out)  # one task per container, its lines only
        t = mine[0]
        seen[t] = c
        assert f"ERR-{t}\n" in err and f"ERR-{t}" not in out, (c, out, err)
        assert f"OUT-{t}" not in err, (c, err)
        if t.startswith("worker"):  # in order
            assert out.index(f"OUT-{t}\n") < out.index(f"OUT2-{t}\n"), out
    assert sorted(seen) == tasks, seen


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode(errors="replace")


def test_a_failed_tasks_container_log_url_is_printed_and_served(yloom, yarn):
    """On failure the console names each failed task's container log page
    on its NodeManager's web UI (what the ResourceManager UI links to), and
    that page serves the task's stderr."""
    s = yloom.spec("""
name: ylogfail
backend: yarn
roles:
  chief: {command: 'echo "ERR-$LOOM_TASK-BOOM" >&2; exit 3'}
  worker: {command: 'sleep 60'}
""")
    r = yloom.run("run", s, timeout=180)
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    urls = re.findall(r"^loom: (\S+)'s container logs: (\S+)$", r.stderr, re.M)
    assert [t for t, _ in urls] == ["chief:0"], r.stderr[-3000:]
    assert "once aggregated" not in r.stderr  # this cluster aggregates no logs
    url = urls[0][1]
    apps = [a["id"] for a in yarn.apps() if a["name"] == "ylogfail"]
    assert len(apps) == 1, apps
    m = re.fullmatch(r"http://([^/]+)/node/containerlogs/(container_\w+)/([^/]+)", url)
    assert m, url
    assert m.group(2).startswith("container_" + apps[0][len("application_"):]), (url, apps)
    # the container the chief ran in: its stderr file holds the line
    cdir = list(yarn.dir.glob(f"nm*/logs/{apps[0]}/{m.group(2)}"))
    assert len(cdir) == 1 and "ERR-chief:0-BOOM" in (cdir[0] / "stderr").read_text(), cdir
    status, page = fetch(url)
    assert status == 200 and "stderr" in page, page[:2000]
    # the page lists the container's files, each a link to its content
    status, page = fetch(f"{url}/stderr/?start=0")
    assert status == 200, status
    assert "ERR-chief:0-BOOM" in page, page[:3000]


def through_proxy(yloom, yarn, name, submit=False):
    """Runs a job that waits for a file (`loom run`, or `loom submit`: the
    managed AM), and reads its dashboard through the ResourceManager's web
    proxy while it runs: the application's tracking URL."""
    gate = yloom.tmp / f"{name}-go"
    s = yloom.spec(f"""
name: {name}
backend: yarn
roles:
  chief: {{command: 'while [ ! -e {gate} ]; do sleep 0.1; done'}}
""", name=f"{name}.yaml")
    p = job_id = None
    if submit:
        r = yloom.run("submit", s, timeout=60)
        assert r.returncode == 0, r.stderr
        job_id = r.stdout.strip()
    else:
        p = yloom.popen("run", s)
    try:
        def running():
            a = [a for a in yarn.apps() if a["name"] == name and a["state"] == "RUNNING"]
            return a[0] if a else None
        app = yloom.wait_for(running, timeout=120, what="the application RUNNING")
        proxy = f"{yarn.web}/proxy/{app['id']}"
        job = yloom.wait_for(lambda: yloom.job_dir() and yloom.state().get("dashboard"),
                             timeout=60, what="the dashboard in state.json")
        token = job.split("token=")[1]
        # the ResourceManager links its proxy's URL (a managed AM), or the
        # dashboard's own (an unmanaged AM: YARN proxies none of those), never
        # the token
        if submit:
            assert app["trackingUrl"].rstrip("/").endswith(f"/proxy/{app['id']}"), app
        else:
            assert app["trackingUrl"] == job.split("?")[0], (app["trackingUrl"], job)

        def api_job():
            try:
                with urllib.request.urlopen(f"{proxy}/api/job", timeout=10) as r:
                    j = json.load(r)
            except (OSError, ValueError):
                return None
            return j if j.get("state") == "running" else None
        j = yloom.wait_for(api_job, timeout=60, what="the job's api/job through the proxy")
        assert j["name"] == name, j
        status, page = fetch(f"{proxy}/")
        assert status == 200 and "<html" in page.lower(), page[:500]
        # a request that carries a token must carry the right one, proxy or not
        with pytest.raises(urllib.error.HTTPError) as e:
            fetch(f"{proxy}/api/job?token={'0' * len(token)}")
        assert e.value.code == 403
        # the token is nowhere in what YARN shows (the tracking URL has none)
        assert token not in json.dumps(yarn.rest(f"apps/{app['id']}"))
    finally:
        gate.touch()
    if p:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    else:
        def done():
            return "state    succeeded" in yloom.run("status", job_id).stdout
        yloom.wait_for(done, timeout=120, what="the submitted job to succeed")
        no_process_left(yloom)


def test_the_tracking_url_shows_the_dashboard_through_the_rm_proxy(yloom, yarn):
    through_proxy(yloom, yarn, "ylogui")


def test_the_managed_ams_tracking_url_shows_its_dashboard(yloom, yarn):
    through_proxy(yloom, yarn, "ylogmui", submit=True)
