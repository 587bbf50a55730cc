# SPDX-License-Identifier: Apache-2.0
"""Lists the device code embedded in ELF files, as `cuobjdump --list-elf --list-ptx` would (which
the CPU machines here do not have): the .nv_fatbin section holds fat binaries, each a 16-byte header
(magic 0xBA55ED50, version, header size, size of its entries) followed by entries, each with its own
header: kind at offset 0 (1 = PTX, 2 = ELF machine code), header size at 4, padded payload size at 8,
architecture at 28 (90 = sm_90 / compute_90). The walk must land exactly on each fat binary's end,
so a misread layout fails instead of listing nonsense.

    fatbin_archs.py [--require-sm N] FILE...
Prints "FILE: ELF sm_90, PTX compute_90, ..." or "FILE: no device code" per file. With --require-sm,
exit 1 unless every file that holds device code holds sm_N machine code and PTX of at least
compute_N (which the driver compiles for later GPUs).
"""

import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
KINDS = {1: "PTX", 2: "ELF"}


def fatbin_section(path):
    """The bytes of the file's .nv_fatbin section (b"" when it has none)."""
    with tempfile.NamedTemporaryFile() as out:
        done = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", path, out.name],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise SystemExit("objcopy failed on %s: %s" % (path, done.stdout.decode(errors="replace")))
        return out.read()


def entries(data):
    """(kind, architecture) of every entry of every fat binary in data."""
    found, offset = [], 0
    while offset + 16 <= len(data):
        magic, _, header_size, size = struct.unpack_from("<IHHQ", data, offset)
        if magic != MAGIC:
            offset += 8  # fat binaries are 8-byte aligned; padding lies between them
            continue
        entry, end = offset + header_size, offset + header_size + size
        while entry < end:
            kind, _, entry_header, padded = struct.unpack_from("<HHII", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if kind not in KINDS or entry_header < 32:
                raise SystemExit("unexpected fat binary entry (kind %d, header %d bytes) at %d"
                                 % (kind, entry_header, entry))
            found.append((KINDS[kind], arch))
            entry += entry_header + padded
        if entry != end:
            raise SystemExit("fat binary at %d: entries end at %d, not at its end %d" % (offset, entry, end))
        offset = end
    return found


def main():
    args = sys.argv[1:]
    sm = None
    if args[:1] == ["--require-sm"] and len(args) >= 2:
        sm, args = int(args[1]), args[2:]
    if not args or any(a.startswith("--") for a in args):
        raise SystemExit("usage: fatbin_archs.py [--require-sm N] FILE...")
    missing = []
    for path in args:
        code = entries(fatbin_section(path))
        listed = ", ".join("%s %s_%d" % (kind, "sm" if kind == "ELF" else "compute", arch) for kind, arch in code)
        print("%s: %s" % (path, listed or "no device code"))
        if sm is not None and code:
            if ("ELF", sm) not in code:
                missing.append("%s: no sm_%d machine code" % (path, sm))
            if not any(kind == "PTX" and arch >= sm for kind, arch in code):
                missing.append("%s: no PTX of compute_%d or later (for GPUs after sm_%d)" % (path, sm, sm))
    for line in missing:
        print(line)
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
