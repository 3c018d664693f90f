"""python3 bench/run-pids.py DIR: the PIDs of the processes whose command line
names DIR/ (what a bench run started under its work folder), one a line."""
import os
import sys

w, me = sys.argv[1].rstrip("/") + "/", os.getpid()
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if int(p) != me and w in cmdline:
        print(p)
