"""A progress line on stderr for long runs: redrawn in place on a terminal, a plain line every
few seconds otherwise (CI logs), silent with --quiet."""
from __future__ import annotations

import sys
import time


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}P"


class Progress:
    def __init__(self, total_bytes: int, total_files: int, enabled: bool = True, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total_bytes = max(total_bytes, 1)
        self.total_files = total_files
        self.done_bytes = 0
        self.files_done = 0
        self.frames = 0
        self.start = time.monotonic()
        self._last = 0.0
        self._reading: dict[str, tuple[int, int]] = {}  # files being read (--jobs): bytes, frames

    def update(self, file_label: str, file_bytes_done: int, frames: int, force: bool = False) -> None:
        if not self.enabled:
            return
        self._reading[file_label] = (file_bytes_done, frames)
        file_bytes_done = sum(b for b, _ in self._reading.values())
        frames = sum(f for _, f in self._reading.values())
        now = time.monotonic()
        interval = 0.2 if self.tty else 10.0
        if not force and now - self._last < interval:
            return
        self._last = now
        done = min(self.done_bytes + file_bytes_done, self.total_bytes)
        pct = 100.0 * done / self.total_bytes
        rate = (self.frames + frames) / max(now - self.start, 1e-6)
        width = 24
        filled = int(width * pct / 100)
        bar = "#" * filled + "-" * (width - filled)
        name = file_label if len(file_label) <= 40 else "..." + file_label[-37:]
        line = (
            f"[{bar}] {pct:5.1f}%  file {self.files_done + 1}/{self.total_files}  "
            f"{_human(self.frames + frames)} pkts  {_human(rate)} pkt/s  {name}"
        )
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def file_done(self, size: int, frames: int, file_label: str | None = None) -> None:
        self._reading.pop(file_label, None)
        self.done_bytes += size
        self.files_done += 1
        self.frames += frames

    def close(self) -> None:
        """On a terminal, the line left on screen says the run's end (not the last redraw's
        "15.8% file 1/15"); nothing when no line was drawn."""
        if self.tty and self._last:
            elapsed = max(time.monotonic() - self.start, 1e-6)
            line = (f"[{'#' * 24}] 100.0%  {self.files_done}/{self.total_files} files  {_human(self.frames)} pkts  "
                    f"{_human(self.frames / elapsed)} pkt/s  done")
            self.stream.write("\r" + line[:150].ljust(150) + "\n")
            self.stream.flush()
