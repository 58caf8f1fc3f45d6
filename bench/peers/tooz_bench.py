#!/usr/bin/python3
"""tooz_bench.py: OpenStack tooz's SQL locks as a user would use them, a peer sqlock is compared with.

    coordinator = tooz.coordination.get_coordinator(url, member_id); coordinator.start()
    lock = coordinator.get_lock(name)      # once per name
    lock.acquire(blocking=False) ... lock.release()

  postgresql://user:password@host:port/db  tooz's PostgreSQL driver: pg_try_advisory_lock /
                                            pg_advisory_unlock (variant "pg_advisory_lock")
  mysql://user:password@host:port/db       tooz's MySQL driver: GET_LOCK(name, 0) / RELEASE_LOCK
                                            (variant "GET_LOCK")
(Both drivers open a new connection for every acquire and close it on release, or when the lock is busy:
that is part of what is measured.)

Each client is a process (the GIL) with its own coordinator. --names distinct: client c cycles over its own
64 names tooz:<pid>:<c>:<i>; shared: all clients use tooz:<pid>:shared, and a busy acquire is tried again
at once. After a 1 s warm-up (--warmup) it measures for --seconds: cycles, attempts, busy answers, the
latency of each successful cycle (start of the acquire that succeeded to the return of its release:
p50/p99), the clients' own CPU (getrusage) per cycle, errors. Prints one JSON line
(bench/results-format.md, suite "cycle", impl "tooz") on stdout. Exit 0; 1 if any error was counted;
2 on bad input or an unusable server.

Needs Debian's python3-tooz, python3-psycopg2, python3-pymysql: run it with /usr/bin/python3.
    /usr/bin/python3 bench/peers/tooz_bench.py --url postgresql://sqlock:sqlock@127.0.0.1:5432/sqlock \\
        --clients 4 --names distinct --seconds 10
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import resource
import sys
import time

NAMES = 64
WARMUP, MEASURE, STOP = 0, 1, 2


def die(msg):
    print(f"tooz_bench.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def tooz_url(url):
    """sqlock-style URL -> (engine, variant, the URL tooz's driver takes)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        die(f"bad URL '{url}': use postgresql://user:password@host:port/db or mysql://user:password@host:port/db")
    if scheme in ("postgresql", "postgres"):
        return "postgresql", "pg_advisory_lock", "postgresql://" + rest  # tooz registers only "postgresql"
    if scheme in ("mysql", "mariadb"):
        return "mysql", "GET_LOCK", "mysql://" + rest
    die(f"unknown scheme '{scheme}': tooz_bench.py measures tooz's postgresql:// and mysql:// drivers")


def redact(url):
    scheme, _, rest = url.partition("://")
    auth, at, host = rest.rpartition("@")
    if at and ":" in auth:
        auth = auth.split(":", 1)[0] + ":***"
    return f"{scheme}://{auth}{at}{host}"


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def client(c, url, names, phase, ready, results):
    from tooz import coordination
    counts = dict(cycles=0, attempts=0, busy=0, errors=0, lat_us=[], cpu_s=0.0, messages=[])
    try:
        coord = coordination.get_coordinator(url, f"bench-{os.getpid()}-{c}".encode())
        coord.start()
        locks = [coord.get_lock(n) for n in names]
    except Exception as e:  # noqa: BLE001 (whatever the driver raises)
        counts["messages"].append(f"client {c}: cannot start the coordinator: {e}")
        counts["errors"] = 1
        ready.wait()
        results.put(counts)
        return
    ready.wait()
    cpu0 = None
    i = 0
    while True:
        ph = phase.value
        if ph == STOP:
            break
        if ph == MEASURE and cpu0 is None:
            cpu0 = cpu_s()
        lock = locks[i % len(locks)]
        i += 1
        if ph == MEASURE:
            counts["attempts"] += 1
        start = time.monotonic()
        try:
            got = lock.acquire(blocking=False)
            if got:
                lock.release()
        except Exception as e:  # noqa: BLE001
            if phase.value == MEASURE:
                counts["errors"] += 1
                if len(counts["messages"]) < 5:
                    counts["messages"].append(f"client {c}: {type(e).__name__}: {e}")
            continue
        end = time.monotonic()
        if ph == MEASURE:
            counts["busy"] += not got
        if got and phase.value == MEASURE:
            counts["cycles"] += 1
            counts["lat_us"].append((end - start) * 1e6)
    if cpu0 is not None:
        counts["cpu_s"] = cpu_s() - cpu0
    try:
        coord.stop()
    except Exception:  # noqa: BLE001
        pass
    results.put(counts)


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    return round(sorted_values[max(0, math.ceil(p * len(sorted_values)) - 1)], 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="postgresql://user:pass@host:port/db or mysql://user:pass@host:port/db")
    ap.add_argument("--engine", choices=["postgresql", "mysql"], help="optional; must match the URL")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--names", choices=["distinct", "shared"], default="distinct")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    args = ap.parse_args()
    if not 1 <= args.clients <= 1024:
        die("--clients must be in 1..1024")
    if not args.seconds > 0 or args.warmup < 0:
        die("--seconds must be > 0 and --warmup >= 0")
    engine, variant, url = tooz_url(args.url)
    if args.engine and args.engine != engine:
        die(f"--engine {args.engine} does not match the URL {redact(args.url)}")
    try:
        from tooz import coordination
    except ImportError as e:
        die(f"cannot import tooz ({e}): run with Debian's /usr/bin/python3 and python3-tooz, python3-psycopg2, "
            "python3-pymysql installed")

    # Fail early and clearly when the server cannot be reached: one acquire + release in this process.
    try:
        coord = coordination.get_coordinator(url, f"bench-{os.getpid()}-check".encode())
        coord.start()
        lock = coord.get_lock(f"tooz:{os.getpid()}:check".encode())
        if lock.acquire(blocking=False):
            lock.release()
        coord.stop()
    except Exception as e:  # noqa: BLE001
        die(f"cannot use tooz's {engine} driver at {redact(args.url)}: {e} (is the server running, and the URL "
            "right? scripts/test-servers.sh start gives one)")

    pid = os.getpid()
    phase = mp.RawValue("i", WARMUP)
    ready = mp.Barrier(args.clients + 1)
    results = mp.Queue()
    procs = []
    for c in range(args.clients):
        if args.names == "shared":
            names = [f"tooz:{pid}:shared".encode()]
        else:
            names = [f"tooz:{pid}:{c}:{i}".encode() for i in range(NAMES)]
        p = mp.Process(target=client, args=(c, url, names, phase, ready, results))
        p.start()
        procs.append(p)
    try:
        ready.wait(timeout=120)  # every client has its coordinator
    except Exception:  # noqa: BLE001 (threading.BrokenBarrierError)
        for p in procs:
            p.kill()
        die("the clients did not start within 120 s")
    time.sleep(args.warmup)
    t0 = time.monotonic()
    phase.value = MEASURE
    time.sleep(args.seconds)
    phase.value = STOP
    seconds = time.monotonic() - t0
    per_client = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()

    total = dict(cycles=0, attempts=0, busy=0, errors=0, cpu_s=0.0)
    lat = []
    for r in per_client:
        for k in total:
            total[k] += r[k]
        lat += r["lat_us"]
        for m in r["messages"]:
            print(f"tooz_bench.py: {m}", file=sys.stderr)
    lat.sort()
    line = {
        "suite": "cycle", "engine": engine, "impl": "tooz", "variant": variant,
        "clients": args.clients, "names": args.names, "seconds": round(seconds, 3),
        "cycles": total["cycles"], "cycles_per_s": round(total["cycles"] / seconds, 1),
        "attempts": total["attempts"], "busy": total["busy"],
        "p50_us": percentile(lat, 0.50), "p99_us": percentile(lat, 0.99),
        "cpu_us_per_cycle": round(total["cpu_s"] * 1e6 / total["cycles"], 1) if total["cycles"] else None,
        "errors": total["errors"], "retries": 0,
    }
    print(json.dumps(line), flush=True)
    return 1 if total["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
