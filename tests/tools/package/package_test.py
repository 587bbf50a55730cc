#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the Debian package the way a user meets it, without installing it over this machine.

`build` (the ctest fixture) runs CPack and extracts the .deb with `dpkg-deb -x` into WORK/root; every
other check reads that root as if it were /:

  contents      the file list and control fields (name, version from CMake's project VERSION,
                maintainer, section, Recommends/Suggests)
  depends       Depends names exactly the packages that own the shared libraries the packaged
                programs and library load (readelf NEEDED), hwloc's among them, plus python3 (the
                module and gloo_allreduce.py); Recommends names libibverbs1 and its providers
                (dlopened by the verbs transport)
  control       maintainer scripts: the loader's cache through dpkg's ldconfig trigger, never an
                ldconfig call; py3compile at configure and py3clean at removal
  changelog     changelog.gz's latest entry is the project's version; changelog and man pages
                are gzipped without name or time stamp
  man_pages     a page per tool in bin/, rendered by man without a warning, holding its --help
  hardening     every ELF file is linked with -z relro -z now
  no_build_paths  no packaged file holds the path of the source or build tree
  relocated     the installed tools moved away from the library fail with a clear message naming
                where they looked, never falling back to the build tree
  sieve_info    the installed sieve-info finds the installed library and reports it (--json)
  tools         the installed sieve-perf, without --plugin, streams through the installed library
  netlab        the installed netlab.sh knows its version and, as root with iptables, starts the
                installed sieve-impair where the kernel has no netem (forced with NETLAB_IMPAIRER)
  c_api         tests/plugin/c_api_test.c built with `pkg-config --cflags --libs sieve`, run on it
  pkg_config    a small program built with pkg-config sees the same version in header and library
  cmake_config  find_package(Sieve) gives Sieve::sieve; a too-new version request is refused
  python        `import sieve` from the installed module: the clear "not loaded" error without
                LD_PRELOAD, the preloaded copy with it
  usr_local     `cmake --install --prefix /usr/local` puts the module, library and sieve.pc where
                Debian's python3, loader and pkg-config look
  lintian       lintian reports nothing but what the package's overrides justify (skipped when
                lintian is not installed)

Run one: package_test.py --build-dir B --source-dir S --work W --version V --cpack CPACK CHECK
"""

import argparse
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIBRARY = "libnccl-net-sieve.so"
PREFIX = "usr"
# Debian's multiarch library directory (usr/lib/x86_64-linux-gnu on amd64).
MULTIARCH = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], stdout=subprocess.PIPE,
                           text=True).stdout.strip()
LIBDIR = PREFIX + "/lib/" + MULTIARCH
PYTHONDIR = PREFIX + "/lib/python3/dist-packages"
TOOLS = ("sieve-info", "sieve-perf", "sieve-bench", "sieve-impair")
DOCDIR = PREFIX + "/share/doc/sieve"
# What a user installs the package for; anything else the package carries must be accounted for here.
EXPECTED_FILES = {
    LIBDIR + "/" + LIBRARY,
    PREFIX + "/include/sieve.h",
    PREFIX + "/include/sieve_version.h",
    LIBDIR + "/pkgconfig/sieve.pc",
    LIBDIR + "/cmake/Sieve/SieveConfig.cmake",
    LIBDIR + "/cmake/Sieve/SieveConfigVersion.cmake",
    LIBDIR + "/cmake/Sieve/SieveTargets.cmake",
    PYTHONDIR + "/sieve/__init__.py",
    PYTHONDIR + "/sieve/__main__.py",
    PYTHONDIR + "/sieve/_constants.py",
    PYTHONDIR + "/sieve/_library.py",
    PYTHONDIR + "/sieve/_installed.py",
    PYTHONDIR + "/sieve/py.typed",
    PYTHONDIR + "/sieve/_kernels.py",
    PYTHONDIR + "/sieve/_launch.py",
    PYTHONDIR + "/sieve/_probe.py",
    PYTHONDIR + "/sieve/masks.py",
    PYTHONDIR + "/sieve/fsdp_masks.py",
    PREFIX + "/share/sieve/netlab.sh",
    PREFIX + "/share/sieve/gloo_allreduce.py",
    PREFIX + "/share/sieve/ddp_train.py",
    PREFIX + "/share/sieve/fsdp2_train.py",
    DOCDIR + "/README.md",
    DOCDIR + "/DEPLOY.md",
    DOCDIR + "/DESIGN.md",
    DOCDIR + "/PERFORMANCE.md",
    DOCDIR + "/changelog.gz",
    DOCDIR + "/copyright",
    PREFIX + "/share/lintian/overrides/sieve",
} | {PREFIX + "/bin/" + tool for tool in TOOLS} | {PREFIX + "/share/man/man1/%s.1.gz" % tool for tool in TOOLS}
# The imported-target file CMake writes per build type (SieveTargets-relwithdebinfo.cmake, ...).
OPTIONAL_FILE_PATTERNS = [re.compile(re.escape(LIBDIR) + r"/cmake/Sieve/SieveTargets-[a-z]+\.cmake"),
                          # the Python package's other modules (sieve.ddp, sieve.fsdp, ...)
                          re.compile(re.escape(PYTHONDIR) + r"/sieve/[a-z][a-z0-9_]*\.py")]


class CheckFailed(Exception):
    pass


class Skipped(Exception):
    """What the check needs is not on this machine (exit status 77: ctest reports it skipped)."""


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def run(cmd, env=None, cwd=None, expect_ok=True):
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if expect_ok and done.returncode != 0:
        raise CheckFailed("%s exited %d\nstdout: %s\nstderr: %s" % (
            " ".join(cmd), done.returncode, done.stdout, done.stderr))
    return done


def clean_env(**extra):
    """The environment of a fresh shell on a node: none of the build's or a job's Sieve settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SIEVE_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH",
                                                       "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH")}
    env.update(extra)
    return env


class Package:
    def __init__(self, args):
        self.args = args
        self.root = os.path.join(args.work, "root")
        self.deb_file = os.path.join(args.work, "deb-path")

    @property
    def deb(self):
        with open(self.deb_file) as f:
            return f.read().strip()

    def path(self, relative):
        return os.path.join(self.root, relative)

    def scratch(self, name):
        d = os.path.join(self.args.work, "scratch-" + name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def field(self, name):
        return run(["dpkg-deb", "-f", self.deb, name]).stdout.strip()

    def files(self):
        listing = run(["dpkg-deb", "-c", self.deb]).stdout.splitlines()
        names = set()
        for line in listing:
            if line.startswith("-") or line.startswith("l"):
                name = line.split(None, 5)[5].split(" -> ")[0]
                names.add(os.path.normpath(name))
        return names

    def pkg_config_env(self):
        return clean_env(PKG_CONFIG_PATH=self.path(LIBDIR + "/pkgconfig"))

    def loader_env(self, **extra):
        # The extracted /usr/lib stands in for the system's: the loader finds the library there by name.
        return clean_env(LD_LIBRARY_PATH=self.path(LIBDIR), **extra)


# ---- the fixture ------------------------------------------------------------------------------

def build(p):
    shutil.rmtree(p.args.work, ignore_errors=True)
    out = os.path.join(p.args.work, "cpack")
    os.makedirs(out)
    run([p.args.cpack, "-G", "DEB", "--config", os.path.join(p.args.build_dir, "CPackConfig.cmake"), "-B", out])
    debs = glob.glob(os.path.join(out, "*.deb"))
    check(len(debs) == 1, "CPack made %d .deb files in %s, expected one: %s" % (len(debs), out, debs))
    run(["dpkg-deb", "-x", debs[0], p.root])
    with open(p.deb_file, "w") as f:
        f.write(debs[0] + "\n")
    print("built and extracted", debs[0])


# ---- checks -----------------------------------------------------------------------------------

def contents(p):
    files = p.files()
    missing = sorted(EXPECTED_FILES - files)
    check(not missing, "the package lacks %s" % missing)
    unexpected = sorted(f for f in files - EXPECTED_FILES
                        if not any(pattern.fullmatch(f) for pattern in OPTIONAL_FILE_PATTERNS))
    check(not unexpected, "the package carries files nobody asked for: %s" % unexpected)
    check(p.field("Package") == "sieve", "Package is %r" % p.field("Package"))
    check(p.field("Version") == p.args.version,
          "Version %r is not the project's %s" % (p.field("Version"), p.args.version))
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    check(p.field("Architecture") == arch, "Architecture %r on %s" % (p.field("Architecture"), arch))
    header = open(p.path(PREFIX + "/include/sieve_version.h")).read()
    check('#define SIEVE_VERSION_STRING "%s"' % p.args.version in header,
          "the installed sieve_version.h does not carry version %s:\n%s" % (p.args.version, header))
    # NCCL dlopens exactly libnccl-net-sieve.so, and the library must answer to that name.
    lib = p.path(LIBDIR + "/" + LIBRARY)
    check(not os.path.islink(lib), "%s is a symlink: NCCL and LD_PRELOAD would map the target's name" % lib)
    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", run(["readelf", "-d", lib]).stdout)
    check(soname and soname.group(1) == LIBRARY, "SONAME of %s is %s" % (lib, soname and soname.group(1)))
    for tool in TOOLS:
        check(os.access(p.path(PREFIX + "/bin/" + tool), os.X_OK), "%s is not executable" % tool)
    maintainer = p.field("Maintainer")
    check(re.fullmatch(r"[^<>]+ <[^@<>\s]+@[^@<>\s]+\.[a-z]+>", maintainer) and "localhost" not in maintainer,
          "Maintainer %r is not a name with a mail address" % maintainer)
    check(p.field("Section") == "net", "Section %r" % p.field("Section"))
    for line in p.field("Description").splitlines():
        check(len(line) <= 80, "Description line longer than 80 characters: %r" % line)
    recommends = p.field("Recommends")
    for name in ("iperf3", "iproute2"):
        check(name in recommends, "Recommends %r lacks %s (sieve-perf, the namespace lab)" % (recommends, name))
    check("python3-venv" in p.field("Suggests"), "Suggests %r lacks python3-venv (--gloo's PyTorch from pip)" %
          p.field("Suggests"))
    print("%d files, all accounted for; version %s; maintainer %s" % (len(files), p.args.version, maintainer))


def elf_files(root):
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def owning_package(soname):
    """The installed Debian package that ships the shared library the loader resolves `soname` to."""
    cache = run(["ldconfig", "-p"]).stdout
    arch_tag = "x86-64" if os.uname().machine == "x86_64" else ""
    paths = [m.group(2) for m in re.finditer(r"^\s*%s \(([^)]*)\) => (\S+)" % re.escape(soname), cache, re.M)
             if arch_tag in m.group(1)]
    check(paths, "the loader does not know %s (ldconfig -p)" % soname)
    for path in paths:
        for candidate in (path, os.path.realpath(path)):
            done = run(["dpkg", "-S", candidate], expect_ok=False)
            if done.returncode == 0:
                return done.stdout.split(":")[0].strip()
            # usr-merge: the package may list /lib/... for what the loader calls /usr/lib/...
            if candidate.startswith("/usr/"):
                done = run(["dpkg", "-S", candidate[len("/usr"):]], expect_ok=False)
                if done.returncode == 0:
                    return done.stdout.split(":")[0].strip()
    raise CheckFailed("no installed package owns %s (%s): it cannot be a Depends" % (soname, paths))


def depends(p):
    field = p.field("Depends")
    declared = {re.split(r"[\s(]", alternative.strip())[0] for alternative in re.split(r"[,|]", field)
                if alternative.strip()}
    provided = {os.path.basename(f) for f in p.files()}
    needed = {}
    for path in elf_files(p.root):
        dynamic = run(["readelf", "-d", path]).stdout
        for soname in re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dynamic):
            if soname not in provided:
                needed.setdefault(soname, set()).add(os.path.relpath(path, p.root))
    expected = {}
    for soname, users in needed.items():
        expected.setdefault(owning_package(soname), set()).add(soname)
    # Not ELF: the Python module and gloo_allreduce.py (#!/usr/bin/python3).
    expected["python3"] = {"sieve/", "gloo_allreduce.py"}
    check(any(name.startswith("libhwloc") for name in declared), "Depends lacks hwloc's library: %r" % field)
    check(set(expected) == declared,
          "Depends %r names %s, but the packaged binaries load libraries of %s (%s)" %
          (field, sorted(declared), sorted(expected), {k: sorted(v) for k, v in expected.items()}))
    print("Depends: %s\nloaded: %s" % (field, {k: sorted(v) for k, v in expected.items()}))
    # libibverbs is loaded at run time (dlopen), never NEEDED: it is recommended, not required.
    recommends = p.field("Recommends")
    check("libibverbs1" in recommends and "ibverbs-providers" in recommends,
          "Recommends %r lacks libibverbs1 / ibverbs-providers (the verbs transport dlopens them)" % recommends)
    check("ibverbs" not in field, "Depends %r names verbs, which must stay optional" % field)


def control(p):
    work = p.scratch("control")
    run(["dpkg-deb", "-e", p.deb, work])
    scripts = {name: open(os.path.join(work, name)).read() for name in ("postinst", "prerm", "postrm")
               if os.path.exists(os.path.join(work, name))}
    check(set(scripts) == {"postinst", "prerm", "postrm"}, "maintainer scripts: %s" % sorted(scripts))
    for name, text in scripts.items():
        check(text.startswith("#!/bin/sh\n") and "\nset -e\n" in text, "%s is not a /bin/sh script with set -e" % name)
        check("ldconfig" not in re.sub(r"(?m)^#.*$", "", text), "%s calls ldconfig: use the trigger" % name)
        check(os.stat(os.path.join(work, name)).st_mode & 0o777 == 0o755, "%s is not mode 755" % name)
    triggers = open(os.path.join(work, "triggers")).read()
    check(re.search(r"(?m)^activate-noawait ldconfig$", triggers), "no ldconfig trigger: %r" % triggers)
    check("py3compile -p sieve" in scripts["postinst"], "postinst does not byte-compile the module")
    check("py3clean -p sieve" in scripts["prerm"], "prerm does not remove the byte-code")
    print("maintainer scripts and the ldconfig trigger as Debian's tools write them")


def gunzip(path):
    with open(path, "rb") as f:
        raw = f.read()
    # RFC 1952: no file name (FLG.FNAME) and no time stamp (MTIME), so the bytes depend on the text only.
    check(raw[3] & 0x08 == 0 and raw[4:8] == b"\0\0\0\0", "%s carries a file name or a time stamp" % path)
    return gzip.decompress(raw).decode("utf-8")


def changelog(p):
    text = gunzip(p.path(DOCDIR + "/changelog.gz"))
    first = re.match(r"sieve \(([^)]+)\) \S+; urgency=\S+\n", text)
    check(first and first.group(1) == p.args.version,
          "the changelog's latest entry is %r, the project is %s: add an entry to tools/package/debian/changelog" %
          (first and first.group(1), p.args.version))
    print("changelog.gz starts with version", first.group(1))


def man_pages(p):
    for tool in TOOLS:
        page = p.path(PREFIX + "/share/man/man1/%s.1.gz" % tool)
        source = gunzip(page)
        check(re.search(r"(?m)^%s \\- \S" % re.escape(tool.replace("-", "\\-")), source), "%s: no NAME line" % page)
        done = run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page], env=clean_env(MANWIDTH="80"))
        check(not done.stderr.strip(), "man warns about %s:\n%s" % (page, done.stderr))
        help_text = run([p.path(PREFIX + "/bin/" + tool), "--help"], env=clean_env()).stdout
        first_option = next(line for line in help_text.splitlines() if line.strip().startswith("--"))
        check(first_option.strip().split()[0].replace("-", "\\-") in source, "%s does not hold its --help" % page)
    print("manual pages of", ", ".join(TOOLS))


def hardening(p):
    for path in elf_files(p.root):
        dynamic = run(["readelf", "-d", "-l", "-W", path]).stdout
        name = os.path.relpath(path, p.root)
        check("GNU_RELRO" in dynamic, "%s has no RELRO segment (-z relro)" % name)
        check("BIND_NOW" in dynamic or re.search(r"FLAGS_1\).*\bNOW\b", dynamic), "%s is not bound now (-z now)" % name)
    print("every ELF file has RELRO and BIND_NOW")


def no_build_paths(p):
    trees = {os.path.realpath(p.args.source_dir), os.path.realpath(p.args.build_dir), p.args.source_dir,
             p.args.build_dir}
    needles = sorted({t.rstrip("/").encode() for t in trees if len(t) > 1})
    found = []
    for directory, _, names in os.walk(p.root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if path.endswith(".gz"):
                data = gzip.decompress(data)
            found += ["%s holds %s" % (os.path.relpath(path, p.root), n.decode()) for n in needles if n in data]
    check(not found, "build paths in the package: %s" % found)
    print("no packaged file names %s" % [n.decode() for n in needles])


def relocated(p):
    """The tools copied away from the library: a clear message naming the installed location, exit 2,
    and no trace of the tree they were built in."""
    # Outside the build tree, as on a node: nothing of the build may be found from there.
    work = tempfile.mkdtemp(prefix="sieve-relocated-")
    try:
        bindir = os.path.join(work, "usr", "bin")
        os.makedirs(bindir)
        for tool in ("sieve-perf", "sieve-bench"):
            shutil.copy2(p.path(PREFIX + "/bin/" + tool), bindir)
        missing = os.path.join(work, "usr", "lib", MULTIARCH, LIBRARY)
        for tool, args in (("sieve-perf", ["--smoke"]), ("sieve-bench", ["--loopback", "--quiet"])):
            done = run([os.path.join(bindir, tool)] + args, env=clean_env(), cwd=work, expect_ok=False)
            said = done.stdout + done.stderr
            check(done.returncode == 2, "%s without its library exited %d: %s" % (tool, done.returncode, said))
            check("libnccl-net-sieve.so is not installed beside %s (%s does not exist)" % (tool, missing) in said,
                  "%s does not say where it looked: %s" % (tool, said))
            check(p.args.build_dir not in said and "/plugin/" not in said, "%s names a build tree: %s" % (tool, said))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("the tools moved away from the library name", missing)


def netlab(p):
    script = p.path(PREFIX + "/share/sieve/netlab.sh")
    said = run(["bash", script, "--version"], env=clean_env()).stdout.strip()
    check(said == "netlab.sh " + p.args.version, "the installed netlab.sh --version says %r" % said)
    if os.geteuid() != 0 or not shutil.which("iptables"):
        print("netlab.sh --version: %s (impairer part skipped: needs root and iptables)" % said)
        return
    prefix = "pk%d" % os.getpid()
    env = clean_env(NETLAB_IMPAIRER="nfqueue", PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    try:
        up = run(["bash", script, "--prefix", prefix, "up", "2", "--delay", "1ms"], env=env, expect_ok=False)
        check(up.returncode == 0, "the installed netlab.sh could not impair with the installed sieve-impair:\n%s%s" %
              (up.stdout, up.stderr))
        stats = run(["bash", script, "--prefix", prefix, "impair-stats", "0"], env=env).stdout
        check(stats.strip(), "no sieve-impair counters for node 0")
    finally:
        run(["bash", script, "--prefix", prefix, "down"], env=env, expect_ok=False)
    print("netlab.sh --version: %s; it started the packaged sieve-impair" % said)


def loader_directories(conf):
    """The directories ld.so.conf names, its `include`s followed."""
    found = []
    for line in open(conf):
        line = line.split("#")[0].strip()
        if line.startswith("include "):
            for included in sorted(glob.glob(os.path.join(os.path.dirname(conf), line.split(None, 1)[1]))):
                found += loader_directories(included)
        elif line:
            found.append(line)
    return found


def usr_local(p):
    """`cmake --install build --prefix /usr/local`, as the README says: everything lands where Debian's
    loader, pkg-config and python3 look without any setting."""
    root = tempfile.mkdtemp(prefix="sieve-usr-local-")
    try:
        run(["cmake", "--install", p.args.build_dir, "--prefix", "/usr/local"], env=clean_env(DESTDIR=root))
        installed = {"/" + os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}

        def where(name):
            found = sorted(f for f in installed if f.endswith("/" + name))
            check(len(found) == 1, "%s installed %d times: %s" % (name, len(found), found))
            return os.path.dirname(found[0])
        python_path = run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                          env=clean_env()).stdout.splitlines()
        package = os.path.dirname(where("_library.py"))
        check(package in python_path, "the package sieve went to %s, not on /usr/bin/python3's sys.path %s" %
              (package, python_path))
        searched = loader_directories("/etc/ld.so.conf")
        check(where(LIBRARY) in searched, "%s went to %s, which /etc/ld.so.conf does not name (%s)" %
              (LIBRARY, where(LIBRARY), searched))
        pc_path = run(["pkg-config", "--variable", "pc_path", "pkg-config"], env=clean_env()).stdout.strip().split(":")
        check(where("sieve.pc") in pc_path, "sieve.pc went to %s, not on pkg-config's path %s" %
              (where("sieve.pc"), pc_path))
        print("/usr/local: package in %s, library in %s, sieve.pc in %s" % (
            where("_library.py"), where(LIBRARY), where("sieve.pc")))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def lintian(p):
    if not shutil.which("lintian"):
        raise Skipped("lintian is not installed (tools/install-deps.sh installs it)")
    done = run(["lintian", "--fail-on", "error,warning,info", "--display-info", "--tag-display-limit", "0", p.deb],
               expect_ok=False)
    tags = [line for line in (done.stdout + done.stderr).splitlines() if re.match(r"[EWIX]: ", line)]
    check(done.returncode == 0 and not tags, "lintian:\n%s" % "\n".join(tags or [done.stdout, done.stderr]))
    overridden = run(["lintian", "--show-overrides", "--display-info", p.deb], expect_ok=False).stdout
    print("lintian: clean; overridden (tools/package/debian/lintian-overrides says why):")
    print("\n".join(line for line in overridden.splitlines() if line.startswith("O: ")))


def sieve_info(p):
    tool = p.path(PREFIX + "/bin/sieve-info")
    done = run([tool, "--json"], env=clean_env(), cwd=p.scratch("sieve_info"))
    report = json.loads(done.stdout)
    plugin = report["plugin"]
    library = os.path.realpath(p.path(LIBDIR + "/" + LIBRARY))
    check(os.path.realpath(plugin["library"]) == library,
          "the installed sieve-info loaded %r, not the installed %s" % (plugin["library"], library))
    check(not plugin["error"], "sieve-info could not load the installed library: %s" % plugin["error"])
    check(plugin["name"] == "Sieve", "plugin name %r" % plugin["name"])
    check(report.get("version") == p.args.version, "sieve-info reports version %r, the project is %s" %
          (report.get("version"), p.args.version))
    print("sieve-info loaded", plugin["library"], "ABI", plugin["used_version"])


def tools(p):
    """The installed sieve-perf, run without --plugin, streams through the installed library, not the
    build tree it was compiled in."""
    work = p.scratch("tools")
    result = os.path.join(work, "perf.json")
    run([p.path(PREFIX + "/bin/sieve-perf"), "--smoke", "--json", result], env=clean_env(), cwd=work)
    with open(result) as f:
        used = json.load(f)["plugin"]
    library = os.path.realpath(p.path(LIBDIR + "/" + LIBRARY))
    check(os.path.realpath(used) == library, "the installed sieve-perf used %r, not the installed %s" % (used, library))
    print("sieve-perf streamed through", used)


def compile_with_pkg_config(p, sources, output, extra_flags=()):
    flags = run(["pkg-config", "--cflags", "--libs", "sieve"], env=p.pkg_config_env()).stdout.split()
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", *extra_flags, *sources, "-o", output, *flags])
    return flags


def c_api(p):
    work = p.scratch("c_api")
    # c_api_test.c includes "plugin/sieve.h", the in-tree path: point that name at the installed header.
    os.makedirs(os.path.join(work, "plugin"))
    with open(os.path.join(work, "plugin", "sieve.h"), "w") as f:
        f.write("#include <sieve.h>\n")
    program = os.path.join(work, "c_api_test")
    compile_with_pkg_config(p, [os.path.join(p.args.source_dir, "tests/plugin/c_api_test.c")], program,
                            ["-I" + work, "-pedantic"])
    done = run([program], env=p.loader_env(), cwd=work)
    print(done.stdout + done.stderr)


SMALL_PROGRAM = r"""
#include <sieve.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  sieve_stats_t stats;
  memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  if (sieve_stats_get(&stats) != SIEVE_OK) return fprintf(stderr, "%s\n", sieve_last_error()), 1;
  printf("%s %s\n", SIEVE_VERSION_STRING, sieve_version());
  return 0;
}
"""


def expect_versions(p, output):
    check(output.split() == [p.args.version, p.args.version],
          "header and library versions %r, the project is %s" % (output, p.args.version))


def pkg_config(p):
    work = p.scratch("pkg_config")
    source = os.path.join(work, "main.c")
    with open(source, "w") as f:
        f.write(SMALL_PROGRAM)
    program = os.path.join(work, "main")
    flags = compile_with_pkg_config(p, [source], program)
    check(any(f.startswith("-I" + p.root) for f in flags) and "-lnccl-net-sieve" in flags,
          "pkg-config gave %s: not the extracted root's include and library" % flags)
    expect_versions(p, run([program], env=p.loader_env()).stdout)
    modversion = run(["pkg-config", "--modversion", "sieve"], env=p.pkg_config_env()).stdout.strip()
    check(modversion == p.args.version, "pkg-config --modversion sieve says %r" % modversion)
    print("pkg-config:", " ".join(flags))


CMAKE_PROJECT = """cmake_minimum_required(VERSION 3.18)
project(uses_sieve C)
find_package(Sieve %s REQUIRED)
add_executable(main main.c)
target_link_libraries(main PRIVATE Sieve::sieve)
"""


def cmake_config(p):
    work = p.scratch("cmake_config")
    source_dir = os.path.join(work, "src")
    os.makedirs(source_dir)
    with open(os.path.join(source_dir, "main.c"), "w") as f:
        f.write(SMALL_PROGRAM)
    with open(os.path.join(source_dir, "CMakeLists.txt"), "w") as f:
        f.write(CMAKE_PROJECT % p.args.version)
    cmake = os.path.join(os.path.dirname(p.args.cpack), "cmake")
    env = clean_env()
    build_dir = os.path.join(work, "build")
    run([cmake, "-S", source_dir, "-B", build_dir, "-DCMAKE_PREFIX_PATH=" + p.path(PREFIX)], env=env)
    run([cmake, "--build", build_dir], env=env)
    expect_versions(p, run([os.path.join(build_dir, "main")], env=p.loader_env()).stdout)

    # A version newer than the package's must be refused by SieveConfigVersion.cmake.
    major = int(p.args.version.split(".")[0])
    with open(os.path.join(source_dir, "CMakeLists.txt"), "w") as f:
        f.write(CMAKE_PROJECT % ("%d.0" % (major + 1)))
    refused = run([cmake, "-S", source_dir, "-B", os.path.join(work, "build-too-new"),
                   "-DCMAKE_PREFIX_PATH=" + p.path(PREFIX)], env=env, expect_ok=False)
    check(refused.returncode != 0 and "Sieve" in refused.stderr,
          "find_package(Sieve %d.0) was not refused:\n%s" % (major + 1, refused.stderr))
    print("find_package(Sieve) built and ran; version %d.0 refused" % (major + 1))


def python(p):
    work = p.scratch("python")
    interpreter = "/usr/bin/python3"
    # Installed to /usr, the module needs no path tricks: Debian's python3 looks there.
    search_path = run([interpreter, "-c", "import sys; print('\\n'.join(sys.path))"], env=clean_env()).stdout
    check("/" + PYTHONDIR in search_path.splitlines(), "/%s is not on %s's sys.path" % (PYTHONDIR, interpreter))
    env = clean_env(PYTHONPATH=p.path(PYTHONDIR))
    module = os.path.realpath(p.path(PYTHONDIR + "/sieve/__init__.py"))
    library = os.path.realpath(p.path(LIBDIR + "/" + LIBRARY))

    # Without the library (a job rolled back): a training script's calls are no-ops that say so once,
    # while asking for the library itself is the clear error.
    script = ("import os, sieve; print(os.path.realpath(sieve.__file__)); print(sum(sieve.stats().values())); "
              "sieve.library()")
    alone = run([interpreter, "-c", script], env=env, cwd=work, expect_ok=False)
    lines = alone.stdout.split()
    check(alone.returncode != 0 and lines[1:2] == ["0"],
          "without the library: sieve.stats() did not give zeros, or sieve.library() did not fail:\n" + alone.stdout)
    check(lines[:1] == [module], "imported %r, not the installed %s" % (lines[:1], module))
    said = alone.stderr.strip().splitlines()
    warned = [line for line in said if line.startswith("sieve: ") and "is not loaded in this process" in line]
    check(len(warned) == 1 and said[-1].startswith("sieve.SieveError: %s is not loaded in this process" % LIBRARY)
          and "LD_PRELOAD" in said[-1], "without LD_PRELOAD: not one warning and one clear error:\n" + alone.stderr)

    script = ("import os, sieve; print(os.path.realpath(sieve.__file__)); "
              "print(os.path.realpath(sieve.library()._name)); print(sieve.stats()['masks_published'])")
    preloaded = run([interpreter, "-c", script], env=dict(env, LD_PRELOAD=library), cwd=work)
    lines = preloaded.stdout.split()
    check(lines[:2] == [module, library], "with LD_PRELOAD: module and library %s" % lines[:2])
    print("without LD_PRELOAD:", alone.stderr.strip().splitlines()[-1])

    # library_path() and `python -m sieve` find the packaged library from the install record, wherever
    # the tree is unpacked (the record is relative).
    found = run([interpreter, "-c", "import os, sieve; print(os.path.realpath(sieve.library_path()))"], env=env,
                cwd=work)
    check(found.stdout.strip() == library,
          "library_path() is %r, not the installed %s" % (found.stdout.strip(), library))
    version = run([interpreter, "-c", "import sieve; print(sieve.__version__)"], env=env, cwd=work).stdout.strip()
    check(version == p.args.version, "sieve.__version__ is %r, the project's %s" % (version, p.args.version))
    told = run([interpreter, "-m", "sieve"], env=env, cwd=work)
    named = re.findall(r"(?m)^library: (/\S+)$", told.stdout)
    check(named and os.path.realpath(named[0]) == library and "export LD_PRELOAD=" in told.stdout,
          "python -m sieve does not name the installed library:\n" + told.stdout)
    print("with LD_PRELOAD:", lines)


CHECKS = {f.__name__: f for f in (build, contents, depends, control, changelog, man_pages, hardening, no_build_paths,
                                  relocated, sieve_info, tools, netlab, c_api, pkg_config, cmake_config, python,
                                  usr_local, lintian)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--cpack", required=True)
    parser.add_argument("check", choices=sorted(CHECKS))
    args = parser.parse_args()
    package = Package(args)
    if args.check != "build" and not os.path.isfile(package.deb_file):
        print("no extracted package in %s: run the package_build test first" % args.work, file=sys.stderr)
        return 1
    try:
        CHECKS[args.check](package)
    except CheckFailed as failure:
        print("FAIL %s: %s" % (args.check, failure), file=sys.stderr)
        return 1
    except Skipped as why:
        print("skipped %s: %s" % (args.check, why))
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
