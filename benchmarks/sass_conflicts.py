"""Register-bank conflicts of nm_simt's k loop, read from SASS (no GPU): stop 34's analyzer.

Builds one config's TMA kernel (mode 2, fp32) from the template (or ``--template``, e.g. a variant with one function
changed) into a cubin, disassembles it with cuobjdump (``pip install nvidia-cuda-cuobjdump``, or the CUDA toolkit's)
and prints, for each loop (a backward branch's body) with >= 256 FFMAs, the register-file reads an FFMA and the bank
conflicts an FFMA: an FFMA source comes from the register file unless the FFMA before marked the same register
``.reuse`` in the same slot; a conflict is two distinct such reads in one bank (register index mod 2). On H100 the
count ranked the measured FFMA orders of the 8 x 16 tile correctly (about 3 % of loop time per 0.1 conflicts an FFMA)
and found why cluster-sum kernels ran ~12 % slower (results/h100/NOTES.md, stop 34); across tile shapes it is a
hint, not a prediction.

    python3 benchmarks/sass_conflicts.py '{"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64,
        "stages": 3, "x_transposed": 1, "tma": 1, "split_k": 2, "split_reduce": 2}'
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from string import Template

from cutlass_nm.build.compiler import cutlass_include_dirs
from cutlass_nm.families.nm_simt import ELEMENTS, Config

TEMPLATE = Path(__file__).resolve().parents[1] / "cutlass_nm" / "codegen" / "templates" / "nm_simt.cu"
LINE = re.compile(r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*?);")
Instr = tuple[int, str, list[str]]


def cuobjdump() -> str:
    """cuobjdump from PATH, else from the pip package nvidia-cuda-cuobjdump."""
    if found := shutil.which("cuobjdump"):
        return found
    import nvidia

    for root in nvidia.__path__:
        for candidate in Path(root).glob("*/bin/cuobjdump"):
            return str(candidate)
    raise SystemExit("cuobjdump not found: pip install nvidia-cuda-cuobjdump (or put the CUDA toolkit on PATH)")


def tma_kernel_sass(cfg: Config, template: Path) -> str:
    """SASS of the config's TMA kernel (nm_simt_kernel<2, float, true>) for sm_90a."""
    fields = {name: int(getattr(cfg, name)) for name in Config.SPACE}
    source = Template(template.read_text()).safe_substitute(element=ELEMENTS["f32"], **fields)
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        src.write_text(source)
        subprocess.run(["nvcc", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-DNDEBUG",
                        "-gencode=arch=compute_90a,code=sm_90a", *[f"-I{d}" for d in cutlass_include_dirs()],
                        "-cubin", "-o", str(cubin), str(src)], check=True, capture_output=True)
        sass = subprocess.run([cuobjdump(), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    functions = [f for f in sass.split("Function : ") if "ILi2EfLb1E" in f.splitlines()[0]]
    if not functions:
        raise SystemExit("no TMA kernel in the cubin (the config needs x_transposed=1, tma=1)")
    return functions[0]


def parse(sass: str) -> list[Instr]:
    return [(int(m.group(1), 16), m.group(2), [o.strip() for o in m.group(3).split(",")])
            for m in map(LINE.search, sass.splitlines()) if m]


def loops(code: list[Instr], min_ffma: int = 256) -> list[list[Instr]]:
    """Bodies of backward branches with at least ``min_ffma`` FFMAs, most FFMAs first."""
    bodies = []
    for addr, op, ops in code:
        target = re.search(r"0x([0-9a-f]+)", ops[-1]) if op.startswith("BRA") and ops else None
        if target and int(target.group(1), 16) < addr:
            body = [i for i in code if int(target.group(1), 16) <= i[0] <= addr]
            if sum(i[1].startswith("FFMA") for i in body) >= min_ffma:
                bodies.append(body)
    return sorted(bodies, key=lambda b: -sum(i[1].startswith("FFMA") for i in b))


def conflicts(body: list[Instr], banks: int = 2) -> tuple[int, float, float]:
    """FFMAs, register-file reads an FFMA and bank conflicts an FFMA of one loop body."""
    cached: dict[int, str] = {}
    ffma = reads = clashes = 0
    for _, op, ops in body:
        if not op.startswith("FFMA"):
            cached = {}
            continue
        ffma += 1
        read, reuse = [], {}
        for slot, operand in enumerate(ops[1:4]):
            reg = operand.replace(".reuse", "").strip("-| ")
            if not reg.startswith("R") or reg == "RZ":
                continue
            if cached.get(slot) != reg:
                read.append(int(reg[1:]))
            if ".reuse" in operand:
                reuse[slot] = reg
        cached = reuse
        reads += len(read)
        in_bank = [r % banks for r in set(read)]
        clashes += len(in_bank) - len(set(in_bank))
    return ffma, reads / max(ffma, 1), clashes / max(ffma, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="the config as JSON (missing fields take their defaults)")
    ap.add_argument("--template", type=Path, default=TEMPLATE, help="an nm_simt.cu variant (default: the current)")
    args = ap.parse_args()
    cfg = Config.from_record(json.loads(args.config))
    for body in loops(parse(tma_kernel_sass(cfg, args.template)))[:3]:
        ffma, reads, clashes = conflicts(body)
        print(f"loop at {body[0][0]:#x}: {len(body)} instructions, {ffma} FFMA, {reads:.3f} register-file reads and "
              f"{clashes:.3f} bank conflicts an FFMA")


if __name__ == "__main__":
    main()
