"""Stands in for `python -m delegate.runtime.class_archive ARCHIVE` in tests: records that it
was started (and with what), holds its claim a moment as a real build would, then writes a
small file at ARCHIVE."""

import os
import sys
import time
from pathlib import Path

archive = Path(sys.argv[1])
with open(archive.with_name("started.log"), "a") as log:
    log.write(f"{os.getpid()} {archive.name}\n")
archive.with_name(archive.name + ".building").write_text(str(os.getpid()))
time.sleep(1.5)
archive.write_bytes(b"not really an archive")
archive.with_name(archive.name + ".building").unlink(missing_ok=True)
