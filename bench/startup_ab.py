#!/usr/bin/env python3
"""Start-up time to the first served DirectProxy request, two busbar binaries in turn.

Each run starts `BIN run CONFIG` (1 worker, ports 8281/9001/9902) and polls the listener every
0.5 ms with a raw socket until a 1 KB POST to /service/DirectProxy answers 200, then stops it
with SIGTERM. A and B alternate run by run; the medians and the median of the pairwise ratios
are printed (a ratio is robust to the machine's speed drifting during the run).

Usage: bench/startup_ab.py BIN_A BIN_B CONFIG RUNS   (needs /tmp/buy1k.xml:
       busbar bench payload --size 1024 > /tmp/buy1k.xml; BUSBAR_KEYS for the secure proxies)
"""
import os, socket, subprocess, sys, time, statistics
a, b, cfg, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
body = open('/tmp/buy1k.xml','rb').read()
req = b"POST /service/DirectProxy HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: %d\r\n\r\n" % len(body) + body
env = dict(os.environ, BUSBAR_WORKERS="1", BUSBAR_LISTEN="127.0.0.1:8281", BUSBAR_ECHO="127.0.0.1:9001", BUSBAR_ADMIN="127.0.0.1:9902", BUSBAR_LOG="warn")
def once(bin_):
    t0 = time.perf_counter()
    p = subprocess.Popen([bin_, "run", cfg], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", 8281), timeout=1)
            s.sendall(req)
            data = b""
            while b"\r\n\r\n" not in data:
                d = s.recv(65536)
                if not d: break
                data += d
            s.close()
            if data.startswith(b"HTTP/1.1 200"):
                break
        except OSError:
            time.sleep(0.0005)
    t = (time.perf_counter() - t0) * 1000
    p.terminate(); p.wait()
    return t
ra, rb, ratio = [], [], []
for i in range(n):
    x = once(a); y = once(b)
    ra.append(x); rb.append(y); ratio.append(x / y)
print("A median %.1f ms, B median %.1f ms, A/B median %.2f (n=%d)" % (statistics.median(ra), statistics.median(rb), statistics.median(ratio), n))
