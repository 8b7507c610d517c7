"""bench/yarn/hosts.py: the multi-host cluster of the system tests
(tests/system/clusters.py's HadoopHosts: the ResourceManager and the
NameNode on one network namespace, a NodeManager and a DataNode on each of
two more, in mount namespaces that hide what a stock node lacks; the
client, this machine's own namespace, with an address on their bridge)
for run.sh's BENCH_HOSTS=1.

    python3 hosts.py start DIR TAG   # prints the head's and the client's addresses
    python3 hosts.py stop DIR TAG

TAG is loomh<pid> of a process that outlives the cluster (run.sh's own
shell): HadoopHosts.clean_stale() deletes the namespaces of a tag whose
process is gone. start records the subnet in DIR/bench-hosts.json for
stop."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "system"))
from clusters import HadoopHosts  # noqa: E402


def main(argv):
    if len(argv) != 4 or argv[1] not in ("start", "stop"):
        sys.stderr.write("usage: hosts.py start|stop DIR TAG\n")
        return 2
    verb, d, tag = argv[1], Path(argv[2]), argv[3]
    rec = d / "bench-hosts.json"
    if verb == "start":
        h = HadoopHosts(d, tag=tag)
        h.start()
        rec.write_text(json.dumps({"k": h.k, "made": h.made}))
        print(h.addrs["head"], h.addrs["client"])
        return 0
    if not rec.exists():
        return 0  # never started (start cleans up after itself when it fails)
    r = json.loads(rec.read_text())
    h = HadoopHosts(d, tag=tag, k=r["k"])
    h.made = r["made"]
    h.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
