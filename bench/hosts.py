#!/usr/bin/env python3
"""FSDP and DDP across hosts over a slow link, beside the cost model of docs/fsdp-scaling.md.

usage: bench/hosts.py [--bench build/bench/bench_fsdp] [--hosts 2] [--ranks 2] [--rate 2gbit]
                      [--strategies ddp,full_shard,shard_grad_op,hybrid_shard] [--steps 3] [--warmup 1]
                      [--unlimited] [--data_dir DIR] [-- extra bench_fsdp model options]

Makes --hosts hosts as network namespaces joined by a bridge (as tests/distributed/host_net.h),
limits each host's link to --rate in both directions with tc's tbf (ranks on one host talk over
loopback, unlimited), and runs one `bench_fsdp --run STRATEGY RANKS --num_nodes HOSTS` per host with
NODE_RANK, MASTER_ADDR and MASTER_PORT set, for each strategy in turn (the 107 M demo Transformer by
default: AdamW, fp32, batch 2 x 32 per rank). --unlimited also runs every strategy without the limit,
for the compute-side step time. Prints one markdown table: step time, bytes each rank sends, bytes
each host sends over its link per step (the interface's counters: payload plus TCP/IP headers), the
cost model's link bytes and the ratio, and the link-bound time at --rate.

The cost model, per host per step, Ψ parameters, N = hosts x R ranks, fp32 (4 bytes), Gloo's
algorithms as volt calls them (ring all-reduce; all-gather and reduce-scatter as one all-to-all):
  DDP            2(N-1)/N · 4Ψ   (the ring crosses each host boundary once per direction)
  FULL_SHARD     (3 - r) · R · R · 4Ψ/N   (each all-to-all sends a 1/N shard to the R ranks of the
                                           other host; r: the share not gathered again in backward)
  SHARD_GRAD_OP  2 · R · R · 4Ψ/N
  HYBRID_SHARD   R · 2 · (2-1)/2 · 4Ψ/R = 4Ψ   (only the replicate all-reduce of each gradient shard
                                               crosses; gathers and reduce-scatters stay in the host)
r is read off the run itself: FULL_SHARD's bytes per rank (volt's own count, ProcessGroup::comm_stats)
are (3 - r)(N-1)/N · 4Ψ. Needs root and iproute2; exits 77 when hosts cannot be made.
"""
import argparse
import atexit
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "vb%d" % os.getpid()
SUBNET = "10.231.%d" % (100 + os.getpid() % 100)


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("'%s' failed: %s" % (cmd, r.stdout))
    return r.stdout


def sweep_stale():
    for line in sh("ip netns list", check=False).splitlines():
        m = re.match(r"^(vb(\d+)-\S+)", line)
        if not m:
            continue
        try:
            os.kill(int(m.group(2)), 0)
        except ProcessLookupError:
            sh("ip netns del %s" % m.group(1), check=False)


class Hosts:
    def __init__(self, n):
        self.n = n
        self.made = []
        atexit.register(self.remove)
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, lambda *_: sys.exit(130))
        sw = PREFIX + "-sw"
        self._ns(sw)
        sh("ip -n %s link add br0 type bridge && ip -n %s link set br0 up" % (sw, sw))
        for i in range(n):
            ns, a, b = self.name(i), "%sa%d" % (PREFIX, i), "%sb%d" % (PREFIX, i)
            self._ns(ns)
            sh("ip link add %s type veth peer name %s" % (a, b))
            sh("ip link set %s netns %s && ip link set %s netns %s" % (a, ns, b, sw))
            sh("ip -n %s link set %s name eth0" % (ns, a))
            sh("ip -n %s addr add %s/24 dev eth0" % (ns, self.address(i)))
            sh("ip -n %s link set eth0 up && ip -n %s link set lo up" % (ns, ns))
            sh("ip -n %s link set %s master br0 && ip -n %s link set %s up" % (sw, b, sw, b))

    def _ns(self, name):
        sh("ip netns add %s" % name)
        self.made.append(name)

    def name(self, i):
        return "%s-%d" % (PREFIX, i)

    def address(self, i):
        return "%s.%d" % (SUBNET, i + 1)

    def limit(self, rate):
        for i in range(self.n):
            for ns, dev in ((self.name(i), "eth0"), (PREFIX + "-sw", "%sb%d" % (PREFIX, i))):
                if rate:
                    sh("ip netns exec %s tc qdisc replace dev %s root tbf rate %s burst 1mb latency 200ms" % (ns, dev, rate))
                else:
                    sh("ip netns exec %s tc qdisc del dev %s root" % (ns, dev), check=False)

    def remove(self):
        for ns in reversed(self.made):
            sh("ip netns pids %s | xargs -r kill -9" % ns, check=False)
            sh("ip netns del %s" % ns, check=False)
        self.made = []


def run_strategy(hosts, args, strategy, out):
    procs = []
    for h in range(hosts.n):
        env = dict(os.environ, NODE_RANK=str(h), MASTER_ADDR=hosts.address(0), MASTER_PORT="29613")
        cmd = ["ip", "netns", "exec", hosts.name(h), args.bench, args.data_dir, "--run", strategy, str(args.ranks),
               "--num_nodes", str(hosts.n), "--out", out, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        cmd += args.extra
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs, codes = [], []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
        logs.append(o)
        codes.append(p.returncode)
    if any(codes):
        sys.stderr.write("bench/hosts.py: %s failed (%s):\n%s\n" % (strategy, codes, "\n---\n".join(l[-3000:] for l in logs)))
        return None
    with open(out) as f:
        line = f.read().strip().splitlines()[-1].split()
    return {"params": float(line[5]), "processes": int(line[3]), "step": float(line[8]), "sent": float(line[9]),
            "comm": float(line[16]), "exposed": float(line[17]), "link": float(line[18])}


def model_link(strategy, psi, n, r_per_host, r_share):
    b = 4 * psi
    if strategy == "DDP":
        return 2 * (n - 1) / n * b
    if strategy == "FULL_SHARD":
        return (3 - r_share) * r_per_host * r_per_host * b / n
    if strategy == "SHARD_GRAD_OP":
        return 2 * r_per_host * r_per_host * b / n
    return b  # HYBRID_SHARD, _HYBRID_SHARD_ZERO2: 2 replicas


def rate_bytes_per_s(rate):
    m = re.match(r"^([0-9.]+)\s*([kmg]?)bit$", rate.lower())
    if not m:
        raise ValueError("--rate: expected e.g. 2gbit, got %r" % rate)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "bench", "bench_fsdp"))
    ap.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data", "wikitext-2"))
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2, help="ranks per host")
    ap.add_argument("--rate", default="2gbit")
    ap.add_argument("--strategies", default="ddp,full_shard,shard_grad_op,hybrid_shard")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--unlimited", action="store_true", help="also run without the rate limit")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("extra", nargs="*", help="after --: more bench_fsdp options (model size)")
    args = ap.parse_args()
    if os.geteuid() != 0 or not sh("command -v ip", check=False).strip():
        print("bench/hosts.py: needs root and iproute2 (network namespaces); skipped")
        return 77
    if not os.path.exists(args.bench):
        print("bench/hosts.py: %s not built" % args.bench)
        return 1
    sweep_stale()
    hosts = Hosts(args.hosts)
    n = args.hosts * args.ranks
    strategies = [s.strip().upper() for s in args.strategies.split(",") if s.strip()]
    rows = {}
    t_all = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for limited in ([False, True] if args.unlimited else [True]):
            hosts.limit(args.rate if limited else None)
            for s in strategies:
                sys.stderr.write("bench/hosts.py: %s, %s ...\n" % (s, args.rate if limited else "unlimited"))
                rows[(s, limited)] = run_strategy(hosts, args, s, os.path.join(tmp, "%s-%d.txt" % (s, limited)))
    hosts.remove()
    any_row = next((r for r in rows.values() if r), None)
    if not any_row:
        return 1
    psi = any_row["params"]
    fs = rows.get(("FULL_SHARD", True)) or rows.get(("FULL_SHARD", False))
    r_share = 3 - fs["sent"] / ((n - 1) / n * 4 * psi) if fs else 0.32
    bps = rate_bytes_per_s(args.rate)
    print("\n%d hosts x %d ranks (N = %d), link %s (tbf, both directions; loopback inside a host), Ψ = %.0f "
          "parameters (%.0f MB fp32), median of %d steps after %d warm-up; r = %.3f (from FULL_SHARD's bytes per rank)\n"
          % (args.hosts, args.ranks, n, args.rate, psi, 4 * psi / 1e6, args.steps, args.warmup, r_share))
    print("| strategy | link | step (s) | sent / rank / step (MB) | link / host / step (MB) | model (MB) | "
          "measured / model | link-bound time (s) | comm exposed (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (s, limited), r in sorted(rows.items(), key=lambda kv: (not kv[0][1], strategies.index(kv[0][0]))):
        link = args.rate if limited else "unlimited"
        if not r:
            print("| %s | %s | failed | | | | | | |" % (s, link))
            continue
        m = model_link(s, psi, n, args.ranks, r_share)
        print("| %s | %s | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |" % (
            s, link, r["step"], r["sent"] / 1e6, r["link"] / 1e6, m / 1e6, r["link"] / m if m else 0,
            r["link"] / bps, r["exposed"]))
    hy, fs_l = rows.get(("HYBRID_SHARD", True)), rows.get(("FULL_SHARD", True))
    if hy and fs_l:
        print("\nHYBRID_SHARD / FULL_SHARD across the %s link: step time %.2fx, link bytes %.2fx." % (
            args.rate, hy["step"] / fs_l["step"], hy["link"] / fs_l["link"]))
    print("Total wall time %.0f s." % (time.time() - t_all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
