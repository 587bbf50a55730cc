#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The user documentation (README.md, CONTRIBUTING.md and docs/*.md) against the product, so that they cannot drift.

Every name the docs show is looked up where the product defines it, never in a list kept here:

  variables        every SIEVE_* name is a variable of the registry (`sieve-info --json`), a former name
                   it knows (deprecated or retired: shown as such, with its replacement), a name of the
                   public header (sieve.h, sieve_version.h), a CMake option of the build (CMakeCache.txt) or
                   a line kind of plugin/config_params.def (SIEVE_PARAM);
                   `SIEVE_X_*` matches at least one. Every value shown, `SIEVE_X=v`, is accepted by the
                   registry; a value in single quotes, `SIEVE_X='v'`, is one the docs show being refused,
                   and must be refused. Every NCCL_IB_* name is one Sieve reads (`ib_settings`).
  metrics          every sieve_..._total name ({a,b} expanded, ... a wildcard) is a metric a stats file
                   holds (written by a short sieve-bench run on loopback), and every sample line shown
                   carries the labels the product gives that metric.
  c_api            every other sieve_* name is exported by libnccl-net-sieve.so or declared in sieve.h.
  python           every sieve.NAME(...) call names a function of the Python module, with keyword
                   arguments it takes.
  commands         every option on a command line of a Sieve tool (sieve-info [masks], sieve-perf,
                   sieve-bench, sieve-impair, netlab.sh, build-nccl-socket-plugin.sh, sieve-codec-bench,
                   sieve-compact-bench) appears in that tool's --help, netlab.sh's commands too; an option
                   shown alone must be one of the tools'; `ctest -L LABEL` names a label of the suite;
                   paths into the source tree exist; build/DIR/NAME is a target DIR/CMakeLists.txt defines;
                   a /usr/... path of Sieve's is where `cmake --install --prefix /usr` puts it.
  links            every relative link reaches a file, and its #anchor a heading there.
  troubleshooting  every line of docs/DEPLOY.md's troubleshooting table is printed, as written, by the
                   tool in one of the situations below (`...`, `<...>` and a lone N stand for what
                   varies); a line only a GPU job or an RDMA port can print (HARDWARE below) must at
                   least be made of text the product's sources hold.

Run one: docs_test.py --source-dir S --build-dir B CHECK      (ctest -L docs runs them all)
"""

import argparse
import glob
import importlib.util
import inspect
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# Options of other programs that the docs show alone in backticks, and whose they are.
OTHER_PROGRAMS_OPTIONS = {
    "--system-site-packages": "python3 -m venv",
    "--queue-bypass": "iptables' NFQUEUE target",
    "--collector.textfile.directory": "node_exporter",
}
# Lines of the docs' tables (troubleshooting, NCCL's log) that need what this machine may lack: the
# reason, then words that mark such a line. When no situation below prints them, they must at least
# be made of the sources' text.
HARDWARE = {
    "the collective proxy's lines need a GPU job under LD_PRELOAD": ("collective proxy",),
    "the verbs lines need RDMA ports, or tests/net/ib's fake libibverbs where it is built":
        ("RDMA port", "RDMA device", "went down", "gid index", "on queue pair"),
}

# ctest labels registered only where the hardware is, with the reason.
HARDWARE_LABELS = {"needs-rdma": "the rdma.* suites are registered only where /sys/class/infiniband lists a device"}


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def run(cmd, env=None, timeout=120, cwd=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, cwd=cwd)


# ---- the docs ---------------------------------------------------------------------------------

class Doc:
    def __init__(self, path, source_dir):
        self.path = path
        self.name = os.path.relpath(path, source_dir)
        self.text = open(path, encoding="utf-8").read()
        self.prose, self.code_lines, self.inline = [], [], []  # (line number, text)
        fence = None
        for number, line in enumerate(self.text.splitlines(), 1):
            if re.match(r"\s*```", line):
                fence = None if fence else line.strip()[3:] or "text"
                continue
            if fence:
                self.code_lines.append((number, line))
            else:
                self.prose.append((number, line))
                for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", line):
                    self.inline.append((number, span))

    def code(self):
        """Fenced lines and inline spans: where commands, names and values are shown."""
        return self.code_lines + self.inline

    def where(self, number):
        return "%s:%d" % (self.name, number)


def load_docs(source_dir):
    paths = [os.path.join(source_dir, name) for name in ("README.md", "CONTRIBUTING.md")]
    paths += sorted(glob.glob(os.path.join(source_dir, "docs", "*.md")))
    return [Doc(p, source_dir) for p in paths]


def everything(docs):
    for doc in docs:
        for number, line in doc.prose + doc.code_lines:
            yield doc, number, line


# ---- the product ------------------------------------------------------------------------------

class Product:
    def __init__(self, args):
        self.args = args
        self.source = args.source_dir
        self.build = args.build_dir
        self._cache = {}

    def tool(self, name):
        paths = {
            "sieve-info": "tools/sieve-info/sieve-info", "sieve-perf": "tools/sieve-perf/sieve-perf",
            "sieve-bench": "tools/sieve-bench/sieve-bench", "sieve-impair": "tools/sieve-impair/sieve-impair",
            "sieve-codec-bench": "compress/codec_bench/sieve-codec-bench",
            "sieve-compact-bench": "compress/compact_bench/sieve-compact-bench",
            "sieve_conformance_peer": "tests/plugin/net/conformance/sieve_conformance_peer",
        }
        if name in SCRIPTS:
            return ["bash", os.path.join(self.source, SCRIPTS[name])]
        path = os.path.join(self.build, paths[name])
        return [path] if os.access(path, os.X_OK) else None

    def help(self, name, sub=None):
        key = ("help", name, sub)
        if key not in self._cache:
            command = self.tool(name)
            text = None
            if command:
                done = run(command + ([sub] if sub else []) + ["--help"])
                text = done.stdout + done.stderr
            self._cache[key] = text
        return self._cache[key]

    def sieve_info_json(self, env=None):
        done = run(self.tool("sieve-info") + ["--no-plugin", "--json"], env=env)
        return json.loads(done.stdout)

    def registry(self):
        if "registry" not in self._cache:
            self._cache["registry"] = {e["name"]: e for e in self.sieve_info_json()["config"]}
        return self._cache["registry"]

    def former_names(self):
        """Deprecated and retired names the registry still knows: {name: entry}."""
        if "former" not in self._cache:
            self._cache["former"] = {e["name"]: e for e in self.sieve_info_json()["former_names"]}
        return self._cache["former"]

    def header_names(self):
        if "header" not in self._cache:
            text = open(os.path.join(self.source, "plugin/sieve.h")).read()
            generated = glob.glob(os.path.join(self.build, "generated", "sieve_version.h"))
            text += "".join(open(g).read() for g in generated)
            self._cache["header"] = set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", text))
        return self._cache["header"]

    def cmake_cache_names(self):
        names = set()
        for line in open(os.path.join(self.build, "CMakeCache.txt")):
            match = re.match(r"([A-Za-z0-9_]+):", line)
            if match:
                names.add(match.group(1))
        return names

    def registry_macros(self):
        """The line kinds of plugin/config_params.def (SIEVE_PARAM, ...), as its header comment shows them."""
        text = open(os.path.join(self.source, "plugin", "config_params.def")).read()
        return set(re.findall(r"^(?://\s*)?(SIEVE_[A-Z]+)\(", text, re.M))

    def exported_symbols(self):
        library = os.path.join(self.build, "plugin", "libnccl-net-sieve.so")
        out = run(["nm", "-D", "--defined-only", library]).stdout
        return {line.split()[-1] for line in out.splitlines() if line.strip()}

    def stats_files(self):
        """A short sieve-bench run on loopback with Prometheus stats files: what operators scrape."""
        if "stats" not in self._cache:
            work = tempfile.mkdtemp(prefix="sieve-docs-stats-")
            done = run(self.tool("sieve-bench") + ["--loopback", "--nodes", "2", "--model", "resnet18", "--modes",
                                                   "dense", "--iters", "1", "--warmup", "0", "--rate", "none",
                                                   "--quiet", "--timeout", "60"],
                       env={"SIEVE_STATS_FILE": work + "/node-%p.prom", "SIEVE_STATS_FORMAT": "prometheus"})
            files = sorted(glob.glob(work + "/node-*.prom"))
            check(done.returncode == 0 and files, "the sieve-bench run for the stats files failed:\n%s%s" %
                  (done.stdout, done.stderr))
            text = open(files[0]).read()
            for f in files:
                os.remove(f)
            os.rmdir(work)
            self._cache["stats"] = text
        return self._cache["stats"]

    def installed_paths(self):
        """Every path `cmake --install` puts under prefix /usr, as the Debian package does."""
        if "installed" not in self._cache:
            root = tempfile.mkdtemp(prefix="sieve-docs-install-")
            done = run(["cmake", "--install", self.build, "--prefix", "/usr"], env={"DESTDIR": root})
            check(done.returncode == 0, "cmake --install failed: %s" % done.stderr)
            paths = set()
            for directory, dirs, files in os.walk(root):
                for name in dirs + files:
                    paths.add("/" + os.path.relpath(os.path.join(directory, name), root))
            subprocess.run(["rm", "-rf", root])
            self._cache["installed"] = paths
        return self._cache["installed"]

    def python_module(self):
        package = os.path.join(self.source, "tools/python/sieve")
        spec = importlib.util.spec_from_file_location("sieve", os.path.join(package, "__init__.py"),
                                                      submodule_search_locations=[package])
        module = importlib.util.module_from_spec(spec)
        sys.modules["sieve"] = module  # its submodules import each other through the package
        spec.loader.exec_module(module)
        return module


# ---- variables --------------------------------------------------------------------------------

def glob_matches(pattern, names):
    regex = re.compile("^" + re.escape(pattern).replace(r"\*", ".*") + "$")
    return [n for n in names if regex.match(n)]


def variables(docs, product):
    registry = product.registry()
    former = product.former_names()
    known = (set(registry) | set(former) | product.header_names() | product.cmake_cache_names() |
             product.registry_macros())
    problems, seen = [], 0
    for doc, number, line in everything(docs):
        for name in re.findall(r"\bSIEVE_[A-Z0-9_]*[A-Z0-9*]", line):
            seen += 1
            if "unknown variable " + name in line:
                continue  # shown being reported as unknown
            if "*" in name:
                if not glob_matches(name, known):
                    problems.append("%s: %s matches no variable" % (doc.where(number), name))
            elif name not in known:
                problems.append("%s: %s is not a variable of the registry, a name of sieve.h or a CMake option" %
                                (doc.where(number), name))
            elif name in former and not re.search(r"deprecated|retired|renamed", line):
                problems.append("%s: %s is %s (%s): the docs show it only as such" %
                                (doc.where(number), name, former[name]["status"],
                                 former[name]["replacement"] or former[name]["instead"]))
    # NCCL's IB variables the docs say Sieve honours: each one sieve-info lists as the twin of a
    # SIEVE_IB_* setting (its `ib_settings`); NCCL_IB_* matches at least one.
    twins = {e["nccl_name"] for e in product.sieve_info_json().get("ib_settings", [])}
    for doc, number, line in everything(docs):
        for name in re.findall(r"\bNCCL_IB_[A-Z0-9_]*[A-Z0-9*]", line):
            seen += 1
            if not (glob_matches(name, twins) if "*" in name else name in twins):
                problems.append("%s: %s is not an NCCL variable Sieve reads (sieve-info's ib_settings)" %
                                (doc.where(number), name))
    # Values: SIEVE_X=v and {name: SIEVE_X, value: v}.
    shown = []
    for doc, number, line in everything(docs):
        for name, value in re.findall(r"\b(SIEVE_[A-Z0-9_]+)=('[^']*'|[^\s`|,;)\]\"}]*)", line):
            shown.append((doc, number, name, value.rstrip(".:")))
        for name, value in re.findall(r"name: (SIEVE_[A-Z0-9_]+), value: \"?([^\"}]+?)\"?}", line):
            shown.append((doc, number, name, value))
    assignments = {}
    for doc, number, name, value in shown:
        if name not in registry or not value or any(c in value for c in "<$") or "..." in value:
            continue
        if re.fullmatch(r"[A-Z][A-Z_]*", value):
            continue  # a placeholder: SIEVE_STATS_INTERVAL=N
        refused = value.startswith("'") and value.endswith("'") and len(value) >= 2
        assignments.setdefault((name, value.strip("'") if refused else value), []).append((doc, number, refused))
    # As many sieve-info runs as the most values one variable is shown with.
    by_name = {}
    for (name, value) in assignments:
        by_name.setdefault(name, []).append(value)
    for round_values in itertools.zip_longest(*by_name.values()):
        env = {name: value for name, value in zip(by_name, round_values) if value is not None}
        diagnostics = product.sieve_info_json(env)["diagnostics"]
        for name, value in env.items():
            was_refused = any(d.startswith(name + "=") for d in diagnostics)
            for doc, number, refused in assignments[(name, value)]:
                if refused and not was_refused:
                    problems.append("%s: %s='%s' is shown refused, but the registry accepts it" %
                                    (doc.where(number), name, value))
                if not refused and was_refused:
                    said = [d for d in diagnostics if d.startswith(name + "=")]
                    problems.append("%s: %s=%s is refused by the registry: %s" % (doc.where(number), name, value, said))
    # What a switch does when off, said in the README's table and by sieve-info (the registry's doc):
    # the same words, so an operator reading either learns the same thing.
    for doc, number, line in everything(docs):
        row = re.match(r"\| `(SIEVE_[A-Z0-9_]+)` \|.*\((off: [^)]*)\) \|\s*$", line)
        if row and row.group(1) in registry and row.group(2) not in registry[row.group(1)]["doc"]:
            problems.append("%s: %s says '%s'; sieve-info says: %s" %
                            (doc.where(number), row.group(1), row.group(2), registry[row.group(1)]["doc"]))
    # LD_PRELOAD goes on the training command: in an image's ENV or a pod's env it reaches every
    # process of the container, which the Containers section warns against.
    for doc, number, line in everything(docs):
        if re.search(r"name: LD_PRELOAD\b|^\s*ENV\b.*\bLD_PRELOAD=", line):
            problems.append("%s: LD_PRELOAD set for a whole container: %s" % (doc.where(number), line.strip()))
    # The hang report goes beside the stats file: a directory shown for it is one shown for that file.
    stats_dirs = {os.path.dirname(v) for _, _, name, v in shown if name == "SIEVE_STATS_FILE" and "/" in v}
    for doc, number, line in everything(docs):
        for path in re.findall(r"(/[\w./-]+)/sieve-proxy-state\.", line):
            if path not in stats_dirs:
                problems.append("%s: the hang report shown in %s, where no SIEVE_STATS_FILE is shown (%s)" %
                                (doc.where(number), path, ", ".join(sorted(stats_dirs))))
    check(not problems, "\n".join(problems))
    print("%d SIEVE_* names and %d values shown, all the product's" % (seen, len(assignments)))


# ---- metrics ----------------------------------------------------------------------------------

def expand_braces(text):
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    return [e for alternative in match.group(1).split(",")
            for e in expand_braces(text[:match.start()] + alternative + text[match.end():])]


def metric_expressions(line):
    return re.findall(r"\bsieve_[a-z0-9_{},…]*(?:\.\.\.)?[a-z0-9_{},…]*_total\b", line)


def metrics(docs, product):
    text = product.stats_files()
    names = set(re.findall(r"(?m)^# TYPE (\S+) counter$", text))
    labels = {}
    for name, label_text in re.findall(r"(?m)^(sieve_\w+)\{([^}]*)\} \S+$", text):
        labels.setdefault(name, set()).add(frozenset(re.findall(r"(\w+)=\"", label_text)))
    problems, seen = [], 0
    for doc, number, line in everything(docs):
        for expression in metric_expressions(line):
            for name in expand_braces(expression):
                seen += 1
                pattern = "^" + re.escape(name).replace("…", ".+").replace(r"\.\.\.", ".+") + "$"
                if not [n for n in names if re.match(pattern, n)]:
                    problems.append("%s: %s is not a metric of the stats file" % (doc.where(number), name))
    for doc in docs:
        for number, line in doc.code_lines:
            sample = re.match(r"(sieve_\w+)\{([^}]*)\} \S+$", line.strip())
            if not sample or sample.group(1) not in names:
                continue
            shown = frozenset(re.findall(r"(\w+)=\"", sample.group(2)))
            if shown not in labels.get(sample.group(1), set()):
                problems.append("%s: %s with labels %s; the product's samples of it carry %s" %
                                (doc.where(number), sample.group(1), sorted(shown),
                                 [sorted(label) for label in labels.get(sample.group(1), [])]))
    if problems:
        problems.append("(the stats file's metrics: %s)" % ", ".join(sorted(names)))
    check(not problems, "\n".join(problems))
    print("%d metric names shown, all in the stats file; sample lines carry the product's labels" % seen)


# ---- C API and Python -------------------------------------------------------------------------

def c_api(docs, product):
    known = product.exported_symbols() | product.header_names()
    problems, seen = [], 0
    for doc, number, line in everything(docs):
        for expression in metric_expressions(line):
            line = line.replace(expression, "")
        for name in re.findall(r"(?<![\w./-])sieve_[a-z][a-z0-9_]*\*?(?![\w.{…-])", line):
            seen += 1
            if name.endswith("_total"):
                continue
            if "*" in name and not glob_matches(name, known):
                problems.append("%s: %s matches nothing the library exports or sieve.h declares" %
                                (doc.where(number), name))
            elif "*" not in name and name not in known:
                problems.append("%s: %s is neither exported by libnccl-net-sieve.so nor declared in sieve.h" %
                                (doc.where(number), name))
    check(not problems, "\n".join(problems))
    print("%d C names shown, all exported or declared" % seen)


def python(docs, product):
    module = product.python_module()
    problems, seen = [], 0
    for doc, number, line in everything(docs):
        for attribute, arguments in re.findall(r"(?<![\w./-])sieve\.([A-Za-z_]\w*)(?:\(([^()]*)\))?", line):
            if attribute in ("py", "h", "pc", "so", "prom", "json", "deb", "md"):
                continue
            seen += 1
            if not hasattr(module, attribute):
                problems.append("%s: the Python module has no sieve.%s" % (doc.where(number), attribute))
                continue
            function = getattr(module, attribute)
            keywords = re.findall(r"\b([a-z_]\w*)=", arguments or "")
            if keywords and callable(function):
                parameters = inspect.signature(function).parameters
                for keyword in keywords:
                    if keyword not in parameters:
                        problems.append("%s: sieve.%s() takes no %s= (it takes %s)" %
                                        (doc.where(number), attribute, keyword, list(parameters)))
    check(not problems, "\n".join(problems))
    print("%d uses of the Python module shown, all its functions and arguments" % seen)


# ---- commands ---------------------------------------------------------------------------------

TOOL_NAMES = ("sieve-info", "sieve-perf", "sieve-bench", "sieve-impair", "netlab.sh", "build-nccl-socket-plugin.sh",
              "sieve-codec-bench", "sieve-compact-bench", "run.sh", "bundle.sh", "sieve_conformance_peer")
# Scripts run from the source tree (the GPU kit's run.sh answers --help there too).
SCRIPTS = {"netlab.sh": "tools/share/netlab.sh",
           "build-nccl-socket-plugin.sh": "tools/sieve-perf/build-nccl-socket-plugin.sh",
           "run.sh": "tools/gpu/run.sh", "bundle.sh": "tools/gpu/bundle.sh"}
SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "2>", "<", "<<<", "&", ")", "(", "\\"}


def tokens_of(text, fenced):
    try:
        return shlex.split(text, comments=fenced)
    except ValueError:
        return text.split()


def option_in(option, text):
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(option), text) is not None


def commands(docs, product):
    problems, seen = [], 0
    helps = {name: product.help(name) for name in TOOL_NAMES}
    all_help = "\n".join(h for h in helps.values() if h) + (product.help("sieve-info", "masks") or "")
    printed = run(["ctest", "--print-labels"], cwd=product.build).stdout
    labels = set(printed.split("All Labels:", 1)[-1].split())
    for doc in docs:
        for (number, text), fenced in [(c, True) for c in doc.code_lines] + [(c, False) for c in doc.inline]:
            words = tokens_of(text, fenced)
            # A tool's command line: its options must be in its --help.
            for i, word in enumerate(words):
                tool = os.path.basename(word)
                if tool not in TOOL_NAMES:
                    continue
                rest = list(itertools.takewhile(lambda w: w not in SEPARATORS and os.path.basename(w) not in TOOL_NAMES,
                                                words[i + 1:]))
                sub = "masks" if tool == "sieve-info" and rest[:1] == ["masks"] else None
                help_text = product.help(tool, sub)
                if help_text is None:
                    continue  # not built here (sieve-impair without libnetfilter-queue)
                for option in [w.split("=")[0] for w in rest if w.startswith("--")]:
                    seen += 1
                    if not option_in(option, help_text):
                        problems.append("%s: %s%s does not offer %s (%s)" % (
                            doc.where(number), tool, " " + sub if sub else "", option, text))
                if tool == "netlab.sh":
                    plain = [w for j, w in enumerate(rest) if not w.startswith("-") and
                             not (j > 0 and rest[j - 1] == "--prefix")]
                    if plain and not re.search(r"netlab\.sh \[--prefix P\] %s\b" % re.escape(plain[0]), help_text):
                        problems.append("%s: netlab.sh has no command %r" % (doc.where(number), plain[0]))
            # An option shown alone: one of the tools', or another program's named above.
            if not fenced and words and words[0].startswith("--") and os.path.basename(words[0]) not in TOOL_NAMES:
                for option in words[0].split("/"):
                    option = option.split("=")[0]
                    if option and option not in OTHER_PROGRAMS_OPTIONS and not option_in(option, all_help):
                        problems.append("%s: no Sieve tool offers %s" % (doc.where(number), option))
            # ctest labels.
            for j, word in enumerate(words):
                if word == "ctest":
                    for k in range(j + 1, len(words) - 1):
                        if words[k] == "-L" and words[k + 1] not in labels and words[k + 1] not in HARDWARE_LABELS:
                            problems.append("%s: ctest has no label %r (labels: %s)" %
                                            (doc.where(number), words[k + 1], " ".join(sorted(labels))))
            # Paths into the source tree, and build-tree targets.
            for path in re.findall(r"(?<![\w./~-])((?:tools|tests|plugin|net|compress|topology|docs)/[\w./*-]*[\w/*])",
                                   text):
                if not glob.glob(os.path.join(product.source, path)):
                    problems.append("%s: %s does not exist in the source tree" % (doc.where(number), path))
            for path in re.findall(r"(?<![\w.-])(/usr/(?!local/)[\w./-]*sieve[\w./-]*[\w/])", text):
                if path.rstrip("/") not in product.installed_paths():
                    problems.append("%s: %s is not installed there (cmake --install --prefix /usr, as the package)" %
                                    (doc.where(number), path))
            for directory, name in re.findall(r"(?<![\w./-])build/((?:[\w-]+/)+)([\w.-]+)(?![\w./-])", text):
                target = name[3:-3] if name.startswith("lib") and name.endswith(".so") else name
                if "." in target:
                    continue
                cmake = os.path.join(product.source, directory, "CMakeLists.txt")
                defined = os.path.exists(cmake) and re.search(
                    r"(add_executable|add_library|sieve_add_gtest)\(\s*%s\b" % re.escape(target), open(cmake).read())
                if not defined:
                    problems.append("%s: build/%s%s is not a target of %sCMakeLists.txt" %
                                    (doc.where(number), directory, name, directory))
    check(not problems, "\n".join(problems))
    print("%d options on the tools' command lines, all in their --help; paths, targets and labels exist" % seen)


# ---- links ------------------------------------------------------------------------------------

def slugs(text):
    found, counts = set(), {}
    fence = False
    for line in text.splitlines():
        if re.match(r"\s*```", line):
            fence = not fence
        if fence:
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else "%s-%d" % (slug, n))
    return found


def links(docs, product):
    problems, seen = [], 0
    for doc in docs:
        for number, line in doc.prose:
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue
                seen += 1
                file_part, _, anchor = target.partition("#")
                path = os.path.normpath(os.path.join(os.path.dirname(doc.path), file_part)) if file_part else doc.path
                if not os.path.exists(path):
                    problems.append("%s: link to %s: no such file" % (doc.where(number), target))
                    continue
                if anchor and path.endswith(".md") and anchor not in slugs(open(path, encoding="utf-8").read()):
                    problems.append("%s: link to %s: %s has no heading #%s" %
                                    (doc.where(number), target, os.path.relpath(path, product.source), anchor))
    check(not problems, "\n".join(problems))
    print("%d relative links, every file and anchor found" % seen)


# ---- troubleshooting --------------------------------------------------------------------------

def scenarios(product):
    """The situations of the troubleshooting table, made here: (what, command, environment)."""
    info = product.tool("sieve-info")
    bench = product.tool("sieve-bench")
    library = os.path.join(product.build, "plugin", "libnccl-net-sieve.so")
    python_env = {"PYTHONPATH": os.path.join(product.source, "tools/python")}
    fake_verbs = os.path.join(product.build, "tests/net/ib/fake_verbs")  # tests/net/ib's stand-in libibverbs
    stats = ["--loopback", "--nodes", "2", "--model", "resnet18", "--modes", "dense", "--iters", "1", "--warmup", "0",
             "--rate", "none", "--quiet", "--timeout", "60"]
    return [
        ("a misspelt variable", info + ["--json"], {"SIEVE_NSOCK": "2"}),
        ("an int that does not parse", info + ["--json"], {"SIEVE_NSOCKS": "lots"}),
        ("a choice outside its list", info + ["--json"], {"SIEVE_STATS_FORMAT": "xml"}),
        ("no interface matches", info + ["--json"], {"SIEVE_SOCKET_IFNAME": "ib9"}),
        ("verbs asked for, no RDMA here", info + ["--json"], {"SIEVE_TRANSPORT": "ib"}),
        ("an RDMA variable while TCP carries", info + ["--json"], {"SIEVE_IB_HCA": "mlx5"}),
        ("a missing topology file", info + ["--json"], {"SIEVE_TOPO_FILE": "/nope.xml"}),
        ("a stats file in a missing directory, sieve-info", info + ["--json"],
         {"SIEVE_STATS_FILE": "/nonexistent/dir/s.prom"}),
        ("a stats file in a missing directory, a job", bench + stats, {"SIEVE_STATS_FILE": "/nonexistent/dir/s.prom"}),
        ("the library not on the loader path", info + ["--plugin", "sieve"], {"LD_LIBRARY_PATH": ""}),
        ("LD_PRELOAD of a missing file", ["/usr/bin/python3", "-c", "pass"],
         {"LD_PRELOAD": "/opt/nope/libnccl-net-sieve.so"}),
        ("Python without the preloaded library", ["/usr/bin/python3", "-c", "import sieve; sieve.library()"],
         python_env),
        ("a rolled-back job's calls", ["/usr/bin/python3", "-c", "import sieve; sieve.stats(); sieve.stats()"],
         python_env),
        ("SIEVE_LIBRARY naming another copy", ["/usr/bin/python3", "-c", "import sieve; sieve.stats()"],
         dict(python_env, LD_PRELOAD=library, SIEVE_LIBRARY="OTHER_COPY")),
        ("SIEVE_LIBRARY naming a missing file", ["/usr/bin/python3", "-c", "import sieve; sieve.stats()"],
         dict(python_env, SIEVE_LIBRARY="/opt/nope.so")),
        ("--plugin naming a missing file", bench + ["--plugin", "/nope.so", "--loopback", "--quiet"], {}),
        ("SIEVE_STATS_FILE naming a directory, a job", bench + stats, {"SIEVE_STATS_FILE": "A_DIRECTORY"}),
        ("a stats file in a shared directory without the sticky bit, a job", bench + stats,
         {"SIEVE_STATS_FILE": "A_SHARED_DIRECTORY"}),
        ("a job's INFO lines", bench + stats, {"SIEVE_LOG_LEVEL": "info"}),
    ] + ([
        ("verbs asked for, SIEVE_IB_HCA selects no port", info + ["--json"],
         {"LD_LIBRARY_PATH": fake_verbs, "SIEVE_TRANSPORT": "ib", "SIEVE_IB_HCA": "mlx5"}),
        ("verbs carry the data", info + ["--json"], {"LD_LIBRARY_PATH": fake_verbs, "SIEVE_LOG_LEVEL": "info"}),
    ] if os.path.exists(os.path.join(fake_verbs, "libibverbs.so.1")) else [])


def pattern_of(line):
    """A table line as a regular expression: ..., <what> and a lone N stand for what varies."""
    parts = re.split(r"(\.\.\.|…|<[^<>]+>|\bN\b)", line)
    regex = ""
    for part in parts:
        if part in ("...", "…") or (part.startswith("<") and part.endswith(">")):
            regex += ".*?"
        elif part == "N":
            regex += r"\d+"
        else:
            regex += r"\s+".join(re.escape(word) for word in part.split(" "))
    return re.compile(regex)


def source_text(product):
    texts = []
    for pattern in ("plugin/**/*.cc", "net/**/*.cc", "compress/**/*.cc", "topology/**/*.cc", "tools/**/*.cc",
                    "tools/**/*.py"):
        for path in glob.glob(os.path.join(product.source, pattern), recursive=True):
            texts.append(open(path, encoding="utf-8", errors="replace").read())
    # Adjacent C string literals are one string.
    return re.sub(r"\"\s*\n\s*\"", "", "\n".join(texts))


def troubleshooting(docs, product):
    deploy = next(d for d in docs if d.name == os.path.join("docs", "DEPLOY.md"))
    # Every table whose first column is "line": the troubleshooting table and NCCL's log lines.
    rows, in_table = [], False
    for number, line in deploy.prose:
        if re.match(r"\| line\b", line):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if in_table and not line.startswith("| ---"):
            first_cell = re.split(r"(?<!\\)\|", line)[1]
            span = re.search(r"`([^`]+)`", first_cell)
            text = span.group(1).replace("\\|", "|") if span else first_cell.strip()
            if text.startswith("NCCL ") and not re.match(r"NCCL (INFO|WARN) NET/Sieve ", text):
                continue  # NCCL's own line (its channel lines name the network, NET/Sieve/0, too)
            rows.append((number, re.sub(r"^NCCL (INFO|WARN) ", "", text)))
    check(rows, "docs/DEPLOY.md has no table of lines (a table whose header starts with | line)")
    library = os.path.join(product.build, "plugin", "libnccl-net-sieve.so")
    scratch = tempfile.mkdtemp(prefix="sieve-docs-")
    outputs = []
    try:
        for what, command, env in scenarios(product):
            if env.get("SIEVE_LIBRARY") == "OTHER_COPY":
                copy = os.path.join(scratch, "libnccl-net-sieve.so")
                with open(library, "rb") as src, open(copy, "wb") as dst:
                    dst.write(src.read())
                env = dict(env, SIEVE_LIBRARY=copy)
            if env.get("SIEVE_STATS_FILE") == "A_DIRECTORY":
                env = dict(env, SIEVE_STATS_FILE=scratch)
            if env.get("SIEVE_STATS_FILE") == "A_SHARED_DIRECTORY":
                shared = os.path.join(scratch, "shared")
                os.makedirs(shared, exist_ok=True)
                os.chmod(shared, 0o777)
                env = dict(env, SIEVE_STATS_FILE=os.path.join(shared, "s.prom"))
            done = run(command, env=env, timeout=120)
            outputs.append((what, re.sub(r"[ \t]+", " ", done.stdout + done.stderr)))
    finally:
        shutil.rmtree(scratch)
    sources = None
    problems = []
    for number, line in rows:
        pattern = pattern_of(line)
        if any(pattern.search(output) for _, output in outputs):
            continue
        reason = next((why for why, keys in HARDWARE.items() if any(key in line for key in keys)), None)
        if reason is None:
            problems.append("%s: no tool prints this line in the situations of this test:\n    %s" %
                            (deploy.where(number), line))
            continue
        sources = sources or source_text(product)
        text = re.sub(r"^NET/Sieve ", "", line)
        for fragment in re.split(r"\.\.\.|…|<[^<>]+>|\bN\b|0x", text):
            fragment = fragment.strip(" ,;:()")
            if len(fragment) >= 12 and fragment not in sources:
                problems.append("%s: %r is not in the product's sources (%s)" % (deploy.where(number), fragment,
                                                                                 reason))
    check(not problems, "\n".join(problems))
    print("%d lines of docs/DEPLOY.md's tables: each printed by a tool here, or (%s) made of the sources' text" %
          (len(rows), "; ".join(HARDWARE)))


CHECKS = {f.__name__: f for f in (variables, metrics, c_api, python, commands, links, troubleshooting)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("check", choices=sorted(CHECKS))
    args = parser.parse_args()
    try:
        CHECKS[args.check](load_docs(args.source_dir), Product(args))
    except CheckFailed as failure:
        print("FAIL %s:\n%s" % (args.check, failure), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
