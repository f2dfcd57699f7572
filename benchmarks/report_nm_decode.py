"""Markdown table of a bench_nm_decode.py run, optionally next to an earlier run of the same bench.

    python3 benchmarks/report_nm_decode.py benchmarks/results/h100/nm_decode.json --previous old.json \\
        --out benchmarks/results/h100/nm_decode.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _key(r: dict) -> tuple:
    return r["n"], r["k"], r["m"], r["pattern"], r["family"]


def report(run: dict, previous: dict | None, title: str) -> str:
    env = run["environment"]
    prev = {_key(r): r for r in previous["rows"]} if previous else {}
    prev_commit = previous["environment"].get("commit", "?") if previous else None
    lines = [f"# {title}", "",
             f"{env['gpu']}, driver {env['driver'].splitlines()[0]}, {env['nvcc']}, commit {env['commit']}; "
             f"`{env.get('command', 'benchmarks/bench_nm_decode.py')}`. Device copy bandwidth measured in the same "
             f"run: {run['copy_bandwidth_Bps'] / 1e12:.2f} TB/s (bytes read + written).", "",
             "Effective bandwidth = (values + indices + x + y bytes) / time, as a fraction of that copy bandwidth. "
             "cuBLAS is dense fp16 at the same m, timed in the same run. `default` is what `matmul` picks; "
             "`nm_decode` rows of V:N:M patterns force the decode path (the weight read as element-wise 2:M).", ""]
    pdl = any("no_pdl_ms" in r for r in run["rows"])
    if pdl:
        lines += ["Rows whose config launches with programmatic dependent launch (PDL: a call's weight stream starts "
                  "while the previous call on the stream finishes) are timed again with it off: `no PDL` is each "
                  "call on its own.", ""]
    same = all("same_bytes_copy_ms" in r for r in run["rows"])
    if same:
        lines += ["`same-bytes copy` is a device copy of the row's bytes (half read, half written), timed the same way "
                  "in the same run: its fraction of copy bandwidth is what one launch per call reaches at that size, "
                  "and `of that` is the row's time against it.", ""]
    head = "| n x k | m | pattern | path | ms | vs cuBLAS | fraction of copy BW |"
    head += " same-bytes copy: fraction of copy BW | of that |" if same else ""
    head += " rel err |"
    sep = "|---|---|---|---|---|---|---|---|" + ("---|---|" if same else "")
    if pdl:
        head += " no PDL: ms | vs cuBLAS | fraction of copy BW |"
        sep += "---|---|---|"
    if prev:
        head += f" earlier run (commit {prev_commit}) ms |"
        sep += "---|"
    lines += [head, sep]
    for r in run["rows"]:
        row = (f"| {r['n']} x {r['k']} | {r['m']} | {r['pattern']} | {r['family']} | {r['median_ms']:.4f} | "
               f"{r['speedup_vs_cublas']:.2f}x | {r['fraction_of_copy_bw']:.2f} |")
        if same:
            row += f" {r['same_bytes_copy_fraction_of_copy_bw']:.2f} | {r['fraction_of_same_bytes_copy']:.2f} |"
        row += f" {r['rel_err']:.1e} |"
        if pdl:
            row += (f" {r['no_pdl_ms']:.4f} | {r['no_pdl_speedup_vs_cublas']:.2f}x | "
                    f"{r['no_pdl_fraction_of_copy_bw']:.2f} |" if "no_pdl_ms" in r else " — | — | — |")
        if prev:
            old = prev.get(_key(r))
            row += f" {old['median_ms']:.4f} |" if old else " — |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--previous", type=Path)
    ap.add_argument("--title", default="N:M decode path (m = 1-16) on the H100")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = report(json.loads(args.run.read_text()),
                  json.loads(args.previous.read_text()) if args.previous else None, args.title)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
