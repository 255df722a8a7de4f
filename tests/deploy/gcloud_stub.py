"""The `gcloud` a sandbox puts first on PATH (deploy_sandbox.py): hands the call (argv, folder,
environment) to the fake gcloud served in the test's process (fake_gcloud.py, at
FAKE_GCLOUD_SERVER) and plays its answer back: output, exit status, and on a rejected call
SIGTERM to its process group, which ends the deploy.

Only built-in modules (run with -S): deploy.sh starts it ~80 times per deploy.
"""

import _socket
import marshal
import os
import sys

try:
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    connection.connect(os.environ["FAKE_GCLOUD_SERVER"])
    connection.sendall(marshal.dumps((sys.argv[1:], os.getcwd(), dict(os.environ))))
    connection.shutdown(_socket.SHUT_WR)
    chunks = []
    while chunk := connection.recv(1 << 16):
        chunks.append(chunk)
    code, out, err, end_group = marshal.loads(b"".join(chunks))
except Exception as exc:  # no server, or no answer: the deploy must not read it as "absent"
    code, out, err, end_group = 2, "", f"gcloud stub: {type(exc).__name__}: {exc}\n", True
sys.stdout.write(out)
sys.stdout.flush()
sys.stderr.write(err)
sys.stderr.flush()
if end_group:
    os.killpg(os.getpgrp(), 15)  # SIGTERM (the signal module is not a built-in one)
sys.exit(code)
