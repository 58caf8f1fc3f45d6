#!/usr/bin/python3
"""Turns the results of bench/run.sh into docs/benchmarks.md and docs/bench/*.png.

    /usr/bin/python3 bench/report.py [--results DIR] [--out FILE] [--charts DIR] [--notes FILE]

Reads DIR (default build/bench-results): every NAME.jsonl (a program's stdout: JSON lines in the
format of bench/results-format.md), NAME.run.json (what bench/run.sh ran, its fields, exit status
and why a run was skipped) and meta-*.json (the machine, its load, the git revision). Lines that
leave a field out or empty get it from their run's NAME.run.json (for instance the SQLite
`variant`). Writes the page FILE (default docs/benchmarks.md) and its charts into DIR (default
docs/bench, matplotlib; left out, with a note, if matplotlib is missing). The hand-written part of
the page lives in --notes (default docs/bench/notes.md) and is included verbatim.

Debian's /usr/bin/python3: the standard library, plus python3-matplotlib for the charts.
Nothing is asserted: a missed target is reported as missed, a missing suite as "not run".
"""

import argparse
import glob
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Engine lanes of the cycle grid, in page order: (engine, variant, title, file slug).
LANES = [
    ("postgresql", "", "PostgreSQL", "postgresql"),
    ("mysql", "", "MariaDB", "mariadb"),
    ("sqlite", "sync=full", "SQLite, synchronous=FULL", "sqlite-full"),
    ("sqlite", "sync=normal", "SQLite, synchronous=NORMAL", "sqlite-normal"),
]
ENGINE_TITLE = {"postgresql": "PostgreSQL", "mysql": "MariaDB", "sqlite": "SQLite", "redis": "Redis"}
CLIENTS = [1, 4, 16]
NAMES = ["distinct", "shared"]
IMPL_TITLE = {
    "floor": "floor",
    "sqlock-table": "sqlock table lock",
    "floor-rowlock": "floor, row lock",
    "sqlock-row": "sqlock row lock",
    "tooz": "tooz",
    "redis": "Redis (SET NX)",
    "sqlock-semaphore": "sqlock semaphore (4 permits)",
    "sqlock-rw-shared": "sqlock read lock (shared)",
    "sqlock-rw-exclusive": "sqlock write lock (rw exclusive)",
    "sqlock-table-nometrics": "sqlock table lock, metrics off",
}
# The coordination kinds of issue 22, each over a table locker, run by bench/run.sh at these client
# counts in the same cells as the table lock; their cost target is relative to it.
COORD_IMPLS = ["sqlock-semaphore", "sqlock-rw-shared", "sqlock-rw-exclusive"]
COORD_CLIENTS = [1, 4]
HANDOFF_TARGET = 1.2  # issue 40: a hand-off p50 at most 1.2x the floor's own one-client cycle p50
COORD_TARGET = 1.5  # a semaphore or read-lock cycle takes at most 1.5x the time of a table-lock cycle
METRICS_TARGET = 0.02  # issue 23: the metrics cost at most 2 % of an uncontended table-lock cycle
# What run.sh runs, for the rows of a suite that did not run at all.
HANDOFF_GRID = [
    ("postgresql", "", ["notify", "row-queue", "poll", "in-process"]),
    ("mysql", "", ["notify", "row-queue", "poll", "in-process"]),
    ("sqlite", "sync=full", ["notify", "poll", "in-process"]),
]
REAPER_ENGINES = ["postgresql", "mysql"]
RENEWAL_ENGINES = ["postgresql", "mysql"]
CHART_FILES = ["cycles-*.png", "ratios.png", "handoff.png", "cpu.png"]


# ------------------------------------------------------------------ reading

def num(v):
    """A finite float, or None (missing, null, text, NaN)."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def dic(v):
    """v if it is a JSON object, else an empty one (a meta file written by hand may hold anything)."""
    return v if isinstance(v, dict) else {}


def norm_engine(e):
    e = str(e or "").strip().lower()
    return {"mariadb": "mysql", "postgres": "postgresql", "pg": "postgresql", "sqlite3": "sqlite"}.get(e, e)


def normalize(rec):
    rec["suite"] = str(rec.get("suite") or "").strip().lower()
    rec["engine"] = norm_engine(rec.get("engine"))
    rec["impl"] = str(rec.get("impl") or "").strip()
    v = str(rec.get("variant") or "").strip().lower().replace(" ", "")
    v = {"synchronous=full": "sync=full", "synchronous=normal": "sync=normal"}.get(v, v)
    if rec["suite"] in ("cycle", "handoff", "renewal", "reaper") and rec["engine"] == "sqlite" and not v:
        v = "sync=full"  # sqlock's default, and what run.sh runs unless it says sync=normal
    rec["variant"] = v
    if "names" in rec:
        rec["names"] = str(rec["names"] or "").strip().lower()
    if "path" in rec:
        rec["path"] = str(rec["path"] or "").strip().lower()
    c = num(rec.get("clients"))
    if c is not None:
        rec["clients"] = int(c)
    return rec


class Data:
    def __init__(self, results):
        self.results = results
        self.runs = []  # NAME.run.json, oldest first
        self.records = []  # result lines, in run order
        self.bad = []  # (file, lines not in the format, first such line)
        self.metas = []
        self.lines_of = {}  # run name -> result lines read
        if not os.path.isdir(results):
            return
        for f in sorted(glob.glob(os.path.join(results, "meta-*.json"))):
            try:
                with open(f, encoding="utf-8") as fh:
                    m = json.load(fh)
                if isinstance(m, dict):
                    m["_file"] = os.path.basename(f)
                    self.metas.append(m)
            except (OSError, ValueError) as e:
                self.bad.append((os.path.basename(f), 1, f"unreadable meta file: {e}"))
        self.metas.sort(key=lambda m: str(m.get("started_utc", "")))
        for f in glob.glob(os.path.join(results, "*.run.json")):
            try:
                with open(f, encoding="utf-8") as fh:
                    r = json.load(fh)
                if not isinstance(r, dict):
                    raise ValueError("not an object")
            except (OSError, ValueError) as e:
                self.bad.append((os.path.basename(f), 1, f"unreadable run record: {e}"))
                continue
            r.setdefault("name", os.path.basename(f)[: -len(".run.json")])
            if not isinstance(r.get("expect"), dict):
                r["expect"] = {}
            self.runs.append(r)
        self.runs.sort(key=lambda r: (str(r.get("started_utc", "")), str(r["name"])))
        known = {r["name"] for r in self.runs}
        for r in self.runs:
            self._read(os.path.join(results, r["name"] + ".jsonl"), r)
        # Result files written by hand (no run record): read as they are.
        for f in sorted(glob.glob(os.path.join(results, "*.jsonl"))):
            name = os.path.basename(f)[: -len(".jsonl")]
            if name not in known:
                self._read(f, {"name": name, "expect": {}, "status": "ok"})

    def _read(self, path, run):
        got = []
        bad, first_bad = 0, None
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read().splitlines()
        except OSError:
            text = []
        for line in text:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except ValueError:
                bad += 1
                first_bad = first_bad or line
                continue
            for k, v in run["expect"].items():
                if rec.get(k) in (None, ""):
                    rec[k] = v
            rec["_run"] = run["name"]
            got.append(normalize(rec))
        if bad:
            self.bad.append((os.path.basename(path), bad, first_bad[:160]))
        self.lines_of[run["name"]] = got
        self.records.extend(got)

    def find(self, **want):
        """The records matching every given field (the last one read wins where it matters)."""
        out = []
        for r in self.records:
            if all(r.get(k) == v for k, v in want.items()):
                out.append(r)
        return out

    def one(self, **want):
        found = self.find(**want)
        return found[-1] if found else None

    def why(self, **want):
        """Why there is no record for these fields: a short word for a table cell."""
        for r in reversed(self.runs):  # the latest run meant to produce this cell
            e = {k: normalize_expect(k, v) for k, v in r["expect"].items()}
            if e.get("suite") != want.get("suite"):
                continue
            if all(k not in e or e[k] == v for k, v in want.items()):
                return {"skipped": "skipped", "timeout": "timed out", "failed": "failed"}.get(
                    r.get("status", ""), "no line")
        return "not run"


def normalize_expect(k, v):
    if k == "engine":
        return norm_engine(v)
    if k == "clients":
        n = num(v)
        return int(n) if n is not None else v
    if k == "variant":
        return str(v or "").strip().lower()
    return v


# ------------------------------------------------------------------ formatting

def fnum(x):
    x = num(x)
    if x is None:
        return "—"
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fus(us):
    """Microseconds, shown in the unit that reads best."""
    us = num(us)
    if us is None:
        return "—"
    if us < 10:
        return f"{us:.1f} µs"
    if us < 1000:
        return f"{us:.0f} µs"
    ms = us / 1000
    if ms < 10:
        return f"{ms:.2f} ms"
    if ms < 1000:
        return f"{ms:.1f} ms"
    return f"{ms / 1000:.2f} s"


def fms(ms):
    ms = num(ms)
    return "—" if ms is None else fus(ms * 1000)


def fratio(r):
    r = num(r)
    if r is None:
        return "—"
    return f"{r:.2f}×" if abs(r) >= 0.1 else f"{r:.2g}×"


def ratio(a, b):
    a, b = num(a), num(b)
    if a is None or b is None or b == 0:
        return None
    return a / b


def table(headers, rows, right=None):
    """A Markdown table; columns in `right` (indices) are right-aligned."""
    right = set(range(1, len(headers))) if right is None else set(right)
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |")
    return "\n".join(out)


def cell(rec, field, fmt, why):
    """A value of rec, or why there is none."""
    if rec is None:
        return why
    return fmt(rec.get(field))


def errs(*recs):
    n = sum(int(num(r.get("errors")) or 0) for r in recs if r is not None)
    return n


def err_note(*recs):
    n = errs(*recs)
    return f" ⚠ {n} error{'s' if n != 1 else ''}" if n else ""


def time_per_cycle_us(rec):
    """µs per cycle: from cycles_per_s, else the median."""
    if rec is None:
        return None
    cps = num(rec.get("cycles_per_s"))
    if cps:
        return 1e6 / cps
    return num(rec.get("p50_us"))


# ------------------------------------------------------------------ the page

class Page:
    def __init__(self, data, out_md, charts_dir, notes):
        self.d = data
        self.out_md = out_md
        self.charts_dir = charts_dir
        self.notes = notes
        self.parts = []
        self.charts = {}  # key -> file name (drawn)
        self.chart_note = None

    def add(self, *text):
        self.parts.extend(text)

    def img(self, key, alt):
        f = self.charts.get(key)
        if f:
            rel = os.path.relpath(os.path.join(self.charts_dir, f), os.path.dirname(os.path.abspath(self.out_md)))
            self.add(f"![{alt}]({rel})", "")

    # -------------------------------------------------- header, machine
    def header(self):
        d = self.d
        self.add("# Benchmarks", "")
        self.add("<!-- Generated by bench/report.py from build/bench-results: do not edit by hand. "
                 "The hand-written sections live in docs/bench/notes.md, which is included below. -->", "")
        if any(m.get("quick") for m in d.metas):
            self.add("> **Smoke test.** At least one suite below comes from `bench/run.sh --quick` (about a "
                     "second per cell, small sizes): its numbers show that the programs run, not how fast "
                     "anything is.", "")
        if not d.records and not d.runs:
            self.add("> **No results.** `build/bench-results` holds no result files: every table below says "
                     "\"not run\". Run `bash bench/run.sh`.", "")
        self.add(
            "What a lock cycle (acquire + release) costs with sqlock, next to the naive SQL a user would write "
            "by hand (the *floor*: a small C client on the engine's own client library) and next to the peers "
            "users pick instead (tooz, Redis); how fast a waiter gets a released lock; what a majority over "
            "three databases, the reaper and lease renewal cost. Benchmarks report; they assert nothing: the "
            "[Targets](#targets) table says which goals are met and which are missed.", "")
        self.add("## How to reproduce", "")
        self.add("```sh",
                 "bash bench/run.sh                 # everything, from scratch: ~30 minutes on 2 cores",
                 "bash bench/run.sh --quick         # a smoke test (1 s per cell, small sizes): numbers mean nothing",
                 "bash bench/run.sh --only handoff majority   # rerun some suites; the others' results are kept",
                 "/usr/bin/python3 bench/report.py  # this page again from build/bench-results",
                 "```", "")
        self.add(
            "`bench/run.sh` installs what is missing (`scripts/deps.sh --servers --bench`, as root), builds "
            "a Release build in `build/bench-release`, starts private servers on free loopback ports "
            "(PostgreSQL 15 and MariaDB through `scripts/test-servers.sh`, a Redis of its own, a SQLite file "
            "under `/tmp`), runs every program of the grid and writes their JSON lines "
            "(`bench/results-format.md`) to `build/bench-results/`, stops the servers, and regenerates this "
            "page and `docs/bench/*.png`. Each grid cell runs its programs one after the other; every other "
            "cell runs them in reverse order, so that drift hits the floor and sqlock alike.", "")
        self.machine()

    def machine(self):
        d = self.d
        self.add("## The machine and its load", "")
        if not d.metas:
            self.add("Not recorded (no `meta-*.json` in the results).", "")
            return
        m = d.metas[-1]
        mach = dic(m.get("machine"))
        srv = {}
        for mm in d.metas:  # the latest facts a run recorded win
            srv.update({k: v for k, v in dic(mm.get("servers")).items() if v not in (None, "")})
        build = dic(m.get("build"))
        targets = {}  # each program as the latest run that needed it left it
        for mm in d.metas:
            for t, st in dic(mm.get("targets")).items():
                if st != "not needed" or t not in targets:
                    targets[t] = st
        rows = [
            ("CPU", f"{mach.get('cpu_model', '?')}, {mach.get('nproc', '?')} cores"),
            ("memory", mach.get("memory", "?")),
            ("system", f"{mach.get('os', '?')}, Linux {mach.get('kernel', '?')}"),
            ("build", f"{build.get('type', '?')} ({build.get('compiler', '?')}), `{build.get('dir', '?')}`"),
            ("programs", ", ".join(f"`{t}` {st}" for t, st in targets.items()) or "?"),
            ("PostgreSQL", f"{srv.get('postgresql', '?')}: fsync={srv.get('postgresql_fsync', '?')}, "
                           f"synchronous_commit={srv.get('postgresql_synchronous_commit', '?')}"),
            ("MariaDB", f"{srv.get('mariadb', '?')}: innodb_flush_log_at_trx_commit="
                        f"{srv.get('mariadb_innodb_flush_log_at_trx_commit', '?')}, no binary log"),
            ("SQLite", f"{srv.get('sqlite', '?')}, WAL, a file on {srv.get('sqlite_filesystem', '?')}; "
                       "synchronous=FULL and =NORMAL are both measured"),
            ("Redis", f"{srv.get('redis', 'not run')}: appendonly={srv.get('redis_appendonly', '?')}, "
                      f"save=\"{srv.get('redis_save', '?')}\""),
        ]
        self.add(table(["", ""], rows, right=[]), "")
        self.add(
            "All servers run on this machine, over loopback, and commit durably (PostgreSQL and MariaDB flush "
            "their log on every commit, SQLite with synchronous=FULL syncs it). **Redis does not fsync**: it "
            "runs as a user would start it, with its defaults (no append-only file; RDB snapshots every few "
            "minutes at best), so a Redis lock is answered from memory and is lost with the process. The "
            "comparison with Redis is one of speed, not of the same guarantee. CPU µs/cycle is the client "
            "process's own user + system time (getrusage), not the server's.", "")
        inv = []
        busy = False
        n = num(mach.get("nproc")) or 0
        for mm in d.metas:
            ld = dic(mm.get("load"))
            for v in ld.values():
                for x in str(v).split():
                    if n and (num(x) or 0) > 0.75 * n:
                        busy = True
            git = dic(mm.get("git"))
            rev = f"`{str(git.get('rev', '?'))[:10]}`" + (" + uncommitted changes" if git.get("dirty") == "yes" else "")
            inv.append([
                str(mm.get("started_utc", "?")).replace("T", " ").replace("Z", " UTC"),
                ", ".join(str(x) for x in mm.get("suites") or [] if isinstance(mm.get("suites"), list)) or "?",
                ("quick" if mm.get("quick") else "full") + (f", {mm.get('cell_seconds', '?')} s per cell"
                                                             if "cycle" in (mm.get("suites") or []) else ""),
                f"{rev} ({git.get('branch', '?')})",
                ld.get("before", "?"), ld.get("at_start", "?"), ld.get("after", "?") or "(did not finish)",
                "interrupted" if mm.get("finished") is False else
                (f"{num(mm.get('elapsed_s')) / 60:.1f} min" if num(mm.get("elapsed_s")) else "?"),
            ])
        self.add("Runs of `bench/run.sh` that these results come from (load averages over 1, 5 and 15 minutes: "
                 "before the build, when the measurements started, at the end); where a suite ran more than once, "
                 "the latest run's results are the ones shown:", "")
        self.add(table(["started", "suites", "durations", "git", "load before", "load at start",
                        "load after", "took"], inv, right=[]), "")
        l1 = [num(r.get("load1_after")) for r in d.runs if num(r.get("load1_after")) is not None]
        if l1:
            self.add(f"1-minute load average after each program: {min(l1):.2f} to {max(l1):.2f} "
                     f"(median {sorted(l1)[len(l1) // 2]:.2f}) on {mach.get('nproc', '?')} cores.", "")
            if n and max(l1) > n:
                busy = True
        if busy:
            self.add("**The machine was busy during (part of) the run**: the load average went above the core "
                     "count's three quarters. Read the ratios and the orders of magnitude, not the digits.", "")

    # -------------------------------------------------- (a), (b): sqlock against the floor
    def versus_floor(self, title, anchor_note, floor_impl, sq_impl, lanes):
        d = self.d
        self.add(title, "")
        self.add(anchor_note, "")
        rows = []
        for engine, variant, lane_title, _ in lanes:
            for c in self.clients_of(engine, variant, [floor_impl, sq_impl]):
                for n in NAMES:
                    key = dict(suite="cycle", engine=engine, variant=variant, clients=c, names=n)
                    f = d.one(impl=floor_impl, **key)
                    s = d.one(impl=sq_impl, **key)
                    wf, ws = d.why(impl=floor_impl, **key), d.why(impl=sq_impl, **key)
                    cpu_f, cpu_s = (num(r.get("cpu_us_per_cycle")) if r else None for r in (f, s))
                    on_top = None if cpu_f is None or cpu_s is None else cpu_s - cpu_f
                    rows.append([
                        lane_title, c, n,
                        cell(f, "cycles_per_s", fnum, wf), cell(s, "cycles_per_s", fnum, ws),
                        fratio(ratio(s and s.get("cycles_per_s"), f and f.get("cycles_per_s"))),
                        f"{fus(f.get('p50_us'))} / {fus(f.get('p99_us'))}" if f else "—",
                        f"{fus(s.get('p50_us'))} / {fus(s.get('p99_us'))}" if s else "—",
                        cell(f, "cpu_us_per_cycle", fnum, "—"), cell(s, "cpu_us_per_cycle", fnum, "—"),
                        "—" if on_top is None else f"{on_top:+.1f}",
                        f"{errs(f)} / {errs(s)}" if (f or s) else "—",
                    ])
        self.add(table(["engine", "clients", "names", "floor cycles/s", "sqlock cycles/s", "sqlock / floor",
                        "floor p50 / p99", "sqlock p50 / p99", "floor CPU µs/cycle", "sqlock CPU µs/cycle",
                        "sqlock's CPU on top, µs", "errors (floor / sqlock)"], rows, right=range(3, 12)), "")

    def clients_of(self, engine, variant, impls):
        cs = set(CLIENTS)
        for impl in impls:
            for r in self.d.find(suite="cycle", engine=engine, variant=variant, impl=impl):
                if isinstance(r.get("clients"), int):
                    cs.add(r["clients"])
        return sorted(cs)

    def cycles(self):
        self.add("## Lock cycles", "")
        self.add("One cycle = acquire + release of a lock; `clients` threads, each with its own connection "
                 "(sqlock: one `store` with a pool of at least `clients`), for a few seconds. With `distinct` "
                 "names every client has its own names and the lock is always free; with `shared` all clients "
                 "want the same one name, and cycles/s counts only the successful ones. Latencies are of one "
                 "successful cycle.", "")
        self.versus_floor(
            "### Table lock against the naive floor", "`floor`: `sqlock-floor --mode insert`, the INSERT "
            "to acquire and DELETE to release that a user would write by hand, through the engine's C client; "
            "`sqlock`: `sqlock::table_locker` (`sqlock-grid cycle --lock table`). Ratio > 1: sqlock is faster.",
            "floor", "sqlock-table", LANES)
        for _, _, lane_title, slug in LANES:
            self.img("cycles-" + slug, f"cycles/s by clients, {lane_title}")
        self.img("cpu", "CPU µs per cycle, floor against sqlock")
        self.versus_floor(
            "### Row lock against `BEGIN; SELECT … FOR UPDATE; COMMIT`", "`floor-rowlock`: "
            "`sqlock-floor --mode rowlock`; `sqlock`: `sqlock::row_locker` (`sqlock-grid cycle --lock row`). "
            "PostgreSQL and MariaDB only (SQLite has no row locks).",
            "floor-rowlock", "sqlock-row", LANES[:2])
        self.img("ratios", "sqlock / floor by clients")
        self.peers()
        self.coordination()
        self.metrics_overhead()

    def peers(self):
        d = self.d
        self.add("### Against the peers: tooz and Redis", "")
        self.add("`tooz`: OpenStack's coordination library (`bench/peers/tooz_bench.py`, its PostgreSQL and MySQL "
                 "drivers); `redis`: `SET NX PX` + a compare-and-delete script through hiredis "
                 "(`sqlock-peer-redis`), one Redis server (not durable, see above) next to every engine. "
                 "Ratios are sqlock's table lock cycles/s over the peer's: > 1, sqlock is faster.", "")
        rows = []
        for engine, variant, lane_title, _ in LANES:
            for c in self.clients_of(engine, variant, ["sqlock-table", "tooz"]):
                for n in NAMES:
                    key = dict(suite="cycle", clients=c, names=n)
                    s = d.one(impl="sqlock-table", engine=engine, variant=variant, **key)
                    # tooz lines name the driver's mechanism (pg_advisory_lock, GET_LOCK) as their variant
                    t = d.one(impl="tooz", engine=engine, **key) if engine != "sqlite" else None
                    rd = d.one(impl="redis", engine="redis", **key)
                    ws = d.why(impl="sqlock-table", engine=engine, variant=variant, **key)
                    wt = "n/a" if engine == "sqlite" else d.why(impl="tooz", engine=engine, **key)
                    wr = d.why(impl="redis", engine="redis", **key)
                    sc = s and s.get("cycles_per_s")
                    rows.append([
                        lane_title, c, n, cell(s, "cycles_per_s", fnum, ws),
                        cell(t, "cycles_per_s", fnum, wt) + err_note(t),
                        fratio(ratio(sc, t and t.get("cycles_per_s"))),
                        cell(rd, "cycles_per_s", fnum, wr) + err_note(rd),
                        fratio(ratio(sc, rd and rd.get("cycles_per_s"))),
                    ])
        self.add(table(["engine", "clients", "names", "sqlock cycles/s", "tooz cycles/s", "sqlock / tooz",
                        "Redis cycles/s", "sqlock / Redis"], rows, right=range(3, 8)), "")

    def coord_cost(self, impl, engine, variant, c, names="distinct"):
        """Time per cycle of `impl` over that of the table lock in the same cell: table cycles/s / impl's."""
        key = dict(suite="cycle", engine=engine, variant=variant, clients=c, names=names)
        s, t = self.d.one(impl=impl, **key), self.d.one(impl="sqlock-table", **key)
        return ratio(t and t.get("cycles_per_s"), s and s.get("cycles_per_s")), s, t

    def coordination(self):
        d = self.d
        self.add("### Semaphore and read-write lock against the table lock", "")
        self.add("The coordination kinds (`docs/coordination.md`), each over a table locker and measured in the "
                 "same cells as the table lock (`sqlock-grid cycle --lock semaphore --permits 4`, `--lock "
                 "rw-shared`, `--lock rw-exclusive`): `try_acquire` + `release` of a permit of a 4-permit "
                 "semaphore, of a shared (read) lease, and of the exclusive (write) lease of a read-write lock. "
                 "*cost* is time per cycle over the table lock's in the same cell (table cycles/s ÷ its "
                 f"cycles/s): the target is ≤ {COORD_TARGET}× for the semaphore and the read lock. With `shared` "
                 "names up to 4 clients hold a permit of the one name at once, and readers share it, where only one "
                 "client holds the table lock: compare those rows as throughput, not as cost.", "")
        rows = []
        for engine, variant, lane_title, _ in LANES:
            cs = sorted(set(COORD_CLIENTS) | {r["clients"] for i in COORD_IMPLS for r in d.find(
                suite="cycle", engine=engine, variant=variant, impl=i) if isinstance(r.get("clients"), int)})
            for c in cs:
                for n in NAMES:
                    key = dict(suite="cycle", engine=engine, variant=variant, clients=c, names=n)
                    t = d.one(impl="sqlock-table", **key)
                    row = [lane_title, c, n, cell(t, "cycles_per_s", fnum, d.why(impl="sqlock-table", **key))]
                    recs = [t]
                    for impl in COORD_IMPLS:
                        s = d.one(impl=impl, **key)
                        recs.append(s)
                        r, _, _ = self.coord_cost(impl, engine, variant, c, n)
                        row += [cell(s, "cycles_per_s", fnum, d.why(impl=impl, **key))
                                + (f" ({fus(s.get('p50_us'))})" if s else ""), fratio(r)]
                    row.append(fnum(errs(*recs)) if any(recs) else "—")
                    rows.append(row)
        self.add(table(["engine", "clients", "names", "table lock cycles/s", "semaphore cycles/s (p50)", "cost",
                        "read lock cycles/s (p50)", "cost", "write lock cycles/s (p50)", "cost", "errors"],
                       rows, right=range(3, 11)), "")

    def metrics_overhead(self):
        d = self.d
        self.add("### The metrics' cost", "")
        self.add("The table lock with the process's metrics (the default: `sqlock-table`) and with metrics that "
                 "record nothing (`sqlock-grid cycle --metrics off`: `sqlock-table-nometrics`), in the same cells. "
                 "*cost* is the time per cycle with metrics over that without, less one (off cycles/s ÷ on "
                 f"cycles/s − 1): the target is ≤ {METRICS_TARGET:.0%} uncontended (distinct names). Two runs of "
                 "one cell differ by more than that, so read the column across the rows, not cell by cell.", "")
        rows = []
        for engine, variant, lane_title, _ in LANES:
            for c in COORD_CLIENTS:
                key = dict(suite="cycle", engine=engine, variant=variant, clients=c, names="distinct")
                on, off = d.one(impl="sqlock-table", **key), d.one(impl="sqlock-table-nometrics", **key)
                if not on and not off:
                    continue
                r = ratio(off and off.get("cycles_per_s"), on and on.get("cycles_per_s"))
                rows.append([lane_title, c, cell(on, "cycles_per_s", fnum, d.why(impl="sqlock-table", **key)),
                             cell(off, "cycles_per_s", fnum, d.why(impl="sqlock-table-nometrics", **key)),
                             f"{(r - 1):+.1%}" if r else "—"])
        if rows:
            self.add(table(["engine", "clients", "metrics on cycles/s", "metrics off cycles/s", "cost"], rows,
                           right=range(2, 5)), "")
        else:
            self.add("*Not run in this run.*", "")
        # The recording alone (sqlock-metrics-bench), over the fastest uncontended cycle of this run.
        rec = {(r.get("variant"), r.get("clients")): r for r in d.find(suite="metrics")}
        if not rec:
            return
        def fastest(c):
            return max((num(r.get("cycles_per_s")) or 0 for r in d.find(
                suite="cycle", impl="sqlock-table", names="distinct", clients=c)), default=0)

        self.add("The recording alone, without a database (`sqlock-metrics-bench`: what one granted "
                 "`try_acquire` + `release` records, the series' lookup, four clock reads, two histograms and the "
                 "counters; the best of five runs; with 4 threads on one series, as 4 clients of one locker), and "
                 "its share of the time one client spends per cycle in the fastest uncontended table-lock cell of "
                 "this run at that many clients (clients ÷ cycles/s):", "")
        rows = []
        for (variant, c), r in sorted(rec.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
            ns, best = num(r.get("ns_per_cycle")), fastest(c)
            share = ns * 1e-9 * best / c if ns is not None and best and c else None
            rows.append([f"`{variant}`", c, f"{ns:.0f} ns" if ns is not None else "—",
                         fnum(best) if best else "—", f"{share:.2%}" if share is not None else "—"])
        self.add(table(["allow-list", "threads", "recording per cycle", "fastest cell, cycles/s", "share"], rows,
                       right=range(1, 5)), "")

    # -------------------------------------------------- (d) handoff
    def handoff_rows(self):
        d = self.d
        keys = []
        for engine, variant, paths in HANDOFF_GRID:
            keys += [(engine, variant, p) for p in paths]
        for r in d.find(suite="handoff"):
            k = (r["engine"], r["variant"], r.get("path", ""))
            if k not in keys:
                keys.append(k)
        return [(k, d.one(suite="handoff", engine=k[0], variant=k[1], path=k[2])) for k in keys]

    def handoff(self):
        d = self.d
        self.add("## Hand-off latency", "")
        self.add("A holder releases while a waiter is parked in `acquire()`; the time from the release returning "
                 "to the waiter holding the lock (`sqlock-grid handoff`). Paths: `notify` (PostgreSQL "
                 "LISTEN/NOTIFY, the waiter in another `store` as another process would be), `row-queue` (a "
                 "row lock's waiter queued on the row itself), `poll` (the default backoff), `in-process` "
                 "(waiter and holder on one `store`: the release wakes the waiter directly).", "")
        rows = []
        for (engine, variant, path), r in self.handoff_rows():
            w = d.why(suite="handoff", engine=engine, path=path)
            et = ENGINE_TITLE.get(engine, engine) + (f" ({variant})" if variant else "")
            rows.append([et, f"`{path}`", cell(r, "samples", fnum, w), cell(r, "p50_us", fus, "—"),
                         cell(r, "p99_us", fus, "—"), cell(r, "max_us", fus, "—"), cell(r, "errors", fnum, "—")])
        self.add(table(["engine", "path", "samples", "p50", "p99", "max", "errors"], rows, right=range(2, 7)), "")
        self.img("handoff", "hand-off p50 and p99 by path")

    # -------------------------------------------------- (e) majority
    def majority_sets(self):
        recs = self.d.find(suite="majority")

        def members(r):
            m = num(r.get("members"))
            if m is not None:
                return int(m)
            return 3 if "majority" in r.get("impl", "") else 1

        one = [r for r in recs if members(r) == 1]
        direct = [r for r in one if "proxy" not in r["variant"]]
        proxy = [r for r in one if "proxy" in r["variant"]]
        multi = [r for r in recs if members(r) > 1]
        healthy = [r for r in multi if r["variant"] in ("", "healthy", "all-up", "all-members")]
        stopped = [r for r in multi if "stop" in r["variant"] or "down" in r["variant"]]
        return recs, members, (direct or one), proxy, healthy, stopped

    def majority(self):
        d = self.d
        self.add("## Majority over three databases", "")
        self.add("`sqlock-majority-bench`: try_acquire + release cycles of a `majority_locker` over three members "
                 "(two PostgreSQL databases and MariaDB, each behind a fault proxy) next to a table lock on one "
                 "member, healthy and with one member stopped. Time per cycle = 1 / cycles/s.", "")
        recs, members, base, proxy, _, _ = self.majority_sets()
        if not recs:
            self.add(f"**{d.why(suite='majority').capitalize()}.**", "")
            return
        b = time_per_cycle_us(base[-1]) if base else None
        bp = time_per_cycle_us(proxy[-1]) if proxy else None
        rows = []
        for r in recs:
            t = time_per_cycle_us(r)
            rows.append([members(r), f"`{r['impl'] or '?'}`", f"`{r['variant']}`" if r["variant"] else "",
                         fnum(r.get("cycles_per_s")), fus(t), fus(r.get("p50_us")), fus(r.get("p99_us")),
                         fratio(ratio(t, b)), fratio(ratio(t, bp)) if bp else "—", fnum(r.get("errors"))])
        self.add(table(["members", "impl", "variant", "cycles/s", "time per cycle", "p50", "p99",
                        "× one member", "× one member through its proxy", "errors"], rows, right=range(3, 10)), "")

    # -------------------------------------------------- (f) reaper
    def reaper(self):
        d = self.d
        self.add("## Reaper", "")
        self.add("`sqlock-reaper-bench`: one reaper pass purges a backlog of expired rows, alone (`idle`) and while "
                 "4 threads acquire and release other names (`live-traffic`); the traffic's acquire p99 during "
                 "the purge against the same traffic without the reaper (`baseline`).", "")
        rows = []
        engines = list(REAPER_ENGINES) + sorted({r["engine"] for r in d.find(suite="reaper")} - set(REAPER_ENGINES))
        for e in engines:
            recs = d.find(suite="reaper", engine=e)
            if not recs:
                rows.append([ENGINE_TITLE.get(e, e), d.why(suite="reaper", engine=e)] + ["—"] * 7)
                continue
            for r in recs:
                rows.append([ENGINE_TITLE.get(e, e), f"`{r['variant'] or '?'}`", fnum(r.get("rows")),
                             fnum(r.get("rows_per_s")), fus(r.get("acquire_p50_us")), fus(r.get("acquire_p99_us")),
                             fus(r.get("baseline_p99_us")),
                             fratio(ratio(r.get("acquire_p99_us"), r.get("baseline_p99_us"))), fnum(r.get("errors"))])
        self.add(table(["engine", "variant", "rows", "rows/s", "acquire p50", "acquire p99", "baseline p99",
                        "p99 / baseline", "errors"], rows, right=range(2, 9)), "")

    # -------------------------------------------------- (g) renewal
    def renewal(self):
        d = self.d
        self.add("## Lease renewal", "")
        self.add("`sqlock-grid renewal`: many leases held at once, renewed by the locker's renewal thread; how "
                 "late each renewal ran after it was due, and how many leases were lost.", "")
        rows = []
        engines = list(RENEWAL_ENGINES) + sorted({r["engine"] for r in d.find(suite="renewal")} - set(RENEWAL_ENGINES))
        for e in engines:
            recs = d.find(suite="renewal", engine=e)
            if not recs:
                rows.append([ENGINE_TITLE.get(e, e), d.why(suite="renewal", engine=e)] + ["—"] * 7)
                continue
            for r in recs:
                rows.append([ENGINE_TITLE.get(e, e), fnum(r.get("leases")), fms(r.get("ttl_ms")),
                             fnum(r.get("renewals")), fms(r.get("lag_p50_ms")), fms(r.get("lag_p99_ms")),
                             fms(r.get("lag_max_ms")), fnum(r.get("lost")), fnum(r.get("errors"))])
        self.add(table(["engine", "leases", "ttl", "renewals", "lag p50", "lag p99", "lag max", "lost", "errors"],
                       rows, right=range(1, 9)), "")

    # -------------------------------------------------- targets
    def cycle_ratio(self, impl, floor_impl, engine, variant, c, names="distinct"):
        key = dict(suite="cycle", engine=engine, variant=variant, clients=c, names=names)
        base_key = dict(key)
        if floor_impl == "tooz":  # tooz lines name the driver's mechanism as their variant
            base_key.pop("variant")
        s, f = self.d.one(impl=impl, **key), self.d.one(impl=floor_impl, **base_key)
        return ratio(s and s.get("cycles_per_s"), f and f.get("cycles_per_s")), s, f

    def targets(self):
        d = self.d
        rows = []

        def verdict(ok, measured, *recs):
            if ok is None:
                return [measured, "not run"]
            return [measured + err_note(*recs), "met ✓" if ok else "**missed ✗**"]

        def at_least(target, where, r, recs, want):
            rows.append([target, where] + verdict(None if r is None else r >= want, fratio(r), *recs))

        def every_client(target, where, impl, base, engine, variant, want):
            got, recs, missing = [], [], []
            for c in CLIENTS:
                r, s, f = self.cycle_ratio(impl, base, engine, variant, c)
                recs += [s, f]
                if r is None:
                    missing.append(str(c))
                else:
                    got.append((c, r))
            if not got:
                rows.append([target, where, "—", "not run"])
                return
            worst = min(got, key=lambda x: x[1])
            detail = " · ".join(f"{c}: {fratio(r)}" for c, r in got)
            measured = f"min {fratio(worst[1])} ({detail})"
            if missing:
                measured += f"; not run at {', '.join(missing)} clients"
            rows.append([target, where] + verdict(worst[1] >= want, measured, *recs))

        r, s, f = self.cycle_ratio("sqlock-table", "floor", "postgresql", "", 1)
        at_least("table lock ≥ 1.1× the floor", "PostgreSQL, 1 client", r, [s, f], 1.1)
        r, s, f = self.cycle_ratio("sqlock-table", "floor", "postgresql", "", 4)
        at_least("table lock ≥ 1.4× the floor", "PostgreSQL, 4 clients", r, [s, f], 1.4)
        every_client("table lock ≥ 0.9× the floor", "MariaDB, 1/4/16 clients", "sqlock-table", "floor",
                     "mysql", "", 0.9)
        for _, variant, title, _ in LANES[2:]:
            want = 1.2 if variant == "sync=full" else 0.9  # issue 40: FULL stays >= 1.2x, NORMAL reaches 0.9x
            every_client(f"table lock ≥ {want}× the floor", f"{title}, 1/4/16 clients", "sqlock-table", "floor",
                         "sqlite", variant, want)
        for engine, _, title, _ in LANES[:2]:
            want = 0.9 if engine == "postgresql" else 0.5  # MariaDB's floor flushes nothing; a durable token must
            every_client(f"row lock ≥ {want}× `BEGIN; SELECT … FOR UPDATE; COMMIT`", f"{title}, 1/4/16 clients",
                         "sqlock-row", "floor-rowlock", engine, "", want)

        def handoff_target(where, engine, path, floor_impl):
            # Issue 40: against the disk of the hour, the floor's own one-client cycle p50 of the same run (the
            # plain table-lock statements for a table-lock path, `BEGIN; SELECT ... FOR UPDATE; COMMIT` for the row
            # queue), with the absolute times beside it.
            h = d.one(suite="handoff", engine=engine, path=path)
            f = d.one(suite="cycle", engine=engine, variant="", impl=floor_impl, clients=1, names="distinct")
            p50, fp50 = (num(h.get("p50_us")) if h else None), (num(f.get("p50_us")) if f else None)
            r = ratio(p50, fp50)
            measured = "—" if r is None else f"{fratio(r)} (p50 {fus(p50)} against the {floor_impl} cycle's {fus(fp50)})"
            rows.append([f"hand-off p50 ≤ {HANDOFF_TARGET}× the floor's one-client cycle p50", where]
                        + verdict(None if r is None else r <= HANDOFF_TARGET, measured, h, f))

        handoff_target("PostgreSQL, `notify`", "postgresql", "notify", "floor")
        handoff_target("PostgreSQL, `row-queue`", "postgresql", "row-queue", "floor-rowlock")
        handoff_target("MariaDB, `row-queue`", "mysql", "row-queue", "floor-rowlock")
        handoff_target("MariaDB, `notify` (the cross-process bell)", "mysql", "notify", "floor")
        every_client("≥ 1× tooz", "MariaDB, 1/4/16 clients", "sqlock-table", "tooz", "mysql", "", 1.0)

        for impl, what in (("sqlock-semaphore", "semaphore"), ("sqlock-rw-shared", "read-lock")):
            for engine, variant, title, _ in LANES:
                got, recs, missing = [], [], []
                for c in COORD_CLIENTS:
                    r, s, t = self.coord_cost(impl, engine, variant, c)
                    recs += [s, t]
                    if r is None:
                        missing.append(str(c))
                    else:
                        got.append((c, r))
                target = f"a {what} cycle ≤ {COORD_TARGET}× a table-lock cycle (time)"
                where = f"{title}, {'/'.join(str(c) for c in COORD_CLIENTS)} clients"
                if not got:
                    rows.append([target, where, "—", "not run"])
                    continue
                worst = max(got, key=lambda x: x[1])
                measured = f"max {fratio(worst[1])} (" + " · ".join(f"{c}: {fratio(r)}" for c, r in got) + ")"
                if missing:
                    measured += f"; not run at {', '.join(missing)} clients"
                rows.append([target, where] + verdict(worst[1] <= COORD_TARGET, measured, *recs))

        _, _, base, _, healthy, stopped = self.majority_sets()
        b = time_per_cycle_us(base[-1]) if base else None
        h = time_per_cycle_us(healthy[-1]) if healthy else None
        r = ratio(h, b)
        measured = "—" if r is None else f"{fratio(r)} ({fus(h)} against {fus(b)} per cycle on one member)"
        rows.append(["majority ≤ 2× one member (time per cycle)", "3 members, healthy"]
                    + verdict(None if r is None else r <= 2.0, measured, *(healthy[-1:] + base[-1:])))
        t = time_per_cycle_us(stopped[-1]) if stopped else None
        r = ratio(t, h)
        measured = "—" if r is None else f"{fratio(r)} ({fus(t)} against {fus(h)} per cycle, all members up)"
        rows.append(["majority with one member stopped ≤ 1.2× the healthy majority (time per cycle)",
                     "3 members, one stopped"]
                    + verdict(None if r is None else r <= 1.2, measured, *(stopped[-1:] + healthy[-1:])))

        for e in sorted({r["engine"] for r in d.find(suite="reaper")} | {"postgresql"},
                        key=lambda e: (e != "postgresql", e)):
            live = d.one(suite="reaper", engine=e, variant="live-traffic")
            idle = d.one(suite="reaper", engine=e, variant="idle")
            t = ENGINE_TITLE.get(e, e)
            rate = num(live.get("rows_per_s")) if live else None
            m = f"{fnum(rate)} rows/s" if rate is not None else "—"
            if idle and num(idle.get("rows_per_s")) is not None:
                m += f" (idle: {fnum(idle.get('rows_per_s'))} rows/s)"
            if e == "mysql":  # issue 21: MariaDB's goal is the idle rate
                rate = num(idle.get("rows_per_s")) if idle else None
                m = f"{fnum(rate)} rows/s" if rate is not None else "—"
                if live and num(live.get("rows_per_s")) is not None:
                    m += f" (with live traffic: {fnum(live.get('rows_per_s'))} rows/s)"
                rows.append(["reaper ≥ 100,000 rows/s idle", t]
                            + verdict(None if rate is None else rate >= 100000, m, idle, live))
            else:
                rows.append(["reaper ≥ 100,000 rows/s with live traffic", t]
                            + verdict(None if rate is None else rate >= 100000, m, live, idle))
            r = ratio(live and live.get("acquire_p99_us"), live and live.get("baseline_p99_us"))
            m = "—" if r is None else (f"{fratio(r)} ({fus(live.get('acquire_p99_us'))} against "
                                       f"{fus(live.get('baseline_p99_us'))})")
            rows.append(["live acquire p99 during the purge ≤ 2× baseline", t]
                        + verdict(None if r is None else r <= 2.0, m, live))

        self.add("## Targets", "")
        self.add("The goals of issue 40, on `distinct` names unless said otherwise, checked against the numbers "
                 "above. Where the issue names no client count, every client count measured must meet the goal "
                 "(the smallest ratio is shown; for a cost, the largest). A missed goal stays on this page as missed; \"not run\" means "
                 "the numbers are missing (see [Runs without results](#runs-without-results)).", "")
        self.add(table(["target", "where", "measured", "status"], rows, right=[]), "")
        met = sum(1 for r in rows if r[3].startswith("met"))
        missed = sum(1 for r in rows if "missed" in r[3])
        self.add(f"{met} met, {missed} missed, {len(rows) - met - missed} not run.", "")

    # -------------------------------------------------- notes, runs
    def notes_section(self):
        if self.notes and os.path.isfile(self.notes):
            with open(self.notes, encoding="utf-8") as fh:
                text = fh.read().rstrip("\n")
            rel = os.path.relpath(self.notes, ROOT)
            self.add(f"<!-- From {rel} (hand-written; bench/report.py includes it verbatim). -->", "", text, "")
        else:
            self.add("## Where the time goes", "",
                     "*To be written by hand in `docs/bench/notes.md`, which this page includes verbatim.*", "")

    def runs_section(self):
        d = self.d
        self.add("## Runs without results", "")
        rows = []
        for r in d.runs:
            st = r.get("status", "?")
            if st == "ok" and d.lines_of.get(r["name"]):
                continue
            reason = r.get("reason") or ("no result line" if st == "ok" else "")
            rows.append([f"`{r['name']}`", st, reason])
        if rows:
            self.add("Each of these cells shows up above as \"skipped\", \"failed\", \"timed out\" or \"not run\"; "
                     "the program's stderr is in `build/bench-results/NAME.err`.", "")
            self.add(table(["run", "status", "why"], rows, right=[]), "")
        elif d.runs:
            self.add("None: every program that was run printed its results.", "")
        else:
            self.add("No run of bench/run.sh is recorded." + (" The results above come from files without a run record." if d.records else " Nothing was run."), "")
        if d.bad:
            self.add("Lines that are not in the format of `bench/results-format.md` (ignored):", "")
            self.add(table(["file", "lines", "first one"], [[f"`{f}`", n, f"`{x}`"] for f, n, x in d.bad],
                           right=[1]), "")
        with_errors = [r for r in d.records if (num(r.get("errors")) or 0) > 0]
        if with_errors:
            self.add("Results with errors (the caller saw exceptions or failed statements; 0 is the only good "
                     "value):", "")
            self.add(table(["run", "suite", "impl", "errors"],
                           [[f"`{r['_run']}`", r["suite"], r.get("impl", ""), fnum(r.get("errors"))]
                            for r in with_errors], right=[3]), "")
        if self.chart_note:
            self.add(self.chart_note, "")
        cmds = [(r["name"], r.get("command", "")) for r in d.runs if r.get("command")]
        if cmds:
            self.add("<details><summary>Every command that was run</summary>", "",
                     "Run from the repository's top directory. `$SQLOCK_TEST_PG_URL` and `$SQLOCK_TEST_MYSQL_URL` "
                     "are the private servers that bench/run.sh starts (scripts/test-servers.sh), `$SQLITE_URL` a "
                     "fresh SQLite file in a temporary directory, `$REDIS_URL` its Redis.", "", "```")
            self.add(*(f"{n}: {portable_command(c)}" for n, c in cmds))
            self.add("```", "", "</details>", "")

    def render(self):
        self.header()
        self.cycles()
        self.handoff()
        self.majority()
        self.reaper()
        self.renewal()
        self.targets()
        self.notes_section()
        self.runs_section()
        return "\n".join(self.parts).rstrip("\n") + "\n"


# What one machine's run put into its command lines, and what the page says instead: the page is
# read in other checkouts, where those paths, ports and temporary files mean nothing.
PORTABLE = [
    # bench/run.sh's SQLite file (mktemp -d /tmp/sqlock-bench.XXXXXX), with any query (printf %q escapes its '?')
    (re.compile(r"sqlite:/tmp/sqlock-bench\.[^/\s]+/bench\.db((?:\\?\?)\S*)?"),
     lambda m: '"$SQLITE_URL' + (m.group(1) or "").replace("\\?", "?") + '"'),
    (re.compile(r"postgres(?:ql)?://sqlock:sqlock@127\.0\.0\.1:\d+/sqlock\b"), lambda m: "$SQLOCK_TEST_PG_URL"),
    (re.compile(r"(?:mysql|mariadb)://sqlock:sqlock@127\.0\.0\.1:\d+/sqlock\b"), lambda m: "$SQLOCK_TEST_MYSQL_URL"),
    (re.compile(r"redis://127\.0\.0\.1:\d+"), lambda m: "$REDIS_URL"),
    # A checkout's absolute path before what run.sh builds and runs (another checkout's, too).
    (re.compile(r"(?<![\w.$])/(?:[^\s/]+/)*?(?=(?:build|bench)/)"), lambda m: ""),
]


def portable_command(command):
    """A command line of a run as the page shows it: paths relative to the repository, the servers
    and the SQLite file by the names bench/run.sh gives them."""
    c = command.strip().replace(ROOT + os.sep, "")
    for pattern, repl in PORTABLE:
        c = pattern.sub(repl, c)
    return c


# ------------------------------------------------------------------ charts

def draw_charts(page):
    d = page.d
    out = page.charts_dir
    os.makedirs(out, exist_ok=True)
    for pat in CHART_FILES:  # our own charts only: a chart with no data this time must not linger
        for f in glob.glob(os.path.join(out, pat)):
            os.remove(f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        page.chart_note = ("No charts: matplotlib is missing for this Python (`apt-get install "
                           "python3-matplotlib`, or `bash scripts/deps.sh --bench`).")
        return
    plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    style = {
        "floor": dict(color="#777777", marker="s"),
        "sqlock-table": dict(color="#1f77b4", marker="o"),
        "floor-rowlock": dict(color="#bbbbbb", marker="s", linestyle="--"),
        "sqlock-row": dict(color="#17becf", marker="o", linestyle="--"),
        "tooz": dict(color="#ff7f0e", marker="^"),
        "redis": dict(color="#d62728", marker="v", linestyle=":"),
    }

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), metadata={"Software": None})
        plt.close(fig)
        page.charts[name[:-4]] = name

    def series(engine, variant, impl, n):
        xs, ys = [], []
        for c in page.clients_of(engine, variant, [impl]):
            eng, var = ("redis", "") if impl == "redis" else (engine, variant)
            r = d.one(suite="cycle", engine=eng, variant=var, impl=impl, clients=c, names=n)
            y = num(r.get("cycles_per_s")) if r else None
            if y:
                xs.append(c)
                ys.append(y)
        return xs, ys

    # cycles/s by clients, one chart per engine lane: floor vs sqlock vs peers
    for engine, variant, title, slug in LANES:
        impls = ["floor", "sqlock-table", "floor-rowlock", "sqlock-row", "tooz", "redis"]
        if not any(series(engine, variant, i, n)[0] for i in impls[:5] for n in NAMES):
            continue
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
        for ax, n in zip(axes, NAMES):
            for impl in impls:
                xs, ys = series(engine, variant, impl, n)
                if xs:
                    ax.plot(xs, ys, label=IMPL_TITLE.get(impl, impl), **style.get(impl, {}))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(CLIENTS)
            ax.set_xticklabels([str(c) for c in CLIENTS])
            ax.set_xlabel("clients")
            ax.set_title(f"{n} names")
        axes[0].set_ylabel("cycles/s (log)")
        handles, labels = axes[0].get_legend_handles_labels()
        h2, l2 = axes[1].get_legend_handles_labels()
        for h, lbl in zip(h2, l2):
            if lbl not in labels:
                handles.append(h)
                labels.append(lbl)
        axes[1].legend(handles, labels, loc="best", fontsize=8)
        fig.suptitle(f"Lock cycles, {title}")
        save(fig, f"cycles-{slug}.png")

    # sqlock / floor by clients (distinct names), with the targets
    have = False
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (impl, base, lanes, ttl) in zip(axes, [
            ("sqlock-table", "floor", LANES, "table lock / floor"),
            ("sqlock-row", "floor-rowlock", LANES[:2], "row lock / floor-rowlock")]):
        for engine, variant, title, _ in lanes:
            xs, ys = [], []
            for c in page.clients_of(engine, variant, [impl, base]):
                r, _, _ = page.cycle_ratio(impl, base, engine, variant, c)
                if r is not None:
                    xs.append(c)
                    ys.append(r)
            if xs:
                have = True
                ax.plot(xs, ys, marker="o", label=title)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(0.9, color="#d62728", linewidth=0.8, linestyle="--", label="target 0.9×")
        if impl == "sqlock-table":
            ax.plot([1, 4], [1.1, 1.4], linestyle="none", marker="_", markersize=18, color="#2ca02c",
                    label="PostgreSQL targets (1.1×, 1.4×)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(CLIENTS)
        ax.set_xticklabels([str(c) for c in CLIENTS])
        ax.set_xlabel("clients (distinct names)")
        ax.set_ylabel("cycles/s ratio (> 1: sqlock faster)")
        ax.set_title(ttl)
        ax.legend(fontsize=7, loc="best")
    if have:
        save(fig, "ratios.png")
    else:
        plt.close(fig)

    # CPU per cycle, floor vs sqlock, distinct names
    lanes = [lane for lane in LANES if any(
        d.one(suite="cycle", engine=lane[0], variant=lane[1], impl=i, names="distinct") for i in ("floor", "sqlock-table"))]
    if lanes:
        fig, axes = plt.subplots(1, len(lanes), figsize=(2.6 * len(lanes) + 1, 3.4), squeeze=False)
        for ax, (engine, variant, title, _) in zip(axes[0], lanes):
            pairs = [("floor", "sqlock-table")] + ([("floor-rowlock", "sqlock-row")] if engine != "sqlite" else [])
            impls = [i for p in pairs for i in p]
            width = 0.8 / len(impls)
            for k, impl in enumerate(impls):
                ys = []
                for c in CLIENTS:
                    r = d.one(suite="cycle", engine=engine, variant=variant, impl=impl, clients=c, names="distinct")
                    ys.append((num(r.get("cpu_us_per_cycle")) if r else None) or 0)
                st = style[impl]
                ax.bar([i + (k - (len(impls) - 1) / 2) * width for i in range(len(CLIENTS))], ys, width,
                       label=IMPL_TITLE[impl], color=st["color"])
            ax.set_xticks(range(len(CLIENTS)))
            ax.set_xticklabels([str(c) for c in CLIENTS])
            ax.set_xlabel("clients")
            ax.set_title(title, fontsize=8)
        axes[0][0].set_ylabel("client CPU µs per cycle")
        richest = max(axes[0], key=lambda ax: len(ax.get_legend_handles_labels()[1]))
        richest.legend(fontsize=7)
        fig.suptitle("Client CPU per cycle (distinct names)")
        save(fig, "cpu.png")

    # hand-off p50 / p99 by path
    bars = [(k, r) for k, r in page.handoff_rows() if r and num(r.get("p50_us")) is not None]
    if bars:
        fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(bars) + 2), 3.8))
        xs = range(len(bars))
        p50 = [num(r.get("p50_us")) / 1000 for _, r in bars]
        p99 = [(num(r.get("p99_us")) or 0) / 1000 for _, r in bars]
        ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50", color="#1f77b4")
        ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99", color="#aec7e8")
        ax.axhline(0.5, color="#2ca02c", linestyle="--", linewidth=0.8, label="target p50, notify (0.5 ms)")
        ax.axhline(0.4, color="#d62728", linestyle=":", linewidth=0.8, label="target p50, row-queue (0.4 ms)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{ENGINE_TITLE.get(e, e)}\n{p}" for (e, _, p), _ in bars], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title("Hand-off: release returned → waiter holds the lock")
        ax.legend(fontsize=7)
        save(fig, "handoff.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "build", "bench-results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--charts", default=os.path.join(ROOT, "docs", "bench"))
    ap.add_argument("--notes", default=os.path.join(ROOT, "docs", "bench", "notes.md"))
    ap.add_argument("--no-charts", action="store_true", help="write the page only")
    a = ap.parse_args()
    data = Data(a.results)
    page = Page(data, a.out, a.charts, a.notes)
    if not a.no_charts:
        draw_charts(page)
    text = page.render()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".tmp", "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(a.out + ".tmp", a.out)
    print(f"report.py: wrote {a.out} ({len(data.records)} result lines from {len(data.runs)} runs, "
          f"{len(page.charts)} charts)", file=sys.stderr)
    for f, n, x in data.bad:
        print(f"report.py: warning: {f}: {n} line(s) not in the results format, e.g. {x!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
