"""Running one notebook for ``make run``: its kernel (over IPC), its progress lines, the executed copy written and
signed as trusted, whatever happens (scripts/run_all.py's local workers and Slurm jobs both call :func:`execute`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from run_common import STOP, say, timing


def prepare_notary() -> None:
    """Create this user's notebook-signing key now, if there is none yet, before parallel workers sign their first
    notebooks: two workers each creating a key would leave one worker's signatures made with a key that the other
    overwrote."""
    try:
        default_notary().secret  # noqa: B018  (reading it writes a new key if there is none)
    except Exception as e:
        say(f"notebook signing unavailable ({type(e).__name__}: {e}); executed notebooks will open untrusted")

def _kernel_config(tmp: str):
    """Notebook kernels talk to this process over IPC, not TCP: no ``Kernel is running over TCP without encryption``.

    ipykernel warns on every kernel started on TCP ports without CurveZMQ keys. Here the kernel always runs on
    this machine, so IPC (Unix socket files) is the natural transport: the files live in ``tmp``, a fresh folder
    only this user can open (``tempfile.mkdtemp``), no port is opened, and two workers starting kernels at once
    cannot race for the same free port. Lowering the kernel's log level would hide its real warnings too, and
    CurveZMQ needs a libsodium build of pyzmq and a kernelspec that declares it. Off POSIX systems (not
    supported here) kernels stay on TCP.
    """
    from traitlets.config import Config

    if os.name != "posix":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "connection_file": str(Path(tmp) / "kernel.json")}})

class Progress:
    """Progress lines of one model: notebook started, cell running, done / failed, elapsed and time left."""

    def __init__(self, tag: str, estimates: dict[str, tuple[float, str]], every: float):
        self.tag, self.est, self.every = tag, estimates, every
        self.total = len(estimates)
        self.done = self.failed = self.ok = self.stopped = 0  # done: notebooks that ended, whatever their status
        self.t0 = time.monotonic()
        self.nb: str | None = None
        self.nb_t0 = 0.0
        self.cell = 0  # code cell running (1-based; 0: none yet)
        self.cell_t0 = 0.0
        self.n_cells = 0
        self.code_cells: dict[int, int] = {}  # notebook cell index -> code cell number
        self.reported = False  # this notebook's failure already printed
        self.last = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)

    # -- lines
    def _say(self, text: str) -> None:
        self.last = time.monotonic()
        say(f"{self.tag} {text}")

    def _left(self) -> str:
        now = time.monotonic()
        rest = 0.0
        over = False
        for stem in list(self.est)[self.done:]:  # notebooks run in this order
            s = self.est[stem][0]
            if stem == self.nb:
                spent = now - self.nb_t0
                over = spent > s
                s = max(s - spent, 0.0)
            rest += s
        tail = " after this notebook" if over else ""
        return (f"{self.done}/{self.total} notebooks done | elapsed {timing.fmt_duration(now - self.t0)}, "
                f"about {timing.fmt_duration(rest)} left{tail}")

    def start(self) -> None:
        total = sum(s for s, _ in self.est.values())
        sources = sorted({src for _, src in self.est.values()})
        self._say(f"{self.total} notebooks, about {timing.fmt_duration(total)} ({' and '.join(sources)} durations)")
        if self.every > 0:
            self.ticker.start()

    def notebook(self, stem: str, nb) -> None:
        with self.lock:
            self.nb, self.nb_t0, self.cell, self.reported = stem, time.monotonic(), 0, False
            self.code_cells = {}
            for i, c in enumerate(nb.cells):
                if c.cell_type == "code" and c.source.strip():
                    self.code_cells[i] = len(self.code_cells) + 1
            self.n_cells = len(self.code_cells)
            self._say(f"{stem}: started, {self.n_cells} cell{'s' * (self.n_cells != 1)} | {self._left()}")

    def cell_execute(self, cell, cell_index: int) -> None:
        with self.lock:
            self.cell, self.cell_t0 = self.code_cells.get(cell_index, self.cell), time.monotonic()

    def cell_error(self, cell, cell_index: int, execute_reply) -> None:
        if "raises-exception" in cell.metadata.get("tags", []):
            return  # an expected error: nbclient goes on
        c = execute_reply.get("content", {}) if execute_reply else {}
        self.fail(f"{c.get('ename', 'Error')}: {c.get('evalue', '')}", cell)

    def fail(self, error: str, cell=None) -> None:
        """Name the failing cell at once (once per notebook)."""
        with self.lock:
            if self.reported:
                return
            self.reported = True
            first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")[:200]
            where = f"in cell {self.cell}/{self.n_cells}" if self.cell else "before its first cell"
            src = ""
            if cell is not None:
                line = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
                src = f" ({line[:60]}{'...' if len(line) > 60 else ''})"
            self._say(f"{self.nb}: FAILED {where}{src}: {first}")

    def finished(self, stem: str, status: str, seconds: float) -> None:
        with self.lock:
            self.done += 1
            self.ok += status == "ok"
            self.stopped += status.startswith("stopped")
            self.failed += status != "ok" and not status.startswith("stopped")
            self.nb = None
            self._say(f"{stem}: {status} ({seconds:.0f}s) | {self._left()}")

    def close(self) -> None:
        self.stop.set()
        if self.ticker.is_alive():
            self.ticker.join(timeout=5)
        self._say(f"finished: {self.summary()}, in {timing.fmt_duration(time.monotonic() - self.t0)}")

    def summary(self) -> str:
        """What became of every notebook: ok, failed, stopped, not run (these add up to the total)."""
        parts = [f"{self.ok} of {self.total} notebooks ok", f"{self.failed} failed"]
        if self.stopped:
            parts.append(f"{self.stopped} stopped")
        if self.total - self.done:
            parts.append(f"{self.total - self.done} not run")
        return ", ".join(parts)

    def _tick(self) -> None:
        while not self.stop.wait(min(1.0, self.every / 4)):
            with self.lock:
                if self.nb is None or time.monotonic() - self.last < self.every:
                    continue
                running = timing.fmt_duration(time.monotonic() - self.cell_t0)
                cell = f"cell {self.cell}/{self.n_cells} (running {running})" if self.cell else "starting the kernel"
                self._say(f"{self.nb}: {cell} | {self._left()}")

def _clear_old_results(folder: Path, stem: str) -> None:
    """Remove a notebook's metrics and figures before it runs: if it fails or is stopped, the report shows no
    numbers of an earlier run beside this run's status (every metrics file and figure of notebook NN starts
    with ``NN_``)."""
    for sub, pattern in (("metrics", f"{stem[:2]}_*.json"), ("figures", f"{stem[:2]}_*.png")):
        for f in (folder / sub).glob(pattern):
            f.unlink(missing_ok=True)

def execute(a, nb_path: Path, outdir: Path, progress: Progress, folder: Path | None = None) -> tuple[str, float]:
    """Execute one notebook (written to ``outdir`` whatever happens); returns (status, seconds).

    The notebook runs in a thread of its own, so that SIGTERM and SIGINT reach this process's handler (nbclient
    would take them over in the main thread, shut the kernel down and report a failed cell, and the run would
    go on with the next notebook). Stopped, the kernel is shut down here and the status is ``stopped (SIGTERM)``.
    """
    import nbformat  # here, not at the top: importing it takes 2 s, which a refused command need not wait for
    from nbclient import NotebookClient

    if folder is not None:
        _clear_old_results(folder, nb_path.stem)
    nb = nbformat.read(nb_path, as_version=4)
    progress.notebook(nb_path.stem, nb)
    t0 = time.perf_counter()
    result: dict = {"status": "ok"}
    tmp = tempfile.mkdtemp(prefix="icl-kernel-")
    client = NotebookClient(nb, timeout=a.timeout, kernel_name="python3", config=_kernel_config(tmp),
                            resources={"metadata": {"path": str(nb_path.parent)}},
                            on_cell_execute=progress.cell_execute, on_cell_error=progress.cell_error)

    def run() -> None:
        try:
            client.execute()
        except Exception as e:  # record and go on
            first = str(e).strip().splitlines()[-1][:200] if str(e).strip() else ""
            result["status"] = f"FAILED: {type(e).__name__}: {first}"
            if not STOP["signal"]:  # timeouts and a dead kernel do not pass through on_cell_error
                progress.fail(f"{type(e).__name__}: {str(e).strip() or type(e).__name__}")

    worker = threading.Thread(target=run, name=f"notebook {nb_path.stem}", daemon=True)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(timeout=0.5)
    except KeyboardInterrupt:
        _stop_kernel(client)
        worker.join(timeout=60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    status = f"stopped ({STOP['signal']})" if STOP["signal"] else result["status"]
    dt = time.perf_counter() - t0
    out = outdir / nb_path.name
    # an executed copy is a result, not a source: unpaired, so that saving it in JupyterLab writes no .py beside it
    # (jupytext.toml pairs every notebook without a pairing of its own)
    nb.metadata.setdefault("jupytext", {})["formats"] = "ipynb"
    nbformat.write(nb, out)
    try:
        sign_notebook(out)
    except Exception as e:  # an untrusted copy is still a result: say so and go on
        say(f"{progress.tag} {nb_path.stem}: not signed ({type(e).__name__}: {e}); "
            f"run `jupyter trust {out}` to show its widgets and views")
    return status, dt

def _stop_kernel(client) -> None:
    """Shut down the kernel of a running NotebookClient from another thread: SIGTERM to the kernel's process
    (its own session, so a terminal's Ctrl-C never reached it), SIGKILL after 10 s. The client's thread then
    sees a dead kernel, cleans up and returns."""
    km = getattr(client, "km", None)
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()

def default_notary():
    """The notary `jupyter trust` and JupyterLab use: this user's key and signature database in the Jupyter data
    directory (``jupyter --data-dir``; ``$JUPYTER_DATA_DIR`` moves it)."""
    from nbformat.sign import NotebookNotary

    return NotebookNotary()

def sign_notebook(path: Path, notary=None) -> None:
    """Sign the notebook file at ``path`` as trusted, as `jupyter trust` does.

    JupyterLab shows a notebook's HTML and JavaScript outputs (circuitsvis views, tqdm bars, widgets) only if it is
    trusted: if this user signed exactly this content, or ran it in JupyterLab. An executed copy written here is the
    output of this user's own run, so it is signed as written (read back from disk, so the signature matches what
    JupyterLab reads). ``notary`` (an ``nbformat.sign.NotebookNotary``) defaults to :func:`default_notary`, the one
    JupyterLab checks.
    """
    import nbformat

    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    (notary or default_notary()).sign(nb)
