#!/usr/bin/env python3
"""Soak test of volt's fault handling: kill a random rank at a random moment, resume, compare.

usage: scripts/soak.py --trials N [--strategy fsdp|ddp] [--state_dict_type full|sharded|both]
                       [--volt build/volt] [--seed S] [--keep] [--json FILE] [--no-copy]
                       [--signals KILL,TERM,INT[,STOP]] [--ranks 0,1] [--moments startup,training,save,end]
                       [--max_steps 30] [--save_every 5] [--workdir DIR] [--data_dir DIR]
                       [--hosts H [--ranks_per_host R]] [--max_restarts N] [--faults rank,host,agent,cut]

The binary and its libvolt are copied to the work folder first (unless --no-copy), so that a
rebuild during the soak cannot mix versions. Failed trials' folders are kept (run logs, checkpoints,
gdb backtraces of hung processes); everything else is removed unless --keep.

One reference run first: an uninterrupted 2-rank fit of configs/tiny.yaml with short epochs, so
that the default ModelCheckpoint saves `epoch=E-step=S.ckpt` and `last.ckpt` every few steps. Then
each trial starts the same fit in a fresh folder and, after a random delay (before the rendezvous,
mid-training, during a checkpoint save, or around the end), sends one rank (rank 0 is the launcher
process, the others its children) SIGKILL, SIGTERM or SIGINT. It then checks that:
  - every process of the run exits within 30 s (60 s for SIGTERM/SIGINT, which stop at a step
    boundary); a run still alive after that is a hang: its processes' last output lines and gdb
    backtraces are recorded, then the whole run is killed;
  - every process exits non-zero (unless the run had already finished when the signal came);
  - the output names the dead rank or the signal;
  - no process of the run is left (its process group, its command line);
  - every checkpoint on disk loads (`volt consolidate` reads and verifies every byte), none that
    existed at the kill is lost, and leftovers of an interrupted save (`*.tmp.*`, `*.partial`)
    are removed by the next run;
  - resuming with `--ckpt_path=last` (from scratch when nothing was saved yet), as often as needed,
    ends with final weights and optimizer state bitwise equal to the reference run's.
Prints a table by signal and by moment and exits 1 if any trial failed (77: nothing to run on).

Across hosts (--hosts H > 1, root): H network namespaces vs<pid>-<i> (10.231.(200 + pid % 50).(i+1))
joined by a bridge in vs<pid>-sw, as tests/distributed/host_net.h makes them, one `volt fit` per host
in its namespace (--trainer.devices=R --trainer.num_nodes=H --node_rank=i --master_addr=<host 0>
--master_port=P); the namespaces are removed however the soak ends (and a soak killed outright has
its namespaces removed by the next). The reference is the same layout, uninterrupted. Each trial
strikes once, at a moment aimed as above: a rank killed (SIGKILL by default, --signals), a host lost
(every process in its namespace SIGKILLed), a host cut off (its eth0 set down; up again once the
job has ended), or, with --max_restarts N (trainer.max_restarts, also on one host), a host's
restart agent killed. Expected: with max_restarts, a killed rank is mended by the job itself (every
agent exits 0, one restart logged naming the rank, the final weights equal the reference's, every
process gone within 30 s of the job's end); any other fault, and every fault without
max_restarts, ends every process of the job within 30 s, non-zero (the agents', under
max_restarts), the output naming the dead rank or the host (its node, address or ranks); no
process is left in any namespace; then the checkpoints and the resume as above.

Needs Linux and Python 3 (standard library only). As root, exit codes of every rank are read from
the kernel's process-event connector; otherwise the children's codes come from the launcher's log.
"""
import argparse
import atexit
import collections
import ctypes
import errno
import hashlib
import io
import json
import os
import pickle
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORLD = 2
HANG_S = {signal.SIGKILL: 30.0, signal.SIGTERM: 60.0, signal.SIGINT: 60.0, signal.SIGSTOP: 30.0}
# SIGSTOP (only when asked for: --signals STOP) freezes a rank: a stalled peer, which only a
# liveness check can tell from a slow one; it also exercises this script's hang handling.
SIGNALS = [(signal.SIGKILL, 0.6), (signal.SIGTERM, 0.25), (signal.SIGINT, 0.15), (signal.SIGSTOP, 0.1)]
PLANS = [("startup", 0.2), ("training", 0.35), ("save", 0.35), ("end", 0.1)]
MOMENTS = ["before_rendezvous", "training", "during_save", "after_end"]
RESUME_TIMEOUT_S = 240.0
# Faults across hosts (--hosts H > 1, or --max_restarts): a rank killed, every process of a host
# killed, a host's restart agent killed (only with --max_restarts), a host's link set down.
FAULTS = [("rank", 0.4), ("host", 0.25), ("agent", 0.15), ("cut", 0.25)]
HOSTNET = []  # the HostNet of this soak, if any: removed however the soak ends
JOIN_MARGIN_S = 2.0  # a host struck no sooner than this after every host joined (4 heartbeats)


def log(*a):
    print("[soak]", *a, flush=True)


def pick(rng, weighted):
    x = rng.random() * sum(w for _, w in weighted)
    for v, w in weighted:
        x -= w
        if x < 0:
            return v
    return weighted[-1][0]


# ---------------------------------------------------------------------------------------------
# Processes: /proc, the kernel's process events, reaping as a subreaper.


def proc_stat(pid):
    """(state, ppid, pgrp) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2])


def proc_text(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def proc_rank(pid):
    for kv in proc_text(pid, "environ").split("\0"):
        if kv.startswith("RANK="):
            try:
                return int(kv[5:])
            except ValueError:
                return None
    return None


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def alive(pid):
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


class ProcEvents:
    """Exit statuses and forks of every process, from the kernel's process-event connector (root).

    Thread-safe: a reader thread fills the maps; callers read them under the lock."""

    def __init__(self):
        self.ok = False
        self.lost_events = False
        self.lock = threading.Lock()
        self.exits = {}  # tgid -> wait status
        self.children = collections.defaultdict(set)  # parent tgid -> child tgids
        try:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)  # NETLINK_CONNECTOR
            try:
                s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
            s.bind((os.getpid(), 1))  # CN_IDX_PROC
            op = struct.pack("I", 1)  # PROC_CN_MCAST_LISTEN
            cn = struct.pack("IIIIHH", 1, 1, 0, 0, len(op), 0) + op
            s.send(struct.pack("IHHII", 16 + len(cn), 3, 0, 0, os.getpid()) + cn)  # NLMSG_DONE
            self.sock = s
            threading.Thread(target=self._read, daemon=True).start()
            # Only trust it once an event of our own shows up.
            subprocess.run(["true"])
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not self.ok:
                time.sleep(0.01)
        except OSError:
            self.ok = False

    def _read(self):
        while True:
            try:
                d = self.sock.recv(65536)
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.lost_events = True
                    continue
                return
            off = 0
            while off + 16 <= len(d):
                n = struct.unpack_from("I", d, off)[0]
                if n < 16:
                    break
                if n >= 68:
                    what = struct.unpack_from("I", d, off + 36)[0]
                    a, b, c, e = struct.unpack_from("iiIi", d, off + 52)
                    with self.lock:
                        if what == 0x1 and c == e:  # PROC_EVENT_FORK of a process (not a thread)
                            self.children[b].add(e)
                            if b == os.getpid():
                                self.ok = True
                        elif what == 0x80000000 and a == b:  # PROC_EVENT_EXIT of a thread-group leader
                            self.exits[b] = c
                off += (n + 3) & ~3

    def descendants(self, root):
        with self.lock:
            out, todo = set(), [root]
            while todo:
                p = todo.pop()
                for c in self.children.get(p, ()):
                    if c not in out:
                        out.add(c)
                        todo.append(c)
            return out

    def status(self, pid):
        with self.lock:
            return self.exits.get(pid)

    def forget(self, pids):
        with self.lock:
            for p in pids:
                self.exits.pop(p, None)
                self.children.pop(p, None)


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_us():
    """In a run's rank 0 before exec: SIGKILL when this script dies (killed by a test timeout, say);
    its launched ranks follow it (the launcher's own parent-death signal)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def become_subreaper():
    """Orphans of a run (rank 1 after rank 0 died) become our children: we see their exit codes."""
    return _PRCTL is not None and _PRCTL(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER


REAPED = {}  # pid -> wait status, of every child we reaped
RUNS = []  # every Run started, killed on the way out if still alive


def reap():
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = st


def describe_status(st):
    if st is None:
        return "unknown"
    if os.WIFSIGNALED(st):
        return f"killed by {signal.Signals(os.WTERMSIG(st)).name}"
    return f"exit {os.WEXITSTATUS(st)}"


def status_ok_nonzero(st):
    return st is not None and not (os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0)


# ---------------------------------------------------------------------------------------------
# One volt run: its processes, its output, its checkpoint folder.


class _Waitable:
    """wait() over now() and all_exited(), shared by one command's processes (Run) and a job's (Job)."""

    def wait(self, deadline_s, exclude=()):
        """Polls until every process (but `exclude`) has exited or `deadline_s` (since start) passes."""
        while self.now() < deadline_s:
            if self.all_exited(exclude):
                return True
            time.sleep(0.02)
        return self.all_exited(exclude)


class Run(_Waitable):
    """A `volt fit` in its own session (process group); output of every rank read line by line."""

    def __init__(self, cmd, cwd, env, log_path, events, ckpt_dir, tag, first_rank=0, local=None, agent=False, node=0,
                 markers=None):
        """One command's processes. On several hosts (a Job), one Run per host: its ranks are
        `first_rank`.. `first_rank + local - 1`; its root is local rank 0 (the launcher), or the node's
        restart agent (`agent`: every rank its child); `markers` (all in a command line) tell its
        processes from other hosts' (default: the folder)."""
        self.tag = tag
        self.first_rank = first_rank
        self.local = WORLD if local is None else local
        self.agent = agent
        self.node = node
        self.markers = [cwd] if markers is None else list(markers)
        self.cwd = cwd
        self.events = events
        self.ckpt_dir = ckpt_dir
        self.lines = []  # (seconds since start, text)
        self.lock = threading.Lock()
        self.logf = open(log_path, "w")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_us)
        self.root = self.p.pid
        events.forget([self.root])  # an earlier process's exit under this pid is not ours
        # pid -> rank (None: unknown; "agentN": node N's restart agent)
        self.known = {self.root: f"agent{node}" if agent else first_rank}
        self.exit_time = {}
        self.last_full_scan = 0.0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        RUNS.append(self)

    def _read(self):
        for raw in iter(self.p.stdout.readline, b""):
            t = time.monotonic() - self.t0
            text = raw.decode(errors="replace").rstrip("\n")
            with self.lock:
                self.lines.append((t, text))
            self.logf.write(f"{t:8.3f} {text}\n")
            self.logf.flush()

    def now(self):
        return time.monotonic() - self.t0

    def output(self, since=0.0):
        with self.lock:
            return [l for t, l in self.lines if t >= since]

    def seen(self, pattern):
        with self.lock:
            return sum(1 for _, l in self.lines if pattern in l)

    def rendezvous_done(self):
        return self.seen("Initialized process group") >= WORLD

    def fit_done(self):
        return self.seen("fit done") > 0

    def scan(self, full=False):
        """Adds every process of the run: descendants (process events), and every 100 ms (or when
        `full`) what /proc shows in its process group, below its processes or with its folder in the
        command line."""
        desc = self.events.descendants(self.root) if self.events.ok else set()
        for pid in desc:
            self.known.setdefault(pid, None)
        now = time.monotonic()
        if full or now - self.last_full_scan >= 0.1:
            self.last_full_scan = now
            self._scan_proc()
        for pid, r in list(self.known.items()):
            if r is None and alive(pid):
                self.known[pid] = proc_rank(pid)
        # The only child is rank 1 (on several hosts: the host's one rank the root launches), even if it
        # died before we read its environment.
        expected = range(self.first_rank + (0 if self.agent else 1), self.first_rank + self.local)
        if len(expected) == 1:
            for pid, r in list(self.known.items()):
                if r is None and pid != self.root:
                    self.known[pid] = expected[0]

    def _scan_proc(self):
        markers = [m for m in self.markers if m]
        for pid in all_pids():
            if pid in self.known:
                continue
            st = proc_stat(pid)
            if st is None:
                continue
            if st[2] == self.root or st[1] in self.known or (markers and all(self._marked(pid, m) for m in markers)):
                self.known[pid] = None

    @staticmethod
    def _marked(pid, marker):
        """`marker` in the process's command line, or for "environ:K=V", K=V in its environment."""
        if marker.startswith("environ:"):
            return f"\0{marker[8:]}\0" in "\0" + proc_text(pid, "environ")
        return marker in proc_text(pid, "cmdline")

    def pid_of_rank(self, rank):
        self.scan()
        for pid, r in self.known.items():
            if r == rank and alive(pid):
                return pid
        return None

    def update(self):
        reap()
        if self.root in REAPED and self.p.returncode is None:
            self.p.returncode = os.waitstatus_to_exitcode(REAPED[self.root])
        elif self.p.returncode is None and self.events.ok and not alive(self.root) and proc_stat(self.root) is None:
            st = self.events.status(self.root)  # reaped by someone else: the kernel still told us
            if st is not None:
                self.p.returncode = os.waitstatus_to_exitcode(st)
                self.status_from_events = True
        self.scan()
        now = self.now()
        for pid in self.known:
            if pid not in self.exit_time and not alive(pid):
                self.exit_time[pid] = now

    def alive_pids(self, exclude=()):
        return [p for p in self.known if p not in exclude and alive(p)]

    def all_exited(self, exclude=()):
        self.update()
        if self.alive_pids(exclude):
            return False
        self.scan(full=True)  # none missed: a child seen only in /proc
        self.update()
        return not self.alive_pids(exclude)

    def statuses(self):
        """rank -> (pid, wait status or None)."""
        out = {}
        for pid, r in self.known.items():
            st = REAPED.get(pid)
            if st is None and self.events.ok:
                st = self.events.status(pid)
            if st is None:
                st = self._status_from_log(pid)
            out.setdefault(r if r is not None else f"pid{pid}", (pid, st))
        return out

    def _status_from_log(self, pid):
        # The launcher logs a child that failed: "rank 1 (pid 123) was killed by signal 9 (...)".
        for l in self.output():
            m = re.search(rf"\(pid {pid}\) (was killed by signal (\d+)|exited with code (\d+))", l)
            if m:
                return int(m.group(2)) if m.group(2) else int(m.group(3)) << 8
        return None

    def kill_all(self):
        self.scan(full=True)
        try:
            os.killpg(self.root, signal.SIGKILL)
        except OSError:
            pass
        for pid in self.alive_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        end = time.monotonic() + 10
        while time.monotonic() < end and not self.all_exited():
            time.sleep(0.05)

    def leftovers(self):
        """Processes of this run still alive (killed once listed)."""
        self.scan(full=True)
        self.update()
        left = []
        for pid in self.alive_pids():
            cmd = proc_text(pid, "cmdline").replace("\0", " ")[:200]
            left.append({"pid": pid, "rank": self.known.get(pid), "cmd": cmd})
        if left:
            self.kill_all()
        return left

    def close(self):
        self.reader.join(timeout=5)
        self.logf.close()
        self.events.forget(list(self.known))


# ---------------------------------------------------------------------------------------------
# Several hosts: network namespaces joined by a bridge, and a job made of one Run per host.

NS_PREFIX = "vs"  # the C++ tests' HostNet uses "vh"


def ip_command():
    for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"):
        if os.path.exists(p):
            return p
    return shutil.which("ip")


def _ip(*args, check=True):
    r = subprocess.run([ip_command(), *args], capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"'ip {' '.join(args)}' failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r.stdout


def netns_pids(ns):
    try:
        return [int(x) for x in _ip("netns", "pids", ns, check=False).split() if x.isdigit()]
    except (OSError, subprocess.TimeoutExpired):
        return []


def netns_kill_all(ns):
    """SIGKILL to every process in namespace `ns`, again until none is left (a fork may race the
    first pass); the pids of the first pass."""
    first = None
    for _ in range(20):
        pids = [p for p in netns_pids(ns) if p != os.getpid()]
        if first is None:
            first = pids
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    return first or []


def hosts_unavailable():
    """None when namespaces can be made here; else why not."""
    if os.geteuid() != 0:
        return "several hosts need root (network namespaces)"
    if not ip_command():
        return "several hosts need the ip command (iproute2)"
    probe = f"{NS_PREFIX}{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe, check=False)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        return f"network namespaces are refused here: {e}"
    return None


def sweep_stale_namespaces():
    """Removes the namespaces of soaks that are gone (one killed with SIGKILL cannot clean up)."""
    try:
        listing = _ip("netns", "list", check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    removed = []
    for line in listing.splitlines():
        m = re.match(rf"^({NS_PREFIX}(\d+)-\S+)", line)
        if not m:
            continue
        owner = int(m.group(2))
        if owner != os.getpid() and alive(owner) and "soak" in proc_text(owner, "cmdline"):
            continue  # another soak's, still running
        netns_kill_all(m.group(1))
        _ip("netns", "del", m.group(1), check=False)
        removed.append(m.group(1))
    return removed


class HostNet:
    """`hosts` hosts on this machine, as tests/distributed/host_net.h makes them: network namespaces
    vs<pid>-<i>, each with eth0 at 10.231.(200 + pid % 50).(i+1)/24, joined by a bridge in namespace
    vs<pid>-sw (a subnet apart from the C++ tests' 10.231.(pid % 250).x; traffic stays inside these
    namespaces). remove() (idempotent) kills every process in them and deletes them; main() calls it
    however the soak ends (finally, atexit, SIGTERM/SIGINT/SIGHUP), and the next soak removes those
    of a soak that was killed outright."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.prefix = f"{NS_PREFIX}{os.getpid()}"
        self.subnet = 200 + os.getpid() % 50
        self.removed = False
        stale = sweep_stale_namespaces()
        if stale:
            log(f"removed stale namespaces of soaks that are gone: {' '.join(stale)}")
        sw = self.prefix + "-sw"
        try:
            _ip("netns", "add", sw)
            _ip("-n", sw, "link", "add", "br0", "type", "bridge")
            _ip("-n", sw, "link", "set", "br0", "up")
            for i in range(hosts):
                ns, a, b = self.name(i), f"{self.prefix}a{i}", f"{self.prefix}b{i}"
                _ip("netns", "add", ns)
                _ip("link", "add", a, "type", "veth", "peer", "name", b)
                _ip("link", "set", a, "netns", ns)
                _ip("link", "set", b, "netns", sw)
                _ip("-n", ns, "link", "set", a, "name", "eth0")
                _ip("-n", ns, "addr", "add", self.address(i) + "/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", sw, "link", "set", b, "master", "br0")
                _ip("-n", sw, "link", "set", b, "up")
        except BaseException:
            self.remove()
            raise

    def name(self, i):
        return f"{self.prefix}-{i}"

    def address(self, i):
        return f"10.231.{self.subnet}.{i + 1}"

    def wrap(self, i, argv):
        return [ip_command(), "netns", "exec", self.name(i), *argv]

    def pids(self, i):
        return netns_pids(self.name(i))

    def kill_host(self, i):
        """A host lost: SIGKILL to every process in it; the pids killed."""
        return netns_kill_all(self.name(i))

    def set_link(self, i, up):
        """Host i's link down (cut off: a network partition) or up again."""
        _ip("-n", self.name(i), "link", "set", "eth0", "up" if up else "down")

    def remove(self):
        if self.removed:
            return
        self.removed = True
        for i in range(self.hosts):
            netns_kill_all(self.name(i))
            _ip("netns", "del", self.name(i), check=False)
        _ip("netns", "del", self.prefix + "-sw", check=False)


def connections_to(pid, addr, port):
    """Established TCP connections to addr:port in the network namespace of process `pid`."""
    a = [int(x) for x in addr.split(".")]
    want = "%02X%02X%02X%02X:%04X" % (a[3], a[2], a[1], a[0], port)  # as /proc/net/tcp{,6} print it
    n = 0
    for table in ("tcp", "tcp6"):
        for line in proc_text(pid, f"net/{table}").splitlines()[1:]:
            f = line.split()
            if len(f) > 3 and f[3] == "01" and f[2].endswith(want):
                n += 1
    return n


class _JobCode:
    """A job's returncode: None while a host's command runs, else the first non-zero one, else 0."""

    def __init__(self, job):
        self.job = job

    @property
    def returncode(self):
        codes = [r.p.returncode for r in self.job.runs]
        if any(c is None for c in codes):
            return None
        return next((c for c in codes if c != 0), 0)


class Job(_Waitable):
    """One job as several commands, one per host (each in its namespace), or one under a restart agent:
    a Run per command, seen as one Run (the same methods; times since the first command's start)."""

    def __init__(self, runs, ckpt_dir, hostnet, master=None):
        self.runs = runs
        self.ckpt_dir = ckpt_dir
        self.hostnet = hostnet
        self.master = master  # (address, port) across hosts
        self.join_time = None if master else 0.0  # when every host had reached node 0's store
        self._join_checked = 0.0
        self.t0 = runs[0].t0
        self.p = _JobCode(self)
        self.events = runs[0].events
        RUNS.append(self)

    def now(self):
        return time.monotonic() - self.t0

    @property
    def known(self):
        out = {}
        for r in self.runs:
            out.update(r.known)
        return out

    @property
    def exit_time(self):
        out = {}
        for r in self.runs:
            for pid, t in r.exit_time.items():
                out[pid] = t + (r.t0 - self.t0)
        return out

    def roots(self):
        """{label: pid} of the commands the soak started: node N's agent, or local rank 0 of each host."""
        return {r.known.get(r.root, r.root): r.root for r in self.runs}

    def output(self, since=0.0):
        lines = []
        for h, r in enumerate(self.runs):
            off = r.t0 - self.t0
            with r.lock:
                lines += [(t + off, f"h{h}| {l}" if len(self.runs) > 1 else l) for t, l in r.lines if t + off >= since]
        return [l for _, l in sorted(lines, key=lambda x: x[0])]

    def seen(self, pattern):
        return sum(r.seen(pattern) for r in self.runs)

    def rendezvous_done(self):
        return self.seen("Initialized process group") >= WORLD

    def fit_done(self):
        return self.seen("fit done") > 0

    def scan(self, full=False):
        for r in self.runs:
            r.scan(full)

    def pid_of_rank(self, rank):
        for r in self.runs:
            pid = r.pid_of_rank(rank)
            if pid is not None:
                return pid
        return None

    def update(self):
        for r in self.runs:
            r.update()
        if self.join_time is None and time.monotonic() - self._join_checked >= 0.05:
            self._join_checked = time.monotonic()
            if self.joined():
                self.join_time = self.now()

    def joined(self):
        """Every host has reached the store node 0 serves at master: each host's agent, or each of its
        ranks (rank 0 serves it), holds a connection to it. A host that has not joined cannot be told
        from a late one: the others wait for it up to the rendezvous timeout."""
        addr, port = self.master
        for h, r in enumerate(self.runs):
            need = (0 if h == 0 else 1) if r.agent else (r.local - 1 if h == 0 else r.local)
            if need and (not alive(r.root) or connections_to(r.root, addr, port) < need):
                return False
        return True

    def alive_pids(self, exclude=()):
        return [p for r in self.runs for p in r.alive_pids(exclude)]

    def all_exited(self, exclude=()):
        self.update()
        if self.alive_pids(exclude):
            return False
        self.scan(full=True)
        self.update()
        return not self.alive_pids(exclude)

    def statuses(self):
        out = {}
        for r in self.runs:
            for k, v in r.statuses().items():
                out.setdefault(k, v)
        return out

    def ns_pids(self):
        """(host, pid) of every process still in the job's namespaces."""
        if not self.hostnet:
            return []
        return [(h, p) for h in range(len(self.runs)) for p in self.hostnet.pids(h) if p != os.getpid()]

    def kill_all(self):
        for r in self.runs:
            r.kill_all()
        for h, _ in self.ns_pids():
            self.hostnet.kill_host(h)

    def leftovers(self):
        """Processes of the job still alive, and any process left in its hosts' namespaces (killed once
        listed)."""
        left = []
        for r in self.runs:
            left += r.leftovers()
        seen = {x["pid"] for x in left}
        known = self.known
        for h, pid in self.ns_pids():
            if pid not in seen and alive(pid):
                left.append({"pid": pid, "rank": known.get(pid), "host": h,
                             "cmd": proc_text(pid, "cmdline").replace("\0", " ")[:200]})
        if left and self.hostnet:
            for h in range(len(self.runs)):
                self.hostnet.kill_host(h)
        return left

    def close(self):
        for r in self.runs:
            r.close()


def ckpt_listing(d):
    try:
        return sorted(os.listdir(d))
    except OSError:
        return []


def is_temp(name):
    return ".tmp." in name or name.endswith(".partial")


# ---------------------------------------------------------------------------------------------
# Checkpoint files: the torch.save zip, read without torch.

ELEM = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1,
        "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16}


class TensorRef:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


class _Opaque:
    def __init__(self, *a, **k):
        self.args = a

    def __setstate__(self, state):
        self.state = state


class _Unpickler(pickle.Unpickler):
    """Unpickles a torch checkpoint's data.pkl into plain containers and TensorRefs; runs no code."""

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return lambda storage, offset, size, stride, *rest: TensorRef(storage, offset, size, stride)
        if module == "torch._utils" and name == "_rebuild_parameter":
            return lambda data, *rest: data
        if module == "torch" and name.endswith("Storage"):
            return name[: -len("Storage")]
        return type(f"{module}.{name}", (_Opaque,), {})

    def persistent_load(self, pid):
        # ('storage', storage type, key, location, numel)
        return (pid[1], str(pid[2]))


def read_stored_entries(path):
    """name -> raw bytes of every zip entry, read straight from the file (no CRC check)."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise ValueError(f"{path}: entry {info.filename} is compressed")
            f.seek(info.header_offset)
            h = f.read(30)
            n, e = struct.unpack("<HH", h[26:30])
            f.seek(info.header_offset + 30 + n + e)
            out[info.filename] = f.read(info.file_size)
    return out


def tensor_bytes(entries, prefix, t):
    kind, key = t.storage
    es = ELEM.get(kind)
    if es is None:
        raise ValueError(f"unknown storage type {kind}")
    data = entries[f"{prefix}data/{key}"]
    numel = 1
    for s in t.size:
        numel *= s
    contiguous, acc = [], 1
    for s in reversed(t.size):
        contiguous.insert(0, acc)
        acc *= s
    if numel == 0:
        return kind, t.size, b""
    if list(t.stride) == contiguous or numel == 1:
        return kind, t.size, data[t.offset * es:(t.offset + numel) * es]
    chunks, idx = [], [0] * len(t.size)
    for _ in range(numel):  # non-contiguous: element by element
        o = t.offset + sum(i * s for i, s in zip(idx, t.stride))
        chunks.append(data[o * es:(o + 1) * es])
        for d in reversed(range(len(idx))):
            idx[d] += 1
            if idx[d] < t.size[d]:
                break
            idx[d] = 0
    return kind, t.size, b"".join(chunks)


def checkpoint_digest(path):
    """{'global_step', 'state_dict': name -> (dtype, shape, sha256), 'optimizer_states': ...} of a full file."""
    entries = read_stored_entries(path)
    pkl = [n for n in entries if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(pkl) != 1:
        raise ValueError(f"{path}: no data.pkl")
    prefix = pkl[0][: -len("data.pkl")]
    obj = _Unpickler(io.BytesIO(entries[pkl[0]])).load()
    out = {"global_step": obj.get("global_step"), "epoch": obj.get("epoch")}
    for section in ("state_dict", "optimizer_states"):
        d = {}
        for name, t in (obj.get(section) or {}).items():
            if isinstance(t, TensorRef):
                kind, size, b = tensor_bytes(entries, prefix, t)
                d[name] = (kind, list(size), hashlib.sha256(b).hexdigest(), len(b))
        out[section] = d
    return out


def compare_digests(a, b):
    """None if the weights (and optimizer state) are bitwise equal, else the first difference."""
    for section in ("state_dict", "optimizer_states"):
        da, db = a[section], b[section]
        if section == "state_dict" and (not da or sum(v[3] for v in da.values()) == 0):
            return "reference has no weights (comparison would be vacuous)"
        if set(da) != set(db):
            return f"{section}: different tensors: {sorted(set(da) ^ set(db))[:5]}"
        for k in sorted(da):
            if da[k] != db[k]:
                return f"{section}/{k} differs"
    return None


def flip_one_byte(src, dst, digest):
    """Copies a full checkpoint and flips one bit in the middle of its largest weight."""
    shutil.copyfile(src, dst)
    with zipfile.ZipFile(dst) as z:
        infos = {i.filename: i for i in z.infolist()}
    entries = read_stored_entries(dst)
    prefix = [n for n in entries if n.endswith("data.pkl")][0][: -len("data.pkl")]
    obj = _Unpickler(io.BytesIO(entries[prefix + "data.pkl"])).load()
    name, t = max(((n, t) for n, t in obj["state_dict"].items() if isinstance(t, TensorRef)),
                  key=lambda nt: digest["state_dict"][nt[0]][3])
    info = infos[f"{prefix}data/{t.storage[1]}"]
    with open(dst, "r+b") as f:
        f.seek(info.header_offset)
        n, e = struct.unpack("<HH", f.read(30)[26:30])
        es = ELEM[t.storage[0]]
        numel = 1
        for s in t.size:
            numel *= s
        pos = info.header_offset + 30 + n + e + (t.offset + numel // 2) * es
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x01]))
    return name


# ---------------------------------------------------------------------------------------------
# The soak itself.


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = args.workdir or tempfile.mkdtemp(prefix="volt-soak-")
        os.makedirs(self.work, exist_ok=True)
        self.events = ProcEvents()
        self.subreaper = become_subreaper()
        self.env = dict(os.environ)
        self.volt = self.private_copy(args.volt) if not args.no_copy else os.path.abspath(args.volt)
        if any(n.startswith("libvolt.so") for n in os.listdir(os.path.dirname(self.volt))):
            self.env["LD_LIBRARY_PATH"] = os.path.dirname(self.volt) + (
                ":" + self.env["LD_LIBRARY_PATH"] if self.env.get("LD_LIBRARY_PATH") else "")
        self.refs = {}
        self.gdb = shutil.which("gdb")
        # Several hosts (--hosts), or one under a restart agent (--max_restarts): each run is a Job.
        self.multi = args.hosts > 1 or args.max_restarts > 0
        self.hostnet = HOSTNET[0] if HOSTNET else None
        self.port = 20000 + random.SystemRandom().randrange(20000)  # not from the seed: trials stay reproducible

    # -- binary -------------------------------------------------------------------------------
    def fingerprint(self):
        """md5 of the binary and its libvolt, to tell builds apart in reports."""
        h = hashlib.md5()
        d = os.path.dirname(self.volt)
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if (n == os.path.basename(self.volt) or n.startswith("libvolt.so")) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h.update(f.read())
        return h.hexdigest()[:12]

    def private_copy(self, volt):
        """Copies volt and its libvolt.so* so that a rebuild during the soak cannot mix versions."""
        volt = os.path.abspath(volt)
        dst = os.path.join(self.work, "bin")
        os.makedirs(dst, exist_ok=True)
        # The libvolt next to the binary (a copy made by hand), else the one it loads (its RUNPATH).
        libs = [os.path.join(os.path.dirname(volt), n) for n in os.listdir(os.path.dirname(volt))
                if n.startswith("libvolt.so") and not os.path.islink(os.path.join(os.path.dirname(volt), n))]
        try:
            if not libs:
                out = subprocess.run(["ldd", volt], capture_output=True, text=True, timeout=30).stdout
                libs = [m.group(1) for m in re.finditer(r"(/\S*libvolt[^/\s]*\.so[^\s]*)", out)]
        except (OSError, subprocess.TimeoutExpired):
            pass
        for _ in range(5):
            before = [(os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in [volt] + libs]
            shutil.copy2(volt, os.path.join(dst, "volt"))
            for lib in libs:
                d = os.path.dirname(lib)
                for n in os.listdir(d):
                    if n.startswith("libvolt.so"):
                        s = os.path.join(d, n)
                        t = os.path.join(dst, n)
                        if os.path.lexists(t):
                            os.remove(t)
                        if os.path.islink(s):
                            os.symlink(os.readlink(s), t)
                        else:
                            shutil.copy2(s, t)
            after = [(os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in [volt] + libs]
            if before == after:
                break
            time.sleep(5)  # being rebuilt: copy again
        log(f"binary: {volt} copied to {dst} (libraries: {', '.join(libs) or 'none'})")
        return os.path.join(dst, "volt")

    # -- configuration ------------------------------------------------------------------------
    def formats(self):
        if self.args.strategy == "ddp":
            return ["full"]
        return ["full", "sharded"] if self.args.state_dict_type == "both" else [self.args.state_dict_type]

    def config(self, fmt):
        path = os.path.join(self.work, f"soak-{self.args.strategy}-{fmt}.yaml")
        if self.args.strategy == "fsdp":
            strategy = ("{name: fsdp, auto_wrap_policy: {module_types: [TransformerEncoderLayer, "
                        f"TransformerDecoderLayer]}}, state_dict_type: {fmt}}}")
        else:
            strategy = "{name: ddp}"
        with open(path, "w") as f:
            f.write(f"""# Generated by scripts/soak.py: configs/tiny.yaml on {WORLD} ranks, a checkpoint every epoch.
trainer:
  devices: {self.args.ranks_per_host if self.multi else WORLD}
  strategy: {strategy}
  max_steps: {self.args.max_steps}
  limit_train_batches: {self.args.save_every}
  limit_val_batches: 2
  val_check_interval: {self.args.save_every}
  num_sanity_val_steps: 1
  enable_progress_bar: false
model:
  nlayers: 2
  dropout: 0.1
data:
  data_dir: {self.args.data_dir}
""")
        return path

    def command(self, fmt, folder, extra=()):
        return [self.volt, "fit", "--config", os.path.join(REPO, "configs", "tiny.yaml"), "--config",
                self.config(fmt), f"--trainer.default_root_dir={folder}", *extra]

    def host_command(self, fmt, folder, host, port, extra=()):
        """Host `host`'s command of a job (in its namespace), with the launch flags and max_restarts."""
        a = self.args
        flags = [f"--trainer.devices={a.ranks_per_host}"]
        if a.hosts > 1 and a.launch == "env":
            flags += [f"--trainer.num_nodes={a.hosts}"]
        elif a.hosts > 1:
            flags += [f"--trainer.num_nodes={a.hosts}", f"--node_rank={host}",
                      f"--master_addr={self.hostnet.address(0)}", f"--master_port={port}"]
        if a.max_restarts > 0:
            flags.append(f"--trainer.max_restarts={a.max_restarts}")
        cmd = self.command(fmt, folder, [*flags, *extra])
        return self.hostnet.wrap(host, cmd) if self.hostnet else cmd

    def start(self, fmt, folder, log_name, extra=()):
        os.makedirs(folder, exist_ok=True)
        if not self.multi:
            return Run(self.command(fmt, folder, extra), folder, self.env, os.path.join(folder, log_name),
                       self.events, os.path.join(folder, "checkpoints"), log_name)
        a = self.args
        self.port += 1  # a fresh port per job: no socket of the last one in the way
        base, ext = os.path.splitext(log_name)
        runs = []
        for h in range(a.hosts):
            env = self.env
            markers = [folder]
            if a.hosts > 1 and a.launch == "env":  # the variables the launch flags would set
                env = dict(self.env, NODE_RANK=str(h), MASTER_ADDR=self.hostnet.address(0), MASTER_PORT=str(self.port))
                markers.append(f"environ:NODE_RANK={h}")
            elif a.hosts > 1:
                markers.append(f"\0--node_rank={h}\0")
            runs.append(Run(self.host_command(fmt, folder, h, self.port, extra), folder, env,
                            os.path.join(folder, f"{base}.h{h}{ext}" if a.hosts > 1 else log_name), self.events,
                            os.path.join(folder, "checkpoints"), f"{log_name} host {h}",
                            first_rank=h * a.ranks_per_host, local=a.ranks_per_host, agent=a.max_restarts > 0,
                            node=h, markers=markers))
        return Job(runs, os.path.join(folder, "checkpoints"), self.hostnet,
                   (self.hostnet.address(0), self.port) if a.hosts > 1 else None)

    # -- checkpoints --------------------------------------------------------------------------
    def load_check(self, path, scratch):
        """volt consolidate reads and verifies every byte: (ok, global_step, full file or error)."""
        out = os.path.join(scratch, os.path.basename(path) + ".full")
        try:
            r = subprocess.run([self.volt, "consolidate", path, "-o", out, "--overwrite"], env=self.env,
                               capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return False, None, "volt consolidate timed out"
        if r.returncode != 0:
            return False, None, (r.stderr or r.stdout).strip().splitlines()[-1:] or ["failed"]
        try:
            return True, checkpoint_digest(out)["global_step"], out
        except Exception as e:  # noqa: BLE001 - any parse failure is a corrupted file
            return False, None, f"unreadable zip: {e}"

    def final_digest(self, folder, scratch):
        last = os.path.join(folder, "checkpoints", "last.ckpt")
        if not os.path.exists(last):
            return None, "no last.ckpt"
        ok, step, out = self.load_check(last, scratch)
        if not ok:
            return None, f"last.ckpt does not load: {out}"
        return checkpoint_digest(out), None

    # -- reference ----------------------------------------------------------------------------
    def reference(self, fmt, name="reference"):
        folder = os.path.join(self.work, f"{name}-{fmt}")
        shutil.rmtree(folder, ignore_errors=True)
        run = self.start(fmt, folder, "run.log")
        timeline = {"spawn": None, "rendezvous": None, "fit_done": None, "saves": []}
        in_save = None
        while run.now() < RESUME_TIMEOUT_S:
            if run.all_exited():
                break
            t = run.now()
            if timeline["spawn"] is None and len(run.known) >= WORLD:
                timeline["spawn"] = t
            if timeline["rendezvous"] is None and run.rendezvous_done():
                timeline["rendezvous"] = t
            if timeline["fit_done"] is None and run.fit_done():
                timeline["fit_done"] = t
            saving = any(is_temp(n) for n in ckpt_listing(run.ckpt_dir))
            if saving and in_save is None:
                in_save = t
            elif not saving and in_save is not None:
                timeline["saves"].append((in_save, t))
                in_save = None
            time.sleep(0.002)
        timeline["exit"] = run.now()
        ok = run.all_exited() and run.p.returncode == 0
        if not ok:
            run.kill_all()
        run.close()
        if not ok:
            log(f"reference run failed (exit {run.p.returncode}); its output:")
            print("\n".join(run.output()[-30:]))
            sys.exit(1)
        scratch = os.path.join(folder, "scratch")
        os.makedirs(scratch, exist_ok=True)
        digest, err = self.final_digest(folder, scratch)
        if digest is None:
            log(f"reference run: {err}")
            sys.exit(1)
        if digest["global_step"] != self.args.max_steps:
            log(f"reference run ended at step {digest['global_step']}, not {self.args.max_steps}")
            sys.exit(1)
        # The comparison must not pass vacuously: one flipped bit of one weight has to show.
        flipped = os.path.join(scratch, "flipped.ckpt")
        name = flip_one_byte(os.path.join(scratch, "last.ckpt.full"), flipped, digest)
        diff = compare_digests(digest, checkpoint_digest(flipped))
        if diff is None or name not in diff:
            log(f"self-check failed: a bit flipped in '{name}' was not detected ({diff})")
            sys.exit(1)
        os.remove(flipped)
        if self.events.lost_events:
            log("warning: process events were lost (busy machine); exit codes may come from the launcher log")
        log(f"reference {fmt}: {timeline['exit']:.1f} s; rendezvous at {timeline['rendezvous'] or 0:.2f} s, "
            f"{len(timeline['saves'])} save(s) seen, fit done at {timeline['fit_done'] or 0:.2f} s; "
            f"{len(digest['state_dict'])} weights; self-check: a flipped bit in '{name}' is detected")
        return {"folder": folder, "timeline": timeline, "digest": digest}

    # -- aiming a fault -----------------------------------------------------------------------
    def aim(self, tl):
        """(plan, delay, save_offset): when to strike, from the reference's timeline `tl`."""
        plan = pick(self.rng, [(v, w) for v, w in PLANS if v in self.args.moments])
        rdv = tl["rendezvous"] or 1.0
        done = tl["fit_done"] or tl["exit"]
        if plan == "startup":
            delay = self.rng.uniform(0, rdv * 1.1)
        elif plan == "training":
            delay = self.rng.uniform(rdv, done)
        elif plan == "save":
            delay = self.rng.randrange(max(1, len(tl["saves"])))  # which save to hit
        else:
            delay = self.rng.uniform(max(rdv, done - 0.3), tl["exit"] + 0.5)
        save_offset = self.rng.uniform(0, 0.8) * (
            sum(b - a for a, b in tl["saves"]) / len(tl["saves"]) if tl["saves"] else 0.01)
        return plan, delay, save_offset

    def wait_for_moment(self, run, plan, delay, save_offset, tl, ckdir):
        saves_seen, in_save = 0, False
        while True:
            run.update()
            t = run.now()
            if not run.alive_pids() and run.p.returncode is not None:
                break
            if plan == "save":
                saving = any(is_temp(n) for n in ckpt_listing(ckdir))
                if saving and not in_save:
                    saves_seen += 1
                    if saves_seen > delay:
                        time.sleep(save_offset)
                        break
                in_save = saving
                if t > tl["exit"] * 3 + 10:
                    break
            elif t >= delay:
                break
            time.sleep(0.001 if plan in ("save", "startup") else 0.005)

    # -- one trial ----------------------------------------------------------------------------
    def trial(self, i):
        fmt = self.formats()[i % len(self.formats())]
        ref = self.refs[fmt]
        tl = ref["timeline"]
        sig = pick(self.rng, [(v, w) for v, w in SIGNALS if v.name[3:] in self.args.signals])
        rank = self.rng.choice(self.args.ranks)
        plan, delay, save_offset = self.aim(tl)
        rec = {"trial": i, "format": fmt, "strategy": self.args.strategy, "signal": sig.name, "rank": rank,
               "plan": plan, "failures": []}
        folder = os.path.join(self.work, f"trial-{i:03d}")
        shutil.rmtree(folder, ignore_errors=True)
        run = self.start(fmt, folder, "attempt-0.log")
        ckdir = run.ckpt_dir
        self.wait_for_moment(run, plan, delay, save_offset, tl, ckdir)
        target = None
        # A rank that is not started yet is waited for (the earliest possible kill).
        spawn_wait_end = time.monotonic() + 10
        while True:
            target = run.pid_of_rank(rank)
            if target is not None or time.monotonic() > spawn_wait_end or run.all_exited():
                break
            time.sleep(0.001)
        before = ckpt_listing(ckdir)
        rdv_done, fit_done = run.rendezvous_done(), run.fit_done()
        others = [p for p in run.alive_pids() if p != target]  # who could report the death
        # A launched rank between fork and exec still has rank 0's environment (no RANK yet).
        before_exec = target is not None and target != run.root and proc_rank(target) is None and alive(target)
        t_kill = run.now()
        delivered = False
        if target is not None:
            try:
                os.kill(target, sig)
                delivered = True
            except ProcessLookupError:
                pass
        after = ckpt_listing(ckdir)
        if not delivered or fit_done:
            moment = "after_end"
        elif any(is_temp(n) for n in before + after):
            moment = "during_save"
        elif not rdv_done:
            moment = "before_rendezvous"
        else:
            moment = "training"
        # SIGTERM/SIGINT stop fit at the next step; once the last step's checkpoint is being written
        # there is none, and the run may complete normally.
        last_step_saving = any(f"step={self.args.max_steps}." in n for n in before + after)
        fault = moment != "after_end" and not (sig in (signal.SIGTERM, signal.SIGINT) and last_step_saving)
        rec.update({"moment": moment, "t_kill_s": round(t_kill, 3), "pid": target, "delivered": delivered,
                    "fault": fault, "ckpts_at_kill": before, "before_exec": before_exec})
        if moment != "after_end" and not fault:
            rec["note"] = f"{sig.name} during the last step's save: the run may complete (exit 0)"

        # Every process must exit, non-zero, naming the dead rank or the signal.
        limit = HANG_S[sig]
        # A stopped rank cannot exit: the others must, and the stopped one must not be left behind.
        frozen = (target,) if sig == signal.SIGSTOP and delivered else ()
        stopped_left = []
        exited = run.wait(t_kill + limit, exclude=frozen)
        if exited and not frozen:
            run.reader.join(timeout=5)  # the last lines written before the exits
        rec["hang"] = not exited
        if exited:
            rec["time_to_exit_s"] = round(max([run.exit_time.get(p, t_kill) for p in run.known if p not in frozen]
                                              + [t_kill]) - t_kill, 3)
        else:
            rec["time_to_exit_s"] = None
            rec["hang_limit_s"] = limit
            rec["hung"] = self.diagnose(run, folder, exclude=frozen)
            rec["failures"].append(f"hang: {len(rec['hung'])} process(es) alive {limit:.0f} s after the signal")
            run.kill_all()
        if frozen and exited:
            time.sleep(1.0)  # the others' exit may take the stopped rank with it
            rec["stopped_rank_left"] = alive(target)
            if alive(target):
                stopped_left.append({"pid": target, "rank": rank, "cmd": "(the stopped rank itself)"})
                rec["failures"].append(f"the stopped rank {rank} was left behind (state {proc_stat(target)[0]})")
                os.kill(target, signal.SIGKILL)
                run.wait(run.now() + 10)
        statuses = run.statuses()
        rec["exit"] = {str(r): describe_status(st) for r, (pid, st) in sorted(statuses.items(), key=str)}
        if fault and exited:
            bad = [r for r, (pid, st) in statuses.items() if pid not in frozen and not status_ok_nonzero(st)]
            unknown = [r for r, (pid, st) in statuses.items() if pid not in frozen and st is None]
            rec["nonzero_ok"] = not bad
            rec["exit_unknown"] = [str(r) for r in unknown]
            if set(bad) - set(unknown):
                zero = sorted(map(str, set(bad) - set(unknown)))
                rec["failures"].append(f"exit code 0 after the signal: rank(s) {zero}")
        rec["survivors_at_kill"] = len(others)
        if fault and others:  # a lone process killed outright cannot say anything
            rec["message"] = self.names_rank(run.output(t_kill), rank, sig)
            rec["message_ok"] = rec["message"] is not None
            if not rec["message_ok"] and exited:
                rec["failures"].append("no message names the dead rank or the signal")
        rec["output_tail"] = run.output(t_kill)[-8:]
        left = run.leftovers()
        rec["leftover_procs"] = stopped_left + left
        if left:
            rec["failures"].append(f"{len(left)} process(es) left")
        run.close()

        completed = exited and fault is False and all(
            st is not None and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0 for _, st in statuses.values())
        return self.check_and_resume(rec, fmt, folder, ckdir, before, completed, ref)

    def check_and_resume(self, rec, fmt, folder, ckdir, before, completed, ref):
        """After a fault: every checkpoint on disk loads, none that existed at the fault (`before`) is
        lost; then resumes (unless `completed`) until the run completes, and compares the final weights
        with the reference's. Fills and returns `rec`."""
        # Every checkpoint on disk must load; none that existed at the kill may be lost.
        scratch = os.path.join(folder, "scratch")
        os.makedirs(scratch, exist_ok=True)
        now_listing = ckpt_listing(ckdir)
        rec["temp_leftovers"] = [n for n in now_listing if is_temp(n)]
        checks = {}
        for n in now_listing:
            if is_temp(n) or not n.endswith(".ckpt"):
                continue
            ok, step, info = self.load_check(os.path.join(ckdir, n), scratch)
            checks[n] = {"ok": ok, "step": step, **({} if ok else {"error": str(info)})}
        rec["checkpoints"] = checks
        corrupted = [n for n, c in checks.items() if not c["ok"]]
        steps_before = [int(m.group(1)) for n in before if not is_temp(n) for m in [re.search(r"step=(\d+)", n)] if m]
        best_after = max([c["step"] for c in checks.values() if c["ok"] and c["step"] is not None] + [-1])
        lost = []
        if "last.ckpt" in before and not (checks.get("last.ckpt") or {}).get("ok"):
            lost.append("last.ckpt")
        if steps_before and best_after < max(steps_before):
            lost.append(f"step {max(steps_before)} (newest loadable now: {best_after})")
        rec["corrupted"], rec["lost"] = corrupted, lost
        if corrupted:
            rec["failures"].append(f"corrupted: {corrupted}")
        if lost:
            rec["failures"].append(f"lost: {lost}")

        # Resume until the run completes; then the weights must equal the reference's.
        rec["resumes"] = []
        for attempt in range(1, 5):
            if completed:
                break
            has_last = os.path.exists(os.path.join(ckdir, "last.ckpt"))
            extra = ["--ckpt_path=last"] if has_last else []
            r = self.start(fmt, folder, f"attempt-{attempt}.log", extra)
            ok_exit = r.wait(RESUME_TIMEOUT_S)
            info = {"ckpt_path": "last" if has_last else "(none: from scratch)", "seconds": round(r.now(), 1)}
            if not ok_exit:
                info["hang"] = self.diagnose(r, folder)
                r.kill_all()
                rec["failures"].append(f"resume attempt {attempt} hung")
            r.leftovers()
            r.close()
            info["exit"] = r.p.returncode
            out = r.output()
            if attempt == 1 and rec["temp_leftovers"]:
                rec["temp_reported"] = any(("partial" in l or ".tmp." in l) for l in out)
                rec["temp_cleaned"] = not any(is_temp(n) for n in ckpt_listing(ckdir))
                if not rec["temp_cleaned"]:
                    rec["failures"].append(f"leftovers not removed by the next run: {rec['temp_leftovers']}")
            if r.p.returncode != 0:
                info["tail"] = out[-5:]
            if r.p.returncode is None or any(getattr(x, "status_from_events", False) for x in getattr(r, "runs", [r])):
                info["root_status"] = [{"pid": x.root, "returncode": x.p.returncode, "reaped": REAPED.get(x.root),
                                        "event": x.events.status(x.root), "state": proc_stat(x.root)}
                                       for x in getattr(r, "runs", [r])]
            rec["resumes"].append(info)
            completed = ok_exit and r.p.returncode == 0
            if not ok_exit:
                break
        if not completed:
            rec["failures"].append("the run never completed after resuming")
        digest, err = self.final_digest(folder, scratch)
        if digest is None:
            rec["weights_equal"] = False
            rec["weights_diff"] = err
        else:
            rec["final_step"] = digest["global_step"]
            diff = compare_digests(ref["digest"], digest)
            if diff is None and digest["global_step"] != ref["digest"]["global_step"]:
                diff = f"final step {digest['global_step']} != {ref['digest']['global_step']}"
            rec["weights_equal"] = diff is None
            if diff:
                rec["weights_diff"] = diff
        if not rec["weights_equal"]:
            rec["failures"].append(f"final weights differ from the reference: {rec.get('weights_diff')}")
        rec["ok"] = not rec["failures"]
        if rec["ok"] and not self.args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            rec["folder"] = folder
            # Logs and backtraces stay; checkpoints only when they are what failed.
            if not self.args.keep and not (rec["corrupted"] or rec["lost"] or not rec["weights_equal"]):
                for d in ("checkpoints", "scratch"):
                    shutil.rmtree(os.path.join(folder, d), ignore_errors=True)
        return rec

    def host_trial(self, i):
        """One fault in a job across hosts (or under a restart agent): a rank killed (a signal of
        --signals), a host lost (every process in its namespace SIGKILLed), a host's restart agent
        killed, or a host cut off (its link set down). With --max_restarts, a rank killed must end in
        the job finishing by itself (every agent exits 0, one restart logged naming the rank); any
        other fault, or any fault without it, must end every process of the job, non-zero, within
        HANG_S (30 s for SIGKILL and a host), the output naming the dead rank or host. Then the
        checkpoints and the resume, as trial()."""
        a = self.args
        fmt = self.formats()[i % len(self.formats())]
        ref = self.refs[fmt]
        tl = ref["timeline"]
        kind = pick(self.rng, [(k, w) for k, w in FAULTS if k in a.faults])
        if kind == "rank":
            sig = pick(self.rng, [(v, w) for v, w in SIGNALS if v.name[3:] in a.signals])
            rank = self.rng.choice(a.ranks)
            host = rank // a.ranks_per_host
        else:
            sig = None if kind == "cut" else signal.SIGKILL
            rank = None
            host = self.rng.randrange(a.hosts)
        plan, delay, save_offset = self.aim(tl)
        what = f"rank {rank}" if kind == "rank" else f"host {host}" if kind in ("host", "cut") else f"agent {host}"
        rec = {"trial": i, "format": fmt, "strategy": a.strategy, "fault_kind": kind, "what": what,
               "signal": sig.name if sig else "-", "rank": rank, "host": host, "plan": plan,
               "max_restarts": a.max_restarts, "failures": []}
        folder = os.path.join(self.work, f"trial-{i:03d}")
        shutil.rmtree(folder, ignore_errors=True)
        job = self.start(fmt, folder, "attempt-0.log")
        ckdir = job.ckpt_dir
        self.wait_for_moment(job, plan, delay, save_offset, tl, ckdir)
        target = None
        if kind == "rank":  # a rank not started yet is waited for (the earliest possible kill)
            spawn_wait_end = time.monotonic() + 10
            while True:
                target = job.pid_of_rank(rank)
                if target is not None or time.monotonic() > spawn_wait_end or job.all_exited():
                    break
                time.sleep(0.001)
        elif kind == "agent":
            target = job.runs[host].root
        # Only a host that has joined can be missed: strike once every host has reached node 0's store
        # and beaten a few times (the watchdogs declare dead a peer that beat, then stopped).
        join_wait_end, t_aimed = time.monotonic() + 30, job.now()
        while True:
            job.update()
            if job.master is None or (job.join_time is not None and job.now() - job.join_time >= JOIN_MARGIN_S):
                break
            if time.monotonic() > join_wait_end or job.all_exited():
                rec["not_joined"] = job.join_time is None
                break
            time.sleep(0.005)
        rec["join_wait_s"] = round(job.now() - t_aimed, 3)
        if kind == "rank" and (target is None or not alive(target)):
            target = job.pid_of_rank(rank)
        before = ckpt_listing(ckdir)
        rdv_done, fit_done = job.rendezvous_done(), job.fit_done()
        job.update()
        others = [p for p in job.alive_pids() if p != target and (kind == "rank" or p not in job.runs[host].known)]
        before_exec = (kind == "rank" and target is not None and target not in job.roots().values()
                       and proc_rank(target) is None and alive(target))
        t_kill = job.now()
        delivered = False
        cut = False
        try:
            if kind in ("rank", "agent"):
                if target is not None and alive(target):
                    try:
                        os.kill(target, sig)
                        delivered = True
                    except ProcessLookupError:
                        pass
            elif kind == "host":
                killed = set(self.hostnet.kill_host(host))
                for p in job.runs[host].alive_pids():  # one not in the namespace yet, if any
                    try:
                        os.kill(p, signal.SIGKILL)
                        killed.add(p)
                    except OSError:
                        pass
                delivered = bool(killed)
            elif kind == "cut":
                if job.alive_pids():
                    self.hostnet.set_link(host, False)
                    delivered = cut = True
            after = ckpt_listing(ckdir)
            if not delivered or fit_done:
                moment = "after_end"
            elif any(is_temp(n) for n in before + after):
                moment = "during_save"
            elif not rdv_done:
                moment = "before_rendezvous"
            else:
                moment = "training"
            last_step_saving = any(f"step={a.max_steps}." in n for n in before + after)
            fault = moment != "after_end" and not (sig in (signal.SIGTERM, signal.SIGINT) and last_step_saving)
            # With restarts, a killed rank is mended by the agents: the job must finish by itself.
            self_heal = a.max_restarts > 0 and kind == "rank"
            rec.update({"moment": moment, "t_kill_s": round(t_kill, 3), "pid": target, "delivered": delivered,
                        "fault": fault, "self_heal": self_heal, "ckpts_at_kill": before,
                        "before_exec": before_exec})
            if moment != "after_end" and not fault:
                rec["note"] = f"{sig.name} during the last step's save: the run may complete (exit 0)"

            limit = RESUME_TIMEOUT_S if self_heal else HANG_S[sig or signal.SIGKILL]
            exited = job.wait(t_kill + limit)
            for r in job.runs:
                r.reader.join(timeout=5)  # the last lines written before the exits
        finally:
            if cut:
                self.hostnet.set_link(host, True)
        rec["hang"] = not exited
        roots = job.roots()
        exit_time = job.exit_time
        if exited:
            last = max([exit_time.get(p, t_kill) for p in job.known] + [t_kill])
            if self_heal:
                # The job restarts and trains on: what must be quick is the end, once the agents exit.
                end = min(exit_time.get(p, last) for p in roots.values())
                rec["job_end_s"] = round(end - t_kill, 3)
                rec["time_to_exit_s"] = round(max(0.0, last - end), 3)
                if last - end > HANG_S[signal.SIGKILL]:
                    rec["failures"].append(f"processes outlived the job's end by {last - end:.1f} s")
            else:
                rec["time_to_exit_s"] = round(last - t_kill, 3)
        else:
            rec["time_to_exit_s"] = None
            rec["hang_limit_s"] = limit
            rec["hung"] = self.diagnose(job, folder)
            what_end = "the job's end" if self_heal else "the fault"
            rec["failures"].append(f"hang: {len(rec['hung'])} process(es) alive {limit:.0f} s after {what_end}")
            job.kill_all()
        statuses = job.statuses()
        rec["exit"] = {str(r): describe_status(st) for r, (pid, st) in sorted(statuses.items(), key=str)}
        root_st = {label: statuses.get(label, (pid, None))[1] for label, pid in roots.items()}

        def zero(st):
            return st is not None and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0

        if exited and self_heal:
            # Every agent exits 0: the job finished by itself, whenever the kill came.
            bad = sorted(str(k) for k, st in root_st.items() if not zero(st))
            rec["nonzero_ok"] = not bad
            if bad:
                rec["failures"].append(f"the job did not finish by itself after {what} was killed "
                                       f"(max_restarts={a.max_restarts}): "
                                       + ", ".join(f"{k} {describe_status(root_st[k])}" for k in bad))
            restarts = sorted({int(m.group(1)) for l in job.output(t_kill)
                               for m in [re.search(r"\brestart (\d+) of \d+:", l)] if m})
            rec["restarts"] = restarts
            if fault and not restarts:
                rec["failures"].append("no restart was logged")
            if len(restarts) > 1:
                rec["failures"].append(f"{len(restarts)} restarts for one fault: {restarts}")
        elif exited and fault:
            # Without agents every process exits non-zero; with them, the job is what the agents say
            # (the ranks they stop with SIGTERM may exit either way).
            judged = statuses if a.max_restarts == 0 else {k: (roots[k], st) for k, st in root_st.items()}
            bad = [r for r, (pid, st) in judged.items() if not status_ok_nonzero(st)]
            unknown = [r for r, (pid, st) in judged.items() if st is None]
            rec["nonzero_ok"] = not bad
            rec["exit_unknown"] = [str(r) for r in unknown]
            if set(bad) - set(unknown):
                zeros = sorted(map(str, set(bad) - set(unknown)))
                rec["failures"].append(f"exit code 0 after the fault: {zeros}")
        rec["survivors_at_kill"] = len(others)
        if fault and others:
            out = job.output(t_kill)
            if kind == "rank":
                restart_lines = [l for l in out if re.search(r"\brestart \d+ of \d+:", l)]
                named = [l for l in restart_lines if re.search(rf"\brank {rank}\b", l)]
                rec["message"] = named[0].strip()[:300] if named else self.names_rank(out, rank, sig)
            else:
                rec["message"] = self.names_host(out, host)
            rec["message_ok"] = rec["message"] is not None
            if not rec["message_ok"] and exited:
                rec["failures"].append(f"no message names the dead {'rank' if kind == 'rank' else 'host'}")
        rec["output_tail"] = job.output(t_kill)[-12:]
        left = job.leftovers()
        rec["leftover_procs"] = left
        if left:
            rec["failures"].append(f"{len(left)} process(es) left")
        job.close()
        if self_heal:
            completed = exited and all(zero(st) for st in root_st.values())
        else:
            completed = exited and fault is False and all(zero(st) for _, st in statuses.values())
        return self.check_and_resume(rec, fmt, folder, ckdir, before, completed, ref)

    def names_host(self, lines, host):
        """The first output line that names the lost or cut-off host: its node, its address or one of
        its ranks (startup lines and a rank's own log prefix name nobody)."""
        r = self.args.ranks_per_host
        pats = [rf"\bnode {host}\b", *[rf"\brank {k}\b" for k in range(host * r, host * r + r)],
                rf"\branks [\d, ]*\b{host * r}\b"]
        if self.hostnet:
            pats.append(re.escape(self.hostnet.address(host)) + r"(?![\d])")
        pat = re.compile("|".join(pats), re.IGNORECASE)
        for l in lines:
            if any(s in l for s in ("Initialized process group", "Launched", "rank(s) here", "gloo on ")):
                continue
            stripped = re.sub(r"\[rank \d+\]", "", l)
            if pat.search(stripped):
                return l.strip()[:300]
        return None

    def names_rank(self, lines, rank, sig):
        """The first output line that names the dead rank or the signal (not a rank's own log prefix)."""
        by_rank = re.compile(rf"\brank {rank}\b", re.IGNORECASE)
        by_signal = re.compile(rf"\b{sig.name}\b|\bsignal {int(sig)}\b|\b{re.escape(signal.strsignal(sig))}")
        for l in lines:
            if "Initialized process group" in l or "Launched" in l:
                continue
            stripped = re.sub(r"\[rank \d+\]", "", l)  # a rank's own log prefix names nobody
            if by_rank.search(stripped) or by_signal.search(stripped):
                return l.strip()[:300]
        return None

    def diagnose(self, run, folder, exclude=()):
        """What the processes still alive are doing: state, kernel wait, last output, gdb backtrace."""
        out = []
        tail = run.output()[-15:]
        for pid in run.alive_pids(exclude):
            rank = run.known.get(pid)
            st = proc_stat(pid)
            d = {"pid": pid, "rank": rank, "state": st[0] if st else "?",
                 "wchan": proc_text(pid, "wchan").strip(), "last_output": tail,
                 "threads": len(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else 0}
            if self.gdb:
                try:
                    g = subprocess.run([self.gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off", "-ex",
                                        "thread apply all bt"], capture_output=True, text=True, timeout=90)
                    path = os.path.join(folder, f"hang-rank{rank}-pid{pid}.gdb.txt")
                    with open(path, "w") as f:
                        f.write(g.stdout + g.stderr)
                    d["backtrace_file"] = path
                    d["backtrace"] = summarize_bt(g.stdout, pid)
                except (OSError, subprocess.TimeoutExpired) as e:
                    d["backtrace"] = [f"gdb failed: {e}"]
            out.append(d)
        return out


def summarize_bt(text, pid):
    """The main thread's frames inside volt, c10d and gloo, and where the other threads of interest wait."""
    threads, cur = [], None
    for line in text.splitlines():
        m = re.match(r"Thread \d+ \(.*?LWP (\d+)\)", line)
        if m:
            cur = {"lwp": int(m.group(1)), "frames": []}
            threads.append(cur)
            continue
        m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(.+?) \(", line)
        if m and cur is not None:
            cur["frames"].append(m.group(1))
    interesting = re.compile(r"volt::|c10d::|gloo::|torch::|main")
    out = []
    for th in threads:
        fr = [f for f in th["frames"] if interesting.search(f)]
        if th["lwp"] == pid:
            out.append("main: " + " <- ".join(shorten(f) for f in (fr or th["frames"])[:8]))
        elif fr and any("volt::" in f for f in fr):
            out.append(f"thread {th['lwp']}: " + " <- ".join(shorten(f) for f in fr[:4]))
    return out


def shorten(f):
    """A frame's function without template and call arguments."""
    f = f.replace("operator()", "operator<call>")
    while re.search(r"<[^<>]*>", f):
        f = re.sub(r"<[^<>]*>", "", f)
    return f.split("(")[0].replace("operator<call>", "operator()")[:100]


def table(records, strategy, layout=None):
    rows = [("all", records)]
    for k, _ in FAULTS:
        rows.append((f"{k} fault", [r for r in records if r.get("fault_kind") == k]))
    for s in ("SIGKILL", "SIGTERM", "SIGINT", "SIGSTOP"):
        rows.append((s, [r for r in records if r["signal"] == s]))
    for m in MOMENTS:
        rows.append((m, [r for r in records if r["moment"] == m]))
    multi = any("fault_kind" in r for r in records)
    # Across hosts: "exits as expected" is 0 from every agent for a rank killed under max_restarts,
    # non-zero otherwise; "max t-exit s" is from the fault, or from the job's end when it restarted.
    head = ["", "trials", "hangs", "exits as expected" if multi else "non-zero exits",
            "names rank/host" if multi else "names rank/signal", "lost/corrupt ckpts", "weights equal",
            "leftover procs", "max t-exit s", "ok"]
    lines = [head]
    for name, rs in rows:
        if not rs:
            continue
        faults = [r for r in rs if (r["fault"] or r.get("self_heal")) and not r["hang"] and "nonzero_ok" in r]
        times = [r["time_to_exit_s"] for r in rs if r["time_to_exit_s"] is not None]
        lines.append([
            name, str(len(rs)), str(sum(r["hang"] for r in rs)),
            f"{sum(1 for r in faults if r.get('nonzero_ok'))}/{len(faults)}",
            f"{sum(1 for r in rs if r.get('message_ok'))}/{sum(1 for r in rs if 'message_ok' in r)}",
            str(sum(len(r["lost"]) + len(r["corrupted"]) for r in rs)),
            f"{sum(1 for r in rs if r.get('weights_equal'))}/{len(rs)}",
            str(sum(len(r["leftover_procs"]) for r in rs)),
            "-" if not times else f"{max(times):.2f}" + ("+" if any(r["hang"] for r in rs) else ""),
            f"{sum(1 for r in rs if r['ok'])}/{len(rs)}",
        ])
    widths = [max(len(l[c]) for l in lines) for c in range(len(head))]
    out = [f"soak: strategy {strategy}" + (f", {layout}" if layout else "")]
    for k, l in enumerate(lines):
        out.append("  ".join(v.ljust(widths[c]) if c == 0 else v.rjust(widths[c]) for c, v in enumerate(l)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="What each trial checks: the top of this "
                                 "file and docs/checkpoints.md, 'Soak test'.")
    ap.add_argument("--trials", type=int, default=20, help="how many kills (default 20)")
    ap.add_argument("--strategy", choices=["fsdp", "ddp"], default="fsdp")
    ap.add_argument("--state_dict_type", "--state-dict-type", choices=["full", "sharded", "both"], default="both",
                    help="FSDP checkpoint format; 'both' alternates between trials (default)")
    ap.add_argument("--volt", default=os.path.join(REPO, "build", "volt"), help="the volt binary (default build/volt)")
    ap.add_argument("--seed", type=int, default=None,
                    help="the trials' random choices (default: a random seed, printed)")
    ap.add_argument("--keep", action="store_true", help="keep every trial's folder (failed ones are always kept)")
    ap.add_argument("--json", help="write the per-trial details to this file")
    ap.add_argument("--workdir", help="where runs go (default: a new temporary folder)")
    ap.add_argument("--no-copy", action="store_true", help="run the binary in place instead of a private copy")
    ap.add_argument("--max_steps", type=int, default=30, help="steps of the run (default 30)")
    ap.add_argument("--save_every", type=int, default=5, help="steps per epoch, and so between checkpoints")
    ap.add_argument("--data_dir", default=None,
                    help="WikiText-2 folder (default: configs/tiny.yaml's, from the repository)")
    ap.add_argument("--signals", default=None,
                    help="signals to send to a rank (default: KILL,TERM,INT; across hosts KILL)")
    ap.add_argument("--ranks", default=None, help="ranks to kill (default: all)")
    ap.add_argument("--moments", default=",".join(p for p, _ in PLANS),
                    help="when to aim the signal: startup,training,save,end (default: all)")
    ap.add_argument("--hosts", type=int, default=1,
                    help="hosts, as network namespaces joined by a bridge (root; default 1: no namespaces)")
    ap.add_argument("--ranks_per_host", "--ranks-per-host", type=int, default=None,
                    help="ranks per host (trainer.devices; default 1 across hosts, else 2)")
    ap.add_argument("--max_restarts", "--max-restarts", type=int, default=0,
                    help="trainer.max_restarts: a killed rank must be mended by the job itself (default 0)")
    ap.add_argument("--launch", choices=["flags", "env"], default="flags",
                    help="across hosts: --node_rank/--master_addr/--master_port (default), or the variables "
                    "NODE_RANK/MASTER_ADDR/MASTER_PORT they set")
    ap.add_argument("--faults", default=None,
                    help="across hosts, or with --max_restarts: what to strike, of rank,host,agent,cut (default: "
                    "all that apply: host and cut need --hosts > 1, agent needs --max_restarts)")
    args = ap.parse_args()
    global WORLD
    multi = args.hosts > 1 or args.max_restarts > 0
    if args.hosts < 1 or args.max_restarts < 0 or (args.ranks_per_host is not None and args.ranks_per_host < 1):
        ap.error("--hosts and --ranks_per_host must be >= 1, --max_restarts >= 0")
    if args.ranks_per_host is None:
        args.ranks_per_host = 1 if args.hosts > 1 else WORLD
    if multi:
        WORLD = args.hosts * args.ranks_per_host
        if WORLD < 2:
            ap.error("a job needs at least 2 ranks: --hosts x --ranks_per_host")
    args.signals = [x.strip().upper().replace("SIG", "")
                    for x in (args.signals or ("KILL" if multi else "KILL,TERM,INT")).split(",")]
    args.ranks = [int(x) for x in args.ranks.split(",")] if args.ranks else list(range(WORLD))
    args.moments = [x.strip() for x in args.moments.split(",")]
    applicable = ["rank"] + (["host", "cut"] if args.hosts > 1 else []) + (["agent"] if args.max_restarts else [])
    args.faults = [x.strip() for x in args.faults.split(",")] if args.faults else applicable
    if (not set(args.signals) <= {"KILL", "TERM", "INT", "STOP"} or not set(args.ranks) <= set(range(WORLD))
            or not set(args.moments) <= {p for p, _ in PLANS}):
        ap.error("--signals, --ranks or --moments names something unknown")
    if multi and ("STOP" in args.signals or not set(args.faults) <= set(applicable)):
        ap.error(f"--faults: only {','.join(applicable)} apply here; STOP only on one host without restarts")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if args.data_dir is None:
        with open(os.path.join(REPO, "configs", "tiny.yaml")) as f:
            m = re.search(r"^\s*data_dir:\s*(\S+)", f.read(), re.M)
        args.data_dir = os.path.normpath(os.path.join(REPO, m.group(1) if m else "../shared/data/wikitext-2"))
    if not sys.platform.startswith("linux"):
        log("needs Linux (/proc); skipping")
        return 77
    if not os.path.exists(args.volt):
        log(f"{args.volt} not found; skipping")
        return 77
    if not os.path.isdir(args.data_dir):
        log(f"data folder {args.data_dir} not found; skipping")
        return 77
    # Runs must get SIGINT/SIGTERM's default action before fit installs its handlers: a shell that
    # started us in the background may have set them to "ignore", which exec would pass on.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if args.hosts > 1:
        why = hosts_unavailable()
        if why:
            log(f"{why}; skipping")
            return 77

        # The namespaces go however the soak ends: here (finally, in __main__), at exit, on a signal.
        def on_signal(signum, frame):
            raise SystemExit(128 + signum)

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, on_signal)
        atexit.register(remove_hosts)
        HOSTNET.append(HostNet(args.hosts))
        net = HOSTNET[0]
        log(f"{args.hosts} hosts: namespaces {', '.join(net.name(h) for h in range(args.hosts))} "
            f"({', '.join(net.address(h) for h in range(args.hosts))}), bridge in {net.prefix}-sw")
    soak = Soak(args)
    log(f"seed {args.seed}, {args.trials} trial(s), strategy {args.strategy}, formats {soak.formats()}, "
        f"binary {soak.volt} (md5 {soak.fingerprint()}), "
        f"work folder {soak.work}; exit codes from {'process events' if soak.events.ok else 'the launcher log'}; "
        f"subreaper {'on' if soak.subreaper else 'off'}; gdb {'found' if soak.gdb else 'not found'}")
    for fmt in soak.formats():
        soak.refs[fmt] = soak.reference(fmt)
    records = []
    try:
        for i in range(args.trials):
            rec = soak.host_trial(i) if soak.multi else soak.trial(i)
            records.append(rec)
            resumes = " ".join(f"{r['ckpt_path']}->{r['exit']}" for r in rec["resumes"]) or "-"
            t = rec["time_to_exit_s"]
            if "fault_kind" in rec:
                end = (f"restarted {rec.get('restarts') or 'never'}, finished {rec['job_end_s']:.1f} s after, "
                       f"all gone {t:.2f} s later" if rec.get("job_end_s") is not None else
                       f"exit in {t:.2f} s" if t is not None else "HANG")
                what = f"{rec['fault_kind']:5s} {rec['what']:7s}" + (f" {rec['signal']}" if rec["fault_kind"] == "rank"
                                                                      else "")
                log(f"trial {i:3d} {rec['format']:7s} {what} {rec['plan']:8s} -> {rec['moment']:17s} at "
                    f"{rec['t_kill_s']:6.2f} s{' (before exec)' if rec['before_exec'] else ''}: {end} "
                    f"{rec['exit']}; resume {resumes}; {'OK' if rec['ok'] else 'FAIL: ' + '; '.join(rec['failures'])}")
                if rec.get("message"):
                    log(f"    named: {rec['message']}")
            else:
                log(f"trial {i:3d} {rec['format']:7s} {rec['signal']:7s} rank {rec['rank']} {rec['plan']:8s} -> "
                    f"{rec['moment']:17s} at {rec['t_kill_s']:6.2f} s{' (before exec)' if rec['before_exec'] else ''}: "
                    f"{'HANG' if rec['hang'] else f'exit in {t:.2f} s'} {rec['exit']}; resume {resumes}; "
                    f"{'OK' if rec['ok'] else 'FAIL: ' + '; '.join(rec['failures'])}")
            for h in rec.get("hung", []):
                log(f"    hung: rank {h['rank']} pid {h['pid']} state {h['state']} wchan {h['wchan']}")
                for b in h.get("backtrace", []):
                    log(f"      {b}")
            if not rec["ok"]:
                for l in rec.get("output_tail", []):
                    log(f"    | {l}")
    finally:
        for r in RUNS:  # an interrupted soak leaves nothing behind
            if r.alive_pids():
                r.kill_all()
        reap()
    # Lazily: is the reference itself deterministic? Tells a resume bug from a noisy run.
    if any(r["weights_equal"] is False and "differs" in str(r.get("weights_diff")) for r in records):
        fmt = soak.formats()[0]
        again = soak.reference(fmt, name="reference-again")
        same = compare_digests(soak.refs[fmt]["digest"], again["digest"])
        log("a second uninterrupted run " + ("matches the first bitwise" if same is None else f"differs: {same}"))
    layout = (f"{args.hosts} host(s) x {args.ranks_per_host} rank(s), max_restarts {args.max_restarts}"
              if soak.multi else None)
    print(table(records, args.strategy, layout))
    failed = [r for r in records if not r["ok"]]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "strategy": args.strategy, "hosts": args.hosts,
                       "ranks_per_host": args.ranks_per_host if soak.multi else WORLD,
                       "max_restarts": args.max_restarts, "work": soak.work, "volt": soak.volt,
                       "volt_md5": soak.fingerprint(),
                       "references": {k: {"timeline": v["timeline"]} for k, v in soak.refs.items()},
                       "trials": records}, f, indent=1, default=str)
    if not failed and not args.keep:
        shutil.rmtree(soak.work, ignore_errors=True)
    else:
        if not args.keep:
            for fmt in soak.refs:
                shutil.rmtree(soak.refs[fmt]["folder"], ignore_errors=True)
            shutil.rmtree(os.path.join(soak.work, "bin"), ignore_errors=True)
        log(f"failed trials' logs kept in {soak.work}")
    log(f"{len(records) - len(failed)}/{len(records)} trials passed (seed {args.seed})")
    return 1 if failed else 0


def remove_hosts():
    """Kills what runs in this soak's namespaces and removes them (idempotent)."""
    for net in HOSTNET:
        try:
            net.remove()
        except Exception as e:  # noqa: BLE001 - removal goes on for the others
            log(f"removing namespaces {net.prefix}-*: {e}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for r in RUNS:  # nothing of a run outlives the soak, namespaces or not
            try:
                if r.alive_pids():
                    r.kill_all()
            except Exception:  # noqa: BLE001
                pass
        remove_hosts()
