"""Run ponder's benchmark suite: ``uv run python -m scripts.bench [--quick] [--peers]``.

(or ``uv run python scripts/bench/run.py ...``). Prints a table and writes the numbers to
``scripts/bench/results/bench-<time>.json`` (and ``latest.json``). See README.md here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as a file: make ``scripts.bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench import measures as M

RESULTS = Path(__file__).resolve().parent / "results"


def ms(seconds: float) -> str:
    return "n/a" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def us(micro: float) -> str:
    return "n/a" if micro is None or math.isnan(micro) else f"{micro:.1f} µs"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("MET" if ok else "MISSED")


def build_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(measure, ponder, reference, target, verdict) rows."""
    rows: list[tuple[str, str, str, str, str]] = []
    if r.get("backends"):
        from scripts.bench import store_backends

        rows.extend(store_backends.rows(r["backends"]))
    f = r.get("fanout")
    if f:
        per_k = ", ".join(f"{run['subscribers']}: {us(run['cpu_us_per_event'])}" for run in f["runs"])
        ring = f["ring"]
        rows.append(
            (
                "7 fan-out: daemon CPU per event per extra subscriber (unix socket, mock turns)",
                us(f["us_per_event_per_extra_subscriber"]),
                f"per event by subscribers {per_k}; queueing alone {us(f['queueing']['slope_us'])}",
                "",
                "",
            )
        )
        rows.append(
            (
                f"   event ring of one session, full ({ring['events']} events)",
                f"{ring['traced_bytes'] / 1e6:.1f} MB",
                f"{ring['encoded_bytes'] / 1e6:.1f} MB encoded, {ring['mean_event_bytes']:.0f} B/event",
                "",
                "",
            )
        )
    c = r.get("cold_start")
    if c:
        ratio = c["ratios_to_floor"]
        compiled = "compiled bytecode" if c.get("compiled_bytecode") else "NOT compiled"
        rows.append(
            (
                f"1 (floor) sqlite3, anyio on asyncio, msgspec; one JSON-RPC line answered ({c['runs']} runs)",
                f"median {ms(c['floor_median_s'])}, p90 {ms(c['floor_p90_s'])}",
                f"python -c pass: median {ms(c['python_pass_median_s'])}; EOF -> exit {ms(c['floor_exit_median_s'])}",
                "",
                "",
            )
        )
        rows.append(
            (
                f"1 cold start: spawn -> initialize answered ({compiled})",
                f"median {ms(c['ponder_median_s'])}, p90 {ms(c['ponder_p90_s'])}",
                f"ratio to the floor {ratio['serve']:.2f}x",
                "<= 1.25x floor",
                verdict(ratio["serve"] <= 1.25),
            )
        )
        rows.append(
            (
                "   shutdown on stdin EOF, nothing running",
                f"median {ms(c['shutdown_median_s'])}, p90 {ms(c['shutdown_p90_s'])}",
                f"RSS after initialize {c['peak_rss_after_initialize_mb']:.0f} MB",
                "median <= 30 ms",
                verdict(c["shutdown_median_s"] <= 0.030),
            )
        )
        for key, label, target in (
            ("ask", "ponder ask --model mock/echo hi", 2.0),
            ("sessions", "ponder sessions", 1.4),
        ):
            rows.append(
                (
                    f"   {label} (end to end)",
                    f"median {ms(c[key + '_median_s'])}, p90 {ms(c[key + '_p90_s'])}",
                    f"ratio to the floor {ratio[key]:.2f}x",
                    f"<= {target:g}x floor",
                    verdict(ratio[key] <= target),
                )
            )
    rl = r.get("relay")
    if rl:
        rows.append(
            (
                f"2 relay: {rl['deltas']:,} deltas, CPU per delta (median of {rl['runs']})",
                us(rl["ponder_cpu_per_delta_us"]),
                f"floor {us(rl['floor_cpu_per_delta_us'])}; ratio {rl['cpu_ratio']:.2f}x",
                "<= 2x floor",
                verdict(rl["cpu_ratio"] <= 2.0 and not rl["problems"]),
            )
        )
        rows.append(
            (
                "   relay wall time for the turn",
                f"{rl['ponder_wall_s']:.2f} s ({rl['ponder_deltas_per_s']:,.0f}/s)",
                f"floor {rl['floor_wall_s']:.2f} s ({rl['floor_deltas_per_s']:,.0f}/s); ratio {rl['wall_ratio']:.2f}x",
                "",
                "",
            )
        )
    la = r.get("latency")
    if la:
        rows.append(
            (
                f"3 added latency: server write -> client read ({la['runs']} x {la['deltas_per_run']} deltas, 1/20 ms)",
                f"p50 {ms(la['ponder_p50_s'])}, p99 {ms(la['ponder_p99_s'])} (max {ms(la['ponder_max_s'])})",
                f"floor p50 {ms(la['floor_p50_s'])}, p99 {ms(la['floor_p99_s'])}",
                "p50 < 1 ms, p99 < 5 ms",
                verdict(la["ponder_p50_s"] < 0.001 and la["ponder_p99_s"] < 0.005 and not la["problems"]),
            )
        )
    co = r.get("concurrency")
    if co:
        ok = co["events_lost"] == 0 and co["turns_with_problems"] == 0 and co["turns_unfinished"] == 0
        rows.append(
            (
                f"4 concurrency: {co['sessions']} sessions x {co['deltas_per_session']} deltas ({co['server_pacing']})",
                f"lost {co['events_lost']}, bad turns {co['turns_with_problems']}, unfinished {co['turns_unfinished']}",
                "",
                "none lost or reordered",
                verdict(ok),
            )
        )
        rows.append(
            (
                "   peak RSS",
                f"{co['peak_rss_mb']:.0f} MB",
                f"before prompts {co['peak_rss_before_prompts_mb']:.0f} MB",
                "< 200 MB",
                verdict(co["peak_rss_mb"] < 200),
            )
        )
        rows.append(
            (
                "   total time (first prompt -> last turn_end)",
                f"{co['total_s']:.2f} s",
                f"ideal {co['ideal_stream_s']:.2f} s; "
                f"upstream streams open at once: {co['peak_concurrent_upstream_streams']}",
                "",
                "",
            )
        )
        rows.append(
            (
                "   burst admission: first delta after prompts sent",
                f"p50 {ms(co['first_delta_p50_s'])}, max {ms(co['first_delta_max_s'])}",
                f"all {co['sessions']} prompts answered in {ms(co['admission_s'])}; "
                f"daemon CPU {co['daemon_cpu_s']:.1f} s",
                "p50 <= 300 ms",
                verdict(co["first_delta_p50_s"] <= 0.300),
            )
        )
    st = r.get("store")
    if st:
        rows.append(
            (
                f"5a session/list over {st['sessions']:,} sessions (limit 50)",
                f"p50 {ms(st['list_p50_s'])} (first {ms(st['list_first_s'])})",
                f"limit 1000: {ms(st['list_limit1000_p50_s'])}; all pages: {ms(st['list_walk_all_p50_s'])}",
                "< 50 ms",
                verdict(st["list_p50_s"] < 0.050 and st["list_first_s"] < 0.050),
            )
        )
        rows.append(
            (
                f"5b session/resume of {st['messages']:,} messages (fresh daemon)",
                f"p50 {ms(st['resume_cold_p50_s'])}",
                f"again, loaded: {ms(st['resume_warm_p50_s'])}; reply {st['resume_response_mb']:.1f} MB",
                "< 300 ms",
                verdict(st["resume_cold_p50_s"] < 0.300),
            )
        )
        rows.append(
            (
                "   (context) seeding with daemon.store.Store",
                f"{st['seed_sessions_per_s']:,.0f} sessions/s, {st['seed_messages_per_s']:,.0f} messages/s",
                f"db {st['db_mb']:.0f} MB",
                "",
                "",
            )
        )
    pe = r.get("persisting")
    if pe:
        g = pe["growing"]
        rows.append(
            (
                f"5c persisting: CPU/delta, {g['reply_big_mb']:.1f} MB reply vs {g['reply_small_mb']:.1f} MB",
                f"{us(g['cpu_per_delta_big_us'])} vs {us(g['cpu_per_delta_small_us'])} ({g['big_over_small']:.2f}x)",
                f"longest gap between deltas {ms(g['max_gap_s'])}; "
                f"{g['deltas_big']:,} deltas in {g['big_wall_s']:.2f} s",
                "no slowdown (<= 1.25x)",
                verdict(g["big_over_small"] <= 1.25 and not g["problems"]),
            )
        )
        u = pe["under_load"]
        quiet = r.get("latency", {})
        rows.append(
            (
                f"5c persisting: latency probe while {u['background_sessions']} sessions persist",
                f"p50 {ms(u['probe_p50_s'])}, p99 {ms(u['probe_p99_s'])} (max {ms(u['probe_max_s'])})",
                (
                    f"quiet p50 {ms(quiet.get('ponder_p50_s', float('nan')))}, "
                    f"p99 {ms(quiet.get('ponder_p99_s', float('nan')))}; "
                    f"{u['background_messages_per_s']:.0f} msgs/s, {u['background_mb_per_s']:.1f} MB/s persisted"
                ),
                "p99 < 5 ms",
                verdict(u["probe_p99_s"] < 0.005 and not u["problems"]),
            )
        )
    sm = r.get("streams")
    if sm:
        e, lr = sm["endless"], sm["long_reply"]
        rows.append(
            (
                f"5d {e['stream_mb']:,} MiB stream without a line break: peak RSS",
                f"{e['peak_rss_mb']:.0f} MB",
                f"idle {e['peak_rss_idle_mb']:.0f} MB; "
                f"turn ended {e['stop_reason']} in {e['wall_s']:.1f} s: {(e['error'] or '')[:60]}",
                "< idle + 64 MB",
                verdict(e["peak_rss_mb"] < e["peak_rss_idle_mb"] + 64 and e["stop_reason"] == "error"),
            )
        )
        rows.append(
            (
                f"5d {lr['reply_mb']:.0f} MiB reply: delta rate, last (ninth) tenth vs first",
                f"{lr['rate_last_over_first']:.2f}x ({lr['rate_ninth_over_first']:.2f}x)",
                (
                    f"first {lr['rate_first_tenth_mb_per_s']:.1f} MB/s, last {lr['rate_last_tenth_mb_per_s']:.1f} MB/s "
                    f"(holds the {lr['max_gap_s'] * 1000:.0f} ms end-of-reply pause: text_end of the whole text); "
                    f"{lr['wall_s']:.1f} s"
                ),
                "ninth >= 0.8x",
                verdict(lr["rate_ninth_over_first"] >= 0.8 and not lr["problems"]),
            )
        )
        rows.append(
            (
                f"5d {lr['reply_mb']:.0f} MiB reply: peak RSS",
                f"{lr['peak_rss_mb']:.0f} MB",
                f"idle {lr['peak_rss_idle_mb']:.0f} MB; (peak - idle) / reply = {lr['peak_rss_over_reply']:.2f}",
                "",
                "",
            )
        )
    for peer in r.get("peers", []):
        if peer.get("startup") == "measure 1":  # ponder itself, beside the peers for the relay
            pass
        else:
            rows.append(
                (
                    f"6 peer {peer['name']}: cold start" + (f" ({peer.get('runs')} runs)" if peer.get("runs") else ""),
                    f"median {ms(peer['startup_median_s'])}, p90 {ms(peer['startup_p90_s'])}"
                    if peer.get("startup_median_s")
                    else peer.get("status", "n/a"),
                    peer.get("startup_note", ""),
                    "",
                    "",
                )
            )
        if peer.get("relay"):
            pr = peer["relay"]
            rows.append(
                (
                    f"6 peer {peer['name']}: relay {pr.get('deltas', 0):,} deltas",
                    (
                        f"{us(pr['cpu_per_delta_us'])} CPU/delta "
                        f"({us(pr['marginal_cpu_per_delta_us'])} marginal), {pr['wall_s']:.2f} s"
                        if pr.get("cpu_per_delta_us")
                        else pr.get("status", "n/a")
                    ),
                    f"peak RSS {pr['peak_rss_mb']:.0f} MB" + (f"; {pr['note']}" if pr.get("note") else "")
                    if pr.get("peak_rss_mb")
                    else "",
                    "",
                    "",
                )
            )
    return rows


def target_lines(r: dict[str, Any]) -> list[str]:
    """One line per target of the measures that ran: the figure, the target, met or NOT met."""
    checks: list[tuple[str, str, float, float, str]] = []  # (what, figure, value, limit, target)
    c = r.get("cold_start")
    if c:
        ratio = c["ratios_to_floor"]
        floor = f" (floor {ms(c['floor_median_s'])})"
        checks += [
            ("serve -> initialize", f"{ratio['serve']:.2f}x the floor{floor}", ratio["serve"], 1.25, "<= 1.25x"),
            ("ponder ask", f"{ratio['ask']:.2f}x the floor", ratio["ask"], 2.0, "<= 2x"),
            ("ponder sessions", f"{ratio['sessions']:.2f}x the floor", ratio["sessions"], 1.4, "<= 1.4x"),
            ("stdin EOF -> exit", ms(c["shutdown_median_s"]), c["shutdown_median_s"], 0.030, "<= 30 ms"),
        ]
    if r.get("relay"):
        cpu = r["relay"]["cpu_ratio"]
        checks.append(("relay CPU per delta", f"{cpu:.2f}x its floor", cpu, 2.0, "<= 2x"))
    if r.get("concurrency"):
        p50 = r["concurrency"]["first_delta_p50_s"]
        checks.append(("burst admission p50 (200 sessions)", ms(p50), p50, 0.300, "<= 300 ms"))
    if r.get("store"):
        cold = r["store"]["resume_cold_p50_s"]
        n = r["store"]["messages"]
        checks.append((f"resume of {n:,} messages (fresh daemon)", ms(cold), cold, 0.300, "< 300 ms"))
    return [
        f"  {what}: {figure}, target {target}: {'met' if _within(value, limit, target) else 'NOT met'}"
        for what, figure, value, limit, target in checks
    ]


def _within(value: float, limit: float, target: str) -> bool:
    """``value`` meets ``target``: strictly below ``limit`` for "< ...", at most ``limit`` for "<= ..."."""
    return value < limit if target.startswith("< ") else value <= limit


def print_table(rows: list[tuple[str, str, str, str, str]], out: TextIO = sys.stdout) -> None:
    headers = ("measure", "ponder", "reference / context", "target", "verdict")
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    widths = [min(w, 80) for w in widths]
    line = "+".join("-" * (w + 2) for w in widths)
    print(line, file=out)
    print("|".join(f" {h:<{w}} " for h, w in zip(headers, widths, strict=True)), file=out)
    print(line, file=out)
    for row in rows:
        print("|".join(f" {c:<{w}} " for c, w in zip(row, widths, strict=True)), file=out)
    print(line, file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench", description="ponder's benchmark suite")
    parser.add_argument("--quick", action="store_true", help="fewer runs and smaller sizes (about a minute)")
    parser.add_argument("--peers", action="store_true", help="also measure codex app-server and pi's RPC mode")
    parser.add_argument(
        "--only",
        help="comma-separated subset: cold,relay,latency,concurrency,store,persist,streams,fanout,backends,peers",
        default="",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (homes, logs)")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="run the dev environment's ponder (not an install with compiled bytecode)",
    )
    parser.add_argument("--out", type=Path, help="write the JSON here (default: results/bench-<time>.json)")
    args = parser.parse_args(argv)
    quick = args.quick
    only = {s.strip() for s in args.only.split(",") if s.strip()}

    def wanted(name: str) -> bool:
        return (not only or name in only) and (name != "peers" or args.peers or "peers" in only)

    work = Path(tempfile.mkdtemp(prefix="ponder-bench-"))
    bench = M.Bench(work=work, quick=quick)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": M.git_commit(),
        "quick": quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    started = time.monotonic()
    results["machine"]["loadavg_at_start"] = os.getloadavg()

    def step(name: str, label: str, fn, *fn_args) -> None:  # type: ignore[no-untyped-def]
        if not wanted(name):
            return
        print(f"[bench] {label} ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            results[{"cold": "cold_start", "persist": "persisting"}.get(name, name)] = fn(bench, *fn_args)
        except Exception as exc:
            results.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
            print(f"[bench] {label} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        print(f"[bench] {label} took {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)

    if not args.no_compile:
        print("[bench] installing with compiled bytecode into .bench-cache/venv ...", file=sys.stderr, flush=True)
        bench.bin_dir = M.compiled_install(bench.notes)
    results["compiled_bytecode"] = bench.bin_dir is not None
    try:
        bench.start_server()
        step("cold", "1 cold start", M.measure_cold_start, 10 if quick else 30)
        step("relay", "2 relay cost", M.measure_relay, 20_000, 2 if quick else 5)
        step("latency", "3 added latency", M.measure_latency, 150 if quick else 300, 1 if quick else 3)
        step("concurrency", "4 concurrency", M.measure_concurrency, 200, 500, 20, 5)
        step("store", "5a/5b store at scale", M.measure_store, 10_000, 10_000, 1 if quick else 3)
        step(
            "persist",
            "5c persisting while streaming",
            M.measure_persisting,
            2_000,
            20_000,
            100,
            150 if quick else 300,
            4,
        )
        step("streams", "5d hostile and huge streams", M.measure_streams, 20 if quick else 100, 256 if quick else 2048)
        if wanted("fanout"):
            from scripts.bench import fanout

            step("fanout", "7 fan-out to subscribers", fanout.measure_fanout, 20 if quick else 40, 1 if quick else 3)
        if wanted("backends"):
            from scripts.bench import store_backends

            step(
                "backends",
                "8 store backends: SQLite and PostgreSQL",
                store_backends.measure_backends,
                2 if quick else 5,
            )
        if wanted("peers"):
            from scripts.bench import peers

            step("peers", "6 peers", peers.measure_peers, 5 if quick else 15)
    finally:
        bench.stop_server()
        if args.keep:
            print(f"[bench] kept {work}", file=sys.stderr)
        else:
            M.cleanup(work)
    results["elapsed_s"] = time.monotonic() - started
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["notes"] = bench.notes

    rows = build_rows(results)
    print()
    print(
        f"ponder bench  commit {results['commit']}  {results['machine']['cpus']} CPUs  "
        f"Python {results['machine']['python']}"
        f"  {'quick' if quick else 'full'} run, {results['elapsed_s']:.0f} s"
    )
    print_table(rows)
    targets = target_lines(results)
    if targets:
        print("targets (issue #25):")
        print("\n".join(targets))
    load = results["machine"]["loadavg_at_start"][0], results["machine"]["loadavg_at_end"][0]
    print(f"load average (1 min) at start {load[0]:.2f}, at end {load[1]:.2f}", end="")
    if max(load) > 0.5 * (os.cpu_count() or 1):
        print(
            ": other work was running on this machine; latencies and wall times are inflated (compare with the floor)"
        )
    else:
        print()
    for name, error in results.get("errors", {}).items():
        print(f"ERROR in {name}: {error}")
    for note in bench.notes:
        print(f"note: {note}")
    problems = {k: v.get("problems") for k, v in results.items() if isinstance(v, dict) and v.get("problems")}
    for name, found in problems.items():
        print(f"problems in {name}: {found[:3]}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    text = json.dumps(results, indent=2, default=str)
    out.write_text(text)
    (RESULTS / "latest.json").write_text(text)
    print(f"\nwrote {out}")
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
