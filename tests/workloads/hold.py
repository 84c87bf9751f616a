"""Runs a workload, then keeps the process (and its /metrics endpoint) alive until released.

``python hold.py WORKLOAD.py``: prints ``HOLDING`` after the workload, then
waits until the file ``$RELEASE_FILE`` exists (at most ``$HOLD_SECONDS``,
default 120) so that a real Prometheus can scrape the finished compiles.
"""

import os
import runpy
import sys
import time

runpy.run_path(sys.argv[1], run_name="__main__")
print("HOLDING", flush=True)
deadline = time.monotonic() + float(os.environ.get("HOLD_SECONDS", "120"))
release = os.environ.get("RELEASE_FILE", "")
while time.monotonic() < deadline and not (release and os.path.exists(release)):
    time.sleep(0.1)
