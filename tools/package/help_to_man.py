#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a tool's manual page from its --help, gzipped as Debian installs man pages.

The page is the --help text itself (so the manual and the tool cannot disagree), under NAME and
the version; `--subcommand masks` adds the text of `TOOL masks --help` as its own section. The gzip
stream has no file name and no time stamp, so the same help gives the same bytes.

  help_to_man.py --name sieve-info --summary "..." --version 0.1.0 --output sieve-info.1.gz
                 [--subcommand masks] -- /path/to/sieve-info
"""

import argparse
import gzip
import io
import subprocess
import sys


def roff_line(line):
    """One line of help as roff text: backslashes and minus signs escaped, no line read as a request."""
    text = line.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def help_of(command):
    done = subprocess.run(command + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit("help_to_man: %s --help exited %d: %s" % (" ".join(command), done.returncode, done.stderr))
    return done.stdout.rstrip("\n").split("\n")


def page(name, summary, version, sections):
    out = [
        '.TH "%s" "1" "" "sieve %s" "User Commands"' % (name.upper(), version),
        ".SH NAME",
        "%s \\- %s" % (roff_line(name), roff_line(summary)),
    ]
    for title, lines in sections:
        out += [".SH " + title, ".nf"] + [roff_line(line) for line in lines] + [".fi"]
    out += [".SH SEE ALSO",
            roff_line("The guides in /usr/share/doc/sieve: README.md, DEPLOY.md, DESIGN.md, PERFORMANCE.md.")]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--subcommand", action="append", default=[])
    parser.add_argument("command", nargs="+", help="the tool (after --)")
    args = parser.parse_args()
    sections = [("DESCRIPTION", help_of(args.command))]
    for sub in args.subcommand:
        sections.append(("%s %s" % (args.name.upper(), sub.upper()), help_of(args.command + [sub])))
    text = page(args.name, args.summary, args.version, sections)
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as compressed:
        compressed.write(text.encode("utf-8"))
    with open(args.output, "wb") as f:
        f.write(raw.getvalue())


if __name__ == "__main__":
    main()
