"""A neighbour that keeps taking free ports: K sockets at a time, each bound
to a port the kernel picks (bind to port 0, as programs that want "a free
port" do) and listening for a random 0.1-0.5 s, then closed and replaced.
Prints how many ports it took when it gets SIGTERM."""
import random
import signal
import socket
import sys
import time

K = int(sys.argv[1]) if len(sys.argv) > 1 else 16
taken = 0
held = []  # (deadline, socket)


def stop(*_):
    print(f"took {taken} ports", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
print("grabbing", flush=True)
while True:
    now = time.monotonic()
    for d, s in [h for h in held if h[0] <= now]:
        s.close()
    held = [h for h in held if h[0] > now]
    while len(held) < K:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", 0))
            s.listen()
        except OSError:
            s.close()
            break
        taken += 1
        held.append((now + random.uniform(0.1, 0.5), s))
    time.sleep(0.005)
