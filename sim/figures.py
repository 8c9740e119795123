"""Recorded figures: every measured number with where it came from, and the Markdown regions that quote it.

A **record** is one figure of one run::

    {"value": 0.2268, "unit": "s", "status": "ok", "commit": "30e2f07", "digest": "sha256:...",
     "sources": ["hw", "spec", "host"], "command": "wanreduce demo", "output": "build/demo.json",
     "cores": 2, "load": 3.1, "date": "2026-12-04T15:02:11Z", "runs": 1, "note": "one deterministic run"}

``digest`` is a hash of the files under ``sources`` (folders or files of the repository, as the working tree
holds them), so a figure is current exactly while the code it depends on is unchanged. ``command`` is what
reran it, ``output`` the JSON file that command writes its records into (under the key ``"figures"``).
``status`` is ``ok``, ``failed`` (the producer raised: ``value`` is None, never the previous number) or
``stale`` (recorded from an earlier run that could not be repeated here; ``note`` says which).

A producer whose figures depend on some sources only through the designs it hands to other tools (the
synthesis bench: the gateware reaches Yosys and nextpnr only as the designs of
:mod:`wanreduce.sim.synth.designs`) records those designs' digests too (:func:`design_provenance`):
``designs`` (design name to sha256 of the tools' input), ``designs_of`` (the module whose ``designs()``
recomputes them), ``design_sources`` (the source prefixes that act only through them) and ``flow_digest``
(the digest of its other sources). When such a record's sources change, :func:`attest` (the first step of
:func:`refresh`) recomputes the designs; if the flow's sources are unchanged and every design has its
recorded bytes, the tools would be given the same input, so the record stays current for the new sources:
``attested`` gets their digest, the commit and the date. :func:`stale` reads both digests and never
converts a design itself.

Producers (each ``sim/bench`` module, the demo, synthesis, training) call :func:`records` and
:func:`write_output`. ``docs/figures.json`` holds the records that the documentation quotes, under
``"figures"``, and the templates of the generated regions, under ``"regions"``. A region in README.md or
``docs/*.md`` is the text between ``<!-- figures: NAME -->`` and ``<!-- /figures -->``; :func:`render`
rewrites it from the template ``NAME``, :func:`check` reports regions that differ from their rendering and
quoted figures whose sources changed, and :func:`refresh` reruns the commands of the stale ones (each once)
and takes their new records. ``docs/figures.md`` says how to add a figure.

Template fields are ``{name}``, ``{name:spec}`` or ``{name*K:spec}`` / ``{name/K:spec}`` with ``K`` a number
and ``spec`` a Python format specification, or ``{name@field}`` for a field of the record (``load``,
``cores``, ``date``) (``{demo_sim_s*1e3:.1f}`` is milliseconds to one decimal). A
figure whose record is ``stale`` is rendered with :data:`STALE_MARK` after it.
"""

import ast
import datetime
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = [
    "ROOT",
    "FIGURES_FILE",
    "REQUIRED",
    "digest",
    "module_sources",
    "design_provenance",
    "attest",
    "commit",
    "provenance",
    "records",
    "failed_records",
    "write_output",
    "load",
    "save",
    "render_text",
    "render",
    "region_problems",
    "stale",
    "check",
    "refresh",
    "FiguresError",
]

#: The repository: this file is ``sim/figures.py``.
ROOT = Path(__file__).resolve().parents[1]
FIGURES_FILE = "docs/figures.json"
#: Appended to a figure whose record is ``stale`` wherever a region quotes it.
STALE_MARK = "†"
#: What every record in ``docs/figures.json`` must have.
REQUIRED = ("value", "unit", "commit", "digest", "command")
_DOCS = ("README.md", "docs/*.md")
_REGION = re.compile(r"<!-- figures: ([\w.-]+) -->(.*?)<!-- /figures -->", re.DOTALL)
_FIELD = re.compile(r"\{([A-Za-z_][\w]*)(?:@(\w+))?(?:([*/])([0-9.eE+-]+))?(?::([^{}]*))?\}")
# Files a digest leaves out: build products that live beside the sources.
_SKIP = re.compile(r"(__pycache__|\.pyc$|\.egg-info|/\.)")


class FiguresError(Exception):
    """A figures file or template that cannot be read or rendered (the CLI prints it on one line)."""


def _git(*args, root=ROOT):
    try:
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def _files(sources, root):
    listed = _git("ls-files", "-z", "--", *sources, root=root)
    if listed is not None:
        names = [n for n in listed.decode().split("\0") if n]
    else:  # not a git checkout (an sdist): every file under the sources
        names = []
        for src in sources:
            p = root / src
            if p.is_file():
                names.append(src)
            for q in sorted(p.rglob("*")) if p.is_dir() else ():
                if q.is_file():
                    names.append(q.relative_to(root).as_posix())
    return sorted(n for n in set(names) if not _SKIP.search(n) and (root / n).is_file())


def digest(sources, *, root=ROOT, at=None):
    """``sha256:<hex>`` of the tracked files under ``sources`` (paths relative to ``root``), names and bytes,
    as the working tree holds them (uncommitted edits count), or as commit ``at`` held them (to record a
    figure measured there)."""
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of paths, not one string")
    h = hashlib.sha256()
    if at is not None:
        listed = _git("ls-tree", "-r", "-z", "--name-only", at, "--", *sources, root=root)
        if listed is None:
            raise FiguresError(f"commit {at} is not in this repository")
        for name in sorted(n for n in listed.decode().split("\0") if n and not _SKIP.search(n)):
            h.update(name.encode() + b"\0")
            h.update(_git("show", f"{at}:{name}", root=root) or b"")
            h.update(b"\0")
        return "sha256:" + h.hexdigest()
    for name in _files(list(sources), Path(root)):
        h.update(name.encode() + b"\0")
        h.update((Path(root) / name).read_bytes())
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


_MODULE = re.compile(r"wanreduce(\.\w+)+")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# The recording machinery a bench imports: it does not change what is measured.
_BOOKKEEPING = frozenset({"wanreduce.sim.figures", "wanreduce.sim.bench"})


def _module_file(name, root):
    parts = name.split(".")
    if parts[0] != "wanreduce" or len(parts) < 2:
        return None
    base = Path(root, *parts[1:])
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _imports(path, name, strings):
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod
            yield from (f"{mod}.{a.name}" for a in node.names)  # `from . import x` names a module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
            if _MODULE.fullmatch(node.value):
                yield node.value  # importlib.resources.files("wanreduce.host.data") and the like


def module_sources(name, *, extra=(), root=ROOT):
    """The files a module's figures depend on: the Python files of every ``wanreduce`` module it imports,
    directly or not (imports inside functions count), each imported package's ``__init__``, and the
    other files beside those modules that their code names (a C++ harness, a waiver, a topology), plus
    ``extra``. A figure recorded with these sources goes stale exactly when code it ran changes."""
    root = Path(root)
    todo, seen, strings = [(name, True)], set(), set()
    while todo:
        mod, imported = todo.pop()
        if mod in seen or (mod in _BOOKKEEPING and mod != name):
            continue
        seen.add(mod)
        path = _module_file(mod, root)
        if path is None:
            continue
        parts = mod.split(".")
        # parent packages run first; what they only name (a registry of commands) does not run
        todo.extend((".".join(parts[:i]), False) for i in range(2, len(parts)))
        mine = set()
        for m in _imports(path, mod, mine):
            if m.startswith("wanreduce.") and (imported or m not in mine):
                todo.append((m, True))
        strings |= mine
    files = set(extra)
    for mod in seen:
        path = _module_file(mod, root)
        if path is None:
            continue
        files.add(path.relative_to(root).as_posix())
        named = [p for p in path.parent.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")]
        named = [p for p in named if p.name in strings]
        while named:
            other = named.pop()
            rel = other.relative_to(root).as_posix()
            if rel in files:
                continue
            files.add(rel)
            # a C++ source's own local includes
            for inc in _INCLUDE.findall(other.read_text(errors="replace")):
                if (other.parent / inc).is_file():
                    named.append(other.parent / inc)
    return tuple(sorted(files))


def commit(sources=(), *, root=ROOT):
    """The checked-out commit (short hash), with ``+dirty`` when ``sources`` have uncommitted changes."""
    head = _git("rev-parse", "--short=12", "HEAD", root=root)
    if head is None:
        return "unknown"
    text = head.decode().strip()
    if sources and _git("status", "--porcelain", "--", *sources, root=root):
        text += "+dirty"
    return text


def provenance(sources, command, *, output=None, root=ROOT):
    """The fields every record of one run shares: commit, digest, sources, command, output, cores, date."""
    sources = sorted(sources)
    if isinstance(command, (list, tuple)):
        command = shlex.join(command)
    return {
        "commit": commit(sources, root=root),
        "digest": digest(sources, root=root),
        "sources": sources,
        "command": command,
        "output": output,
        "cores": os.cpu_count(),
        # How busy the machine was (1-minute load average): a timing on a shared machine depends on it.
        "load": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def design_provenance(designs_of, sources, *, root=ROOT):
    """The fields that let :func:`attest` keep a record current across changes that leave its designs' bytes
    as they were; ``designs_of`` names a module with ``designs()`` and ``DESIGN_SOURCES``."""
    import importlib

    module = importlib.import_module(designs_of)
    prefixes = tuple(module.DESIGN_SOURCES)
    return {
        "designs_of": designs_of,
        "designs": module.designs(),
        "design_sources": list(prefixes),
        "flow_digest": digest([s for s in sources if not s.startswith(prefixes)], root=root),
    }


def _current(rec, digests, root):
    key = tuple(rec.get("sources") or ())
    if key not in digests:
        digests[key] = digest(key, root=root)
    return digests[key] in (rec["digest"], (rec.get("attested") or {}).get("digest"))


def attest(root=ROOT, data=None, *, log=print):
    """Mark current every record of ``data`` whose sources changed only under its design sources while its
    designs kept their bytes (module docstring); return the names attested. ``data`` is updated in place."""
    import importlib

    data = load(root) if data is None else data
    digests, designs, done = {}, {}, []
    for name, rec in sorted(data["figures"].items()):
        if not rec.get("designs_of") or rec.get("status", "ok") != "ok" or _current(rec, digests, root):
            continue
        prefixes = tuple(rec.get("design_sources") or ())
        sources = rec.get("sources") or ()
        if not prefixes or digest([s for s in sources if not s.startswith(prefixes)], root=root) != rec.get(
            "flow_digest"
        ):
            continue
        of = rec["designs_of"]
        if of not in designs:
            log(f"figures: recomputing the designs of {of} (without the tools)")
            designs[of] = importlib.import_module(of).designs()
        if designs[of] == rec.get("designs"):
            rec["attested"] = {
                "digest": digest(sources, root=root),
                "commit": commit(sources, root=root),
                "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            done.append(name)
    if done:
        log(f"figures: {len(done)} figure(s) kept: their designs are unchanged ({', '.join(done)})")
    return done


def unit_of(name):
    """A figure's unit from the end of its name, the convention of the bench keys ('' for ratios, counts)."""
    for suffix, unit in (
        ("_ms", "ms"),
        ("_seconds", "s"),
        ("_s", "s"),
        ("_GBps", "GB/s"),
        ("_gbps", "Gbit/s"),
        ("_mhz", "MHz"),
        ("_bytes", "B"),
        ("_luts", "LUT"),
        ("_ffs", "FF"),
        ("_per_cycle", "beats/cycle"),
    ):
        if name.endswith(suffix):
            return unit
    if "_s_" in name:  # lean_sync_s_8mib_1mib: seconds at a stated point
        return "s"
    return ""


def records(
    values,
    *,
    sources=None,
    command=None,
    output=None,
    units=None,
    notes=None,
    runs=None,
    statuses=None,
    prov=None,
    root=ROOT,
):
    """Records (``status`` ok unless ``statuses`` names another) for ``values`` (name to number, bool or
    text) of one run.

    ``prov`` is :func:`provenance` taken when the run started (so the digest is of the code that ran);
    without it, it is taken now from ``sources``, ``command`` and ``output``. ``units``, ``notes`` and
    ``runs`` map names to a unit (default from the name's suffix), a sentence on how the figure was
    obtained, and how many differing runs it summarises (1: one deterministic run); ``statuses`` maps a name
    to ``stale`` where the value was read from an earlier run that this one could not repeat (its note says
    which)."""
    if prov is None:
        prov = provenance(sources, command, output=output, root=root)
    out = {}
    for name, value in values.items():
        if isinstance(value, bool):
            value = bool(value)
        elif hasattr(value, "item"):  # numpy scalars
            value = value.item()
        status = (statuses or {}).get(name, "ok")
        rec = {"value": value, "unit": (units or {}).get(name, unit_of(name)), "status": status, **prov}
        if notes and name in notes:
            rec["note"] = notes[name]
        if runs and name in runs:
            rec["runs"] = runs[name]
        out[name] = rec
    return out


def failed_records(previous, producer_command, *, error, sources, output=None, root=ROOT):
    """The records of ``previous`` made by ``producer_command``, marked failed: value None, the error."""
    prov = provenance(sources, producer_command, output=output, root=root)
    out = {}
    for name, rec in previous.items():
        if rec.get("command") == prov["command"]:
            out[name] = {**rec, **prov, "value": None, "status": "failed", "note": error}
    return out


def write_output(path, new):
    """Merge ``new`` records into ``{"figures": {...}}`` at ``path`` (replacing records of the same names)."""
    path = Path(path)
    data = {"figures": {}}
    if path.exists():
        try:
            old = json.loads(path.read_text())
            if isinstance(old, dict) and isinstance(old.get("figures"), dict):
                data = old
        except (OSError, json.JSONDecodeError):
            pass
    data["figures"].update(new)
    data["figures"] = dict(sorted(data["figures"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: another producer may be reading it to merge its own records.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def read_output(path):
    """The records in a producer's output file ({} if it has none)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    figs = data.get("figures") if isinstance(data, dict) else None
    return figs if isinstance(figs, dict) else {}


# -- docs/figures.json and the regions --------------------------------------------------------------------
def load(root=ROOT):
    path = Path(root) / FIGURES_FILE
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise FiguresError(f"cannot read {FIGURES_FILE}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise FiguresError(f"{FIGURES_FILE} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("figures"), dict):
        raise FiguresError(f'{FIGURES_FILE} must be an object with "figures" and "regions"')
    if not isinstance(data.get("regions"), dict):
        raise FiguresError(f'{FIGURES_FILE} has no "regions" object')
    return data


def save(data, root=ROOT):
    data = {
        "figures": dict(sorted(data["figures"].items())),
        "regions": dict(sorted(data["regions"].items())),
    }
    (Path(root) / FIGURES_FILE).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _field(match, figures, region):
    name, attr, op, k, spec = match.groups()
    rec = figures.get(name)
    if rec is None:
        raise FiguresError(f"region {region} quotes {name}, which {FIGURES_FILE} does not record")
    if attr is not None:  # a field of the record's provenance: {pack_GBps@load:.0f}, {x@cores}
        if rec.get(attr) is None:
            raise FiguresError(f"region {region} quotes {name}@{attr}, which its record does not have")
        return format(rec[attr], spec or "")
    value = rec.get("value")
    if value is None:
        return f"({name} failed)"
    if op:
        value = value * float(k) if op == "*" else value / float(k)
    if isinstance(value, float) and value.is_integer() and not re.search(r"[.eEfFgG%]", spec or ""):
        value = int(value)  # a count that went through a float (numpy, JSON) is quoted as the count it is
    try:
        text = format(value, spec or "")
    except (TypeError, ValueError) as exc:
        raise FiguresError(f"region {region}: cannot format {name}={value!r} as {spec!r}: {exc}") from None
    # A figure recorded from an earlier run that was not repeated says so where it is quoted.
    return text + STALE_MARK if rec.get("status") == "stale" and text else text


def render_text(template, figures, region="?"):
    """One region's content: a list of lines becomes a block (own lines), a string inline text."""
    lines = template if isinstance(template, list) else [template]
    out = [_FIELD.sub(lambda m: _field(m, figures, region), line) for line in lines]
    return "\n" + "\n".join(out) + "\n" if isinstance(template, list) else out[0]


def quoted(template):
    """The figure names a template quotes."""
    lines = template if isinstance(template, list) else [template]
    return {m.group(1) for line in lines for m in _FIELD.finditer(line)}


def _doc_files(root):
    root = Path(root)
    files = []
    for pattern in _DOCS:
        files.extend(sorted(root.glob(pattern)))
    return files


_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def _regions(text):
    """The region matches of a Markdown text, leaving out those inside fenced code blocks (examples)."""
    fences = [m.span() for m in _FENCE.finditer(text)]
    return [m for m in _REGION.finditer(text) if not any(a <= m.start() < b for a, b in fences)]


def _rendered(text, data, path):
    out, pos = [], 0
    for m in _regions(text):
        out += [text[pos : m.start()], _sub(m, data, path)]
        pos = m.end()
    return "".join(out) + text[pos:]


def _sub(m, data, path):
    name = m.group(1)
    if name not in data["regions"]:
        raise FiguresError(f"{path}: region {name} has no template in {FIGURES_FILE}")
    body = render_text(data["regions"][name], data["figures"], name)
    return f"<!-- figures: {name} -->{body}<!-- /figures -->"


def render(root=ROOT, data=None):
    """Rewrite every region of README.md and docs/*.md from its template; the files changed."""
    data = load(root) if data is None else data
    changed = []
    for path in _doc_files(root):
        text = path.read_text()
        new = _rendered(text, data, path.relative_to(root))
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(root)))
    return changed


def region_problems(root=ROOT, data=None):
    """One line per region that differs from its rendering (edited by hand, or not rendered since)."""
    data = load(root) if data is None else data
    problems = []
    for path in _doc_files(root):
        rel = path.relative_to(root)
        text = path.read_text()
        for m in _regions(text):
            name = m.group(1)
            if name not in data["regions"]:
                problems.append(f"{rel}: region {name} has no template in {FIGURES_FILE}")
                continue
            want = render_text(data["regions"][name], data["figures"], name)
            if m.group(2) != want:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(
                    f"{rel}:{line}: region {name} differs from its rendering (edited by hand? "
                    "edit the template in docs/figures.json and run `wanreduce figures render`)"
                )
    return problems


def used_regions(root=ROOT):
    names = set()
    for path in _doc_files(root):
        names.update(m.group(1) for m in _regions(path.read_text()))
    return names


def stale(root=ROOT, data=None):
    """``{name: reason}`` for every figure a used region quotes that is missing, incomplete, not ok, or
    whose sources' digest differs from the recorded one (and from the one it was attested for)."""
    data = load(root) if data is None else data
    names = set()
    for region in used_regions(root):
        if region in data["regions"]:
            names |= quoted(data["regions"][region])
    digests = {}
    out = {}
    for name in sorted(names):
        rec = data["figures"].get(name)
        if rec is None:
            out[name] = "not recorded"
            continue
        missing = [k for k in REQUIRED if k not in rec]
        if missing:
            out[name] = f"record lacks {', '.join(missing)}"
        elif rec.get("status", "ok") == "stale":
            out[name] = f"recorded from an earlier run at {rec['commit']}, not repeated since" + (
                f" ({rec['note']})" if rec.get("note") else ""
            )
        elif rec.get("status", "ok") != "ok":
            out[name] = rec["status"] + (f": {rec['note']}" if rec.get("note") else "")
        elif not _current(rec, digests, root):
            out[name] = f"{', '.join(rec.get('sources') or ())} changed since {rec['commit']}"
    return out


def check(root=ROOT):
    """Lines describing every problem (stale figures with their refresh command, regions not current)."""
    data = load(root)
    by_command = {}
    for name, why in stale(root, data).items():
        cmd = data["figures"].get(name, {}).get("command", "(no command recorded)")
        by_command.setdefault(cmd, []).append(f"  stale: {name}: {why}")
    lines = []
    for cmd, names in by_command.items():
        lines += [f"refresh with: {cmd}", *names]
    lines.extend(region_problems(root, data))
    return lines


def _take_later_runs(root, data, only):
    """Replace each quoted figure whose command contains one of ``only`` by its output file's record when
    that record is current (same sources' digest) and dated later; return the names replaced."""
    digests, outputs, taken = {}, {}, []
    for name, rec in sorted(data["figures"].items()):
        command, output = rec.get("command") or "", rec.get("output")
        if not output or not any(part in command for part in only):
            continue
        if output not in outputs:
            outputs[output] = read_output(Path(root) / output)
        new = outputs[output].get(name)
        if (
            new
            and new.get("command") == command
            and new.get("date", "") > rec.get("date", "")
            and _current(new, digests, root)
        ):
            data["figures"][name] = new
            taken.append(name)
    return taken


def refresh(root=ROOT, *, run=True, only=(), log=print):
    """Rerun the command of every stale quoted figure (each command once; with ``only``, those commands
    that contain one of its strings), take the quoted figures from its output file, and render. Returns
    (commands run, commands that failed)."""
    data = load(root)
    # A figure quoted for the first time: take its record from any output file a recorded figure names.
    outputs = {r.get("output") for r in data["figures"].values() if r.get("output")}
    for name, why in stale(root, data).items():
        if why == "not recorded":
            for out in sorted(outputs):
                rec = read_output(Path(root) / out).get(name)
                if rec is not None:
                    data["figures"][name] = rec
                    break
    attest(root, data, log=log)
    todo = {}
    for name in stale(root, data):
        rec = data["figures"].get(name)
        if not rec or not rec.get("command") or not rec.get("output"):
            log(f"figures: {name} has no command and output recorded; run its producer by hand")
            continue
        todo.setdefault((rec["command"], rec["output"]), []).append(name)
    ran, failed = [], []
    for (command, output), names in todo.items():
        if only and not any(part in command for part in only):
            continue
        if run:
            log(f"figures: {command}  (for {', '.join(names)})")
            argv = shlex.split(command)
            exe = Path(sys.executable).parent
            if argv[0] in ("python", "wanreduce"):
                argv[0] = str(exe / ("python" if argv[0] == "python" else "wanreduce"))
            code = subprocess.run(argv, cwd=root, check=False).returncode
            ran.append(command)
            if code != 0:
                failed.append(command)
        new = read_output(Path(root) / output)
        for name in names:
            if name in new:
                data["figures"][name] = new[name]
    # Figures of the same output that are quoted but were current: kept as they are, unless ``only`` names
    # their command and its output holds a later run of the same code (a producer rerun by hand).
    if only:
        taken = _take_later_runs(root, data, only)
        if taken:
            log(
                f"figures: {len(taken)} figure(s) taken from a later run of current code ({', '.join(taken)})"
            )
    save(data, root)
    render(root, data)
    return ran, failed
