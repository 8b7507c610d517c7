"""A TensorFlow task that starts tf.distribute.Server on the address loom put
in TF_CONFIG for it, checks that it serves there, and exits."""
import json
import os
import socket

import tensorflow as tf

cfg = json.loads(os.environ["TF_CONFIG"])
kind, index = cfg["task"]["type"], cfg["task"]["index"]
addr = cfg["cluster"][kind][index]
port = int(os.environ["LOOM_PORT"])
assert addr.endswith(f":{port}"), (addr, port)
server = tf.distribute.Server(tf.train.ClusterSpec(cfg["cluster"]), job_name=kind,
                              task_index=index, protocol="grpc", start=True)
host = addr.rsplit(":", 1)[0]
socket.create_connection((host, port), timeout=5).close()
print(f"serving {kind}:{index} at {addr} ({server.target})", flush=True)
