# SPDX-License-Identifier: Apache-2.0
"""Packs a kit run's results into OUT as three files, well inside what a remote run may bring back
(at most 8 files of at most 16 MiB): summary.json (the machine and every step's result), summary.md
(the README's "Measured on a GPU" tables, made by summary_tables.py) and logs.tar.gz (every log and
per-step file). A log too large is cut to its head and tail, saying so, rather than lost. The
scheduler packs after every step (pack()), run.sh once more at the end. Each file is written beside
its place and renamed into it, so OUT never holds half a file.

    pack.py --work DIR --summary summary.json --out OUT
"""

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile

ARCHIVE_LIMIT = 15 * 2**20  # under the 16 MiB a returned file may have


def add_file(archive, path, name, cap):
    size = os.path.getsize(path)
    if size <= cap:
        archive.add(path, arcname=name)
        return
    head, tail = cap // 8, cap - cap // 8
    with open(path, "rb") as f:
        first = f.read(head)
        f.seek(size - tail)
        last = f.read()
    cut = b"\n[kit] %d bytes cut from the middle of this log (kept: first %d, last %d)\n" % (size - head - tail, head,
                                                                                             tail)
    data = first + cut + last
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(os.path.getmtime(path))
    archive.addfile(info, io.BytesIO(data))


def write_archive(work, target, cap):
    with tarfile.open(target, "w:gz") as archive:
        for base, _, names in sorted(os.walk(work)):
            for name in sorted(names):
                path = os.path.join(base, name)
                if os.path.isfile(path) and not name.endswith(".id"):
                    add_file(archive, path, os.path.join("logs", os.path.relpath(path, work)), cap)


def pack(work, summary, out, quiet=False):
    """Writes OUT's three files from the work directory; False when the tables could not be made."""
    os.makedirs(out, exist_ok=True)
    # Temporary names start with a dot: a run cut short leaves at most one, which the next pack replaces.
    shutil.copyfile(summary, os.path.join(out, ".summary.json.tmp"))
    os.replace(os.path.join(out, ".summary.json.tmp"), os.path.join(out, "summary.json"))
    here = os.path.dirname(os.path.abspath(__file__))
    tables = subprocess.run([sys.executable, os.path.join(here, "summary_tables.py"), summary],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    with open(os.path.join(out, ".summary.md.tmp"), "wb") as f:
        f.write(tables.stdout)
    os.replace(os.path.join(out, ".summary.md.tmp"), os.path.join(out, "summary.md"))
    archive = os.path.join(out, ".logs.tar.gz.tmp")
    for cap in (8 * 2**20, 2 * 2**20, 256 * 2**10):  # smaller caps until the archive fits
        write_archive(work, archive, cap)
        if os.path.getsize(archive) <= ARCHIVE_LIMIT:
            break
    size = os.path.getsize(archive)
    os.replace(archive, os.path.join(out, "logs.tar.gz"))
    if not quiet:
        print("results: %s (summary.json, summary.md, logs.tar.gz: %d KiB)" % (out, size // 1024))
    if tables.returncode != 0:
        print("summary_tables.py failed (its output is in summary.md)", file=sys.stderr)
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    return 0 if pack(args.work, args.summary, args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
