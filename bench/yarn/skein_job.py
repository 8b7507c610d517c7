"""bench/yarn/skein_job.py: skein's side of bench/yarn, one application.

Starts skein's Java driver (as `skein application submit` does when no
global driver runs; with --global-driver it uses the one `skein driver
start` left running), submits one application: skein's Java application
master and one service of N instances, each running SCRIPT; then waits,
through skein's client API (the application report), until YARN says the
application finished. Exits 0 only when it SUCCEEDED. Prints, on stdout,
one line `app_id=... state=... final_status=... t_driver=... t_submitted=...
t_finished=...` (seconds since the epoch) for run.sh; everything else goes
to stderr. The environment that makes skein find Hadoop and Java is set up
by run.sh (a `yarn` on PATH printing the classpath, JAVA_HOME,
SKEIN_CONFIG, SKEIN_DRIVER_JAVA_OPTIONS).

    skein_job.py --instances 8 --memory 128 --script 'date +%s.%N >> ts'
        [--am-memory 512] [--am-env K=V]... [--driver-log PATH]
        [--global-driver] [--timeout 300] [--poll 0.05]
"""

import argparse
import signal
import sys
import time

import skein


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="b8")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--memory", type=int, default=128, help="MiB per task container")
    ap.add_argument("--vcores", type=int, default=1)
    ap.add_argument("--script", required=True)
    ap.add_argument("--am-memory", type=int, default=512, help="MiB for the AM (skein's default)")
    ap.add_argument("--am-env", action="append", default=[], help="K=V for the AM's environment")
    ap.add_argument("--queue", default="default")
    ap.add_argument("--driver-log", default=None)
    ap.add_argument(
        "--global-driver",
        action="store_true",
        help="use the running global driver (`skein driver start`) instead of starting one",
    )
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--poll", type=float, default=0.05)
    a = ap.parse_args()

    # SIGTERM (run.sh's cleanup, timeout) unwinds like an exception: the
    # application is killed below, and the driver stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    am_env = dict(kv.split("=", 1) for kv in a.am_env)
    spec = skein.ApplicationSpec(
        name=a.name,
        queue=a.queue,
        master=skein.Master(
            resources=skein.Resources(memory=a.am_memory, vcores=1), env=am_env
        ),
        services={
            "worker": skein.Service(
                instances=a.instances,
                resources=skein.Resources(memory=a.memory, vcores=a.vcores),
                script=a.script,
            )
        },
    )
    app_id = None
    if a.global_driver:
        client = skein.Client.from_global_driver()
    else:
        client = skein.Client(log=a.driver_log if a.driver_log else None)
    with client:
        t_driver = time.time()
        try:
            app_id = client.submit(spec)
            t_submitted = time.time()
            deadline = time.monotonic() + a.timeout
            while True:
                rep = client.application_report(app_id)
                if str(rep.state) in ("FINISHED", "FAILED", "KILLED"):
                    break
                if time.monotonic() > deadline:
                    print(
                        f"skein_job: {app_id} still {rep.state} after {a.timeout:.0f} s: killing it",
                        file=sys.stderr,
                    )
                    client.kill_application(app_id)
                    return 1
                time.sleep(a.poll)
            t_finished = time.time()
        except BaseException:
            if app_id is not None:
                try:
                    client.kill_application(app_id)
                except Exception as e:  # the driver may be gone too
                    print(f"skein_job: could not kill {app_id}: {e}", file=sys.stderr)
            raise
    print(
        f"app_id={app_id} state={rep.state} final_status={rep.final_status} "
        f"t_driver={t_driver:.6f} t_submitted={t_submitted:.6f} t_finished={t_finished:.6f}"
    )
    if str(rep.final_status) != "SUCCEEDED":
        print(f"skein_job: {app_id} ended {rep.state}/{rep.final_status}: {rep.diagnostics}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
