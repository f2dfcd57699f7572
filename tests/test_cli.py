"""The command line on a CPU: user errors in one line with exit code 2, --version, --debug, the kernel cache
commands, and compile progress (with a stand-in for nvcc)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from cutlass_nm import cli
from cutlass_nm.build import Artifact, BuildEvent, build_many, compiler
from cutlass_nm.build.progress import build_progress, event_line
from cutlass_nm.errors import BuildError, InputError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def private_state(tmp_path, monkeypatch):
    """A private kernel cache and tuning DB, and no GPU."""
    monkeypatch.setenv("CUTLASS_NM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTLASS_NM_DB", f"sqlite:///{tmp_path / 'tuning.sqlite'}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _user_error(capsys, argv: list[str]) -> str:
    """Run argv; assert exit code 2 and a single ``cutlass-nm: error:`` line on stderr; return that line."""
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("cutlass-nm: error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("argv", "says"), [
    (["build", "--model", "gpt-5", "--tokens", "16"], "unknown model 'gpt-5'"),
    (["tune", "--pattern", "5:4", "--shape", "16,256,256"], "5:4"),
    (["tune", "--model", "llama-7b", "--campaigns", "/nonexistent.json"], "/nonexistent.json"),
    (["build", "--campaigns", str(ROOT / "README.md"), "--model", "llama-7b"], "README.md"),
    (["db", "import", "/nonexistent.jsonl"], "/nonexistent.jsonl"),
    (["bench", "--dry-run", "--records", "/nonexistent.jsonl"], "/nonexistent.jsonl: No such file or directory"),
    (["bench", "--dry-run", "--records", str(ROOT / "README.md")], "README.md"),
    (["bench", "--report", str(ROOT)], "Is a directory"),
    (["bench", "--family", "no_such_family"], "unknown families"),
    (["db", "--url", "nosuchdb://host/x", "ls"], "nosuchdb"),
    (["db", "--url", "postgresql+nosuchdriver://u@localhost/db", "ls"], "nosuchdriver"),
    (["build", "--shape", "1,2"], "--shape"),
    (["build", "--shape", "0,4096,4096"], "M, N and K must be >= 1"),
    (["bench", "--dry-run", "--shape", "16,0,4096"], "M, N and K must be >= 1"),
    (["build", "--model", "llama-7b", "--tokens", "0"], "--tokens: expected a positive integer, got 0"),
    (["build", "--shape", "16,4096,4096", "--jobs", "-1"], "--jobs: expected a positive integer"),
    (["tune", "--shape", "16,4096,4096", "--trials", "0"], "--trials: expected a positive integer"),
    (["build", "--shape", "16,4096,4095", "--family", "decode24"], "every family given refuses every shape"),
    (["build"], "--shape M,N,K or --model"),
    ([], "command"),
    (["tune", "--shape", "16,256,256"], "tune needs a CUDA GPU; none is visible"),
    (["tune", "--shape", "16,256,256", "--gpus", "all"], "tune needs a CUDA GPU"),
])
def test_user_errors_are_one_line_and_exit_2(capsys, argv, says):
    assert says in _user_error(capsys, argv)


def test_a_corrupt_db_is_one_line(capsys, tmp_path):
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    _user_error(capsys, ["db", "--url", f"sqlite:///{bad}", "ls"])


def test_bench_without_gpu_says_so_before_any_db_warning(capsys, recwarn, tmp_path):
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"this is not a database")
    err = _user_error(capsys, ["bench", "--quick", "--db", f"sqlite:///{bad}"])
    assert "bench needs a CUDA GPU" in err
    assert not [w for w in recwarn if "unusable" in str(w.message)]


def test_bench_dry_run_without_gpu_uses_heuristics_quietly(capsys, recwarn):
    assert cli.main(["bench", "--dry-run", "--quick", "--family", "sptc24_sm90"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU here: heuristic configs" in out and "kernels to compile" in out
    assert not [w for w in recwarn if "unusable" in str(w.message)]


def test_exit_code_of_the_installed_command():
    proc = subprocess.run([sys.executable, "-m", "cutlass_nm.cli", "build", "--model", "gpt-5"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"cutlass-nm: error: unknown model 'gpt-5'; known: {_models()}"]


def _models() -> str:
    from cutlass_nm.campaigns import load_models

    return ", ".join(sorted(load_models()))


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert re.fullmatch(r"cutlass-nm \d+\.\d+\S*\n", capsys.readouterr().out)


def test_debug_shows_the_traceback(capsys):
    with pytest.raises(InputError, match="unknown model"):
        cli.main(["--debug", "build", "--model", "gpt-5"])
    with pytest.raises(InputError, match="unknown model"):  # also after the subcommand
        cli.main(["build", "--model", "gpt-5", "--debug"])


def test_a_bug_shows_its_traceback_and_exit_1(capsys, monkeypatch):
    def boom(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "cmd_cache", boom)
    assert cli.main(["cache"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err and "internal error" in err


def test_ctrl_c_exits_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_cache", interrupted)
    assert cli.main(["cache"]) == 130
    assert capsys.readouterr().err == "cutlass-nm: interrupted\n"


def test_help_of_every_subcommand_says_what_it_does(capsys):
    for argv in (["build"], ["tune"], ["cache", "prune"], ["check"], ["bench"]):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--help"])
        out = capsys.readouterr().out
        assert out.split("\n\n")[1].strip(), out  # the description after the usage
    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    assert "example: cutlass-nm tune" in capsys.readouterr().out


# the kernel cache


def _kernel(folder: Path, key: str, name: str, age_days: float, size: int = 1000) -> Path:
    lib = folder / f"{key}.so"
    lib.write_bytes(b"\0" * size)
    (folder / f"{key}.cu").write_text(f"// {name}\nint main() {{}}\n")
    (folder / f"{key}.log").write_text("ptxas warning")
    t = time.time() - age_days * 86400
    for path in (lib, lib.with_suffix(".cu"), lib.with_suffix(".log")):
        os.utime(path, (t, t))
    return lib


@pytest.fixture
def kernels(tmp_path) -> Path:
    folder = tmp_path / "cache" / "kernels"
    folder.mkdir(parents=True)
    long_name = "sptc24_sm90_f16_f16_bias_" + "_".join(["256", "128", "128", "1", "2", "cooperative"] * 6)
    _kernel(folder, "a" * 24, long_name, age_days=0)
    _kernel(folder, "b" * 24, "sptc24_sm80_bf16_bf16_old", age_days=90)
    fail = folder / f"broken-{'c' * 24}.log"
    fail.write_text("error")
    os.utime(fail, (time.time() - 90 * 86400,) * 2)
    (folder / f".{'d' * 24}-tmp").mkdir()
    return folder


def test_cache_path_and_summary(capsys, kernels):
    assert cli.main(["cache", "path"]) == 0
    assert capsys.readouterr().out == f"{kernels}\n"
    assert cli.main(["cache"]) == 0
    assert capsys.readouterr().out.startswith(f"{kernels}: 2 kernel(s)")


def test_cache_ls_piped_is_not_truncated(capsys, kernels):
    assert cli.main(["cache", "ls"]) == 0
    lines = [ln.split("\t") for ln in capsys.readouterr().out.splitlines()]
    assert [row[0] for row in lines] == ["sptc24_sm80_bf16_bf16_old",
                                         "sptc24_sm90_f16_f16_bias_" + "_".join(["256", "128", "128", "1", "2",
                                                                                 "cooperative"] * 6)]
    assert [row[3] for row in lines] == ["b" * 24, "a" * 24] and all(row[1].endswith("MB") for row in lines)


def test_cache_clear_asks_first(capsys, kernels):
    _user_error(capsys, ["cache", "clear"])  # stdin is not a terminal: nothing to confirm with
    assert len(list(kernels.glob("*.so"))) == 2
    assert cli.main(["cache", "clear", "--yes"]) == 0
    assert capsys.readouterr().out.startswith("deleted 2 kernel(s)")
    assert list(kernels.iterdir()) == []


def test_cache_prune_by_age(capsys, kernels):
    assert cli.main(["cache", "prune", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("would delete 1 kernel(s) unused for 30 days")
    assert len(list(kernels.glob("*.so"))) == 2
    assert cli.main(["cache", "prune", "--days", "30"]) == 0
    assert capsys.readouterr().out.startswith("deleted 1 kernel(s)")
    assert sorted(p.name for p in kernels.iterdir()) == sorted(
        [f"{'a' * 24}.so", f"{'a' * 24}.cu", f"{'a' * 24}.log", f".{'d' * 24}-tmp"])  # the fresh leftover stays


# compile progress


@pytest.fixture
def fake_nvcc(monkeypatch):
    """``build`` without nvcc: sm_80 kernels come from the cache, sm_90a ones are built, 'broken' ones fail."""

    def build(source: str, arch: str, name: str = "kernel", timeout: float = 900.0) -> Artifact:
        if "broken" in name:
            raise BuildError(f"nvcc failed for {name}")
        return Artifact(name, Path(f"/nowhere/{name}.so"), built=arch == "sm_90a")

    monkeypatch.setattr(compiler, "build", build)


def test_build_prints_a_line_per_kernel_when_piped(capsys, fake_nvcc):
    rc = cli.main(["build", "--shape", "16,4096,4096", "--shape", "2048,4096,4096", "--family", "sptc24_sm90",
                   "--family", "sptc24_sm80", "--jobs", "2"])
    assert rc == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[")]
    assert len(lines) == 4
    for i, line in enumerate(lines, start=1):
        assert re.fullmatch(rf"\[{i}/4\] \d+ s (sptc24_sm90_\S+ built|sptc24_sm80_\S+ cached)", line), line


def test_build_skips_what_a_family_cannot_run_and_says_why(capsys, fake_nvcc):
    rc = cli.main(["build", "--shape", "16,4096,4095", "--shape", "16,4096,4096", "--family", "decode24"])
    out = capsys.readouterr().out
    assert rc == 0 and "skip decode24 at 16x4096x4095: " in out and "k % 16 == 0" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("[")]) == 1


def test_check_compiles_only_without_a_gpu(capsys, fake_nvcc):
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "compile check only" in out and "nothing launched" in out


def test_build_many_reports_each_job_in_order_of_completion(fake_nvcc):
    events: list[BuildEvent] = []
    jobs = [("", "sm_90a", "k0"), ("", "sm_80", "k1"), ("", "sm_90a", "broken2")]
    results = build_many(jobs, workers=2, progress=events.append)
    assert [r.key if isinstance(r, Artifact) else "error" for r in results] == ["k0", "k1", "error"]
    assert [e.done for e in events] == [1, 2, 3] and {e.total for e in events} == {3}
    assert {(e.name, e.verdict) for e in events} == {("k0", "built"), ("k1", "cached"), ("broken2", "FAILED")}
    assert event_line(events[0]).startswith("[1/3] 0 s ")


def test_progress_bar_in_a_terminal():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with build_progress(2, console) as progress:
        for done, name in enumerate(("k0", "k1"), start=1):
            progress(BuildEvent(done, 2, name, Artifact(name, Path("/x.so"), built=True), 1.0))
    text = out.getvalue()
    assert "2/2" in text and "0:00:0" in text and "k1 built" in text
