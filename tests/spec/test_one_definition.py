"""Each protocol constant is defined once, in wanreduce.spec, and nowhere else in the package's code; and
frames are sliced by byte offset only in the framing module."""

import ast
import io
import os
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

from wanreduce.spec import protocol, regmap

ROOT = Path(__file__).resolve().parents[2]
CODE = ["hw", "host", "sim", "cli"]
SPEC = "spec/"
#: The fuzzer's classifier is written from docs/PROTOCOL.md alone, on purpose: it checks the code that
#: imports the spec, so it must not import it.
INDEPENDENT = {"sim/verify/fuzz_classify.py"}


def _cannot_read(why):
    # Under CI the tree is always a git checkout: a check that cannot read it must fail, not pass quietly.
    if os.environ.get("CI"):
        pytest.fail(f"cannot read the source tree: {why}")
    pytest.skip(why)


def _grep(pattern):
    try:
        out = subprocess.run(
            ["git", "grep", "-n", "-E", pattern, "--", *CODE],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        _cannot_read("git is not available")
    if out.returncode not in (0, 1):
        _cannot_read("not a git checkout")
    return [
        line
        for line in out.stdout.splitlines()
        if not line.startswith(SPEC) and line.split(":", 1)[0] not in INDEPENDENT
    ]


NAMES = [n for n in protocol.__all__ if n.isupper()] + [n for n in regmap.__all__ if n.isupper()]


@pytest.mark.parametrize("name", NAMES)
def test_defined_only_in_the_spec(name):
    assert _grep(rf"^\s*{name}\s*=") == []


def _is_doc(token):
    return token.lstrip("rbfuRBFU").startswith(('"""', "'''"))


def _code_tokens():
    """(path, line, token) of every number and every string that is not a docstring or help text."""
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(SPEC) or rel in INDEPENDENT:
                continue
            toks = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
            for k, tok in enumerate(toks):
                if tok.type == tokenize.NUMBER:
                    yield rel, tok.start[0], tok.string
                elif tok.type == tokenize.STRING and not _is_doc(tok.string):
                    # help= texts and messages may name a default; code may not spell one out
                    context = [t.string for t in toks[max(0, k - 6) : k]]
                    if "help" not in context and "raise" not in context and "description" not in context:
                        yield rel, tok.start[0], tok.string


NUMBERS = {"0X5752", "47000", "0X7FC00000", "0X7E00", "0X7FC0", "98", "74"}
STRINGS = ["02:57:52", "01:00:5e:57", "239.87.", "10.87.8"]


def test_protocol_literals_are_not_retyped():
    hits = [
        f"{path}:{line}: {tok}"
        for path, line, tok in _code_tokens()
        if tok.upper() in NUMBERS or any(s in tok for s in STRINGS)
    ]
    assert hits == [], "\n".join(hits)


#: Where a frame's or a header's bytes may be sliced by offset: the framing module (the layout of
#: Ethernet, IPv4 and UDP in one place). The wanreduce header is read through ``HEADER_LAYOUT`` everywhere.
FRAMING = {"host/frames.py"}
#: What a sliced value is called when it holds a frame, a header or a part of one.
_FRAME_NAME = re.compile(
    r"(^|_)(frame|frames|payload|payloads|head|header|headers|hdr|pkt|packet|datagram|segment|seg|udp|ip|f|p|h)$"
)


def _offset(node):
    """Whether a slice bound is a byte offset written as a number: ``14``, ``-4``, ``udp + 4``."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int)
    if isinstance(node, ast.UnaryOp):
        return _offset(node.operand)
    if isinstance(node, ast.BinOp):
        return any(isinstance(side, ast.Constant) for side in (node.left, node.right))
    return False


def _numeric_slices():
    """``path:line: text`` of every slice by number of a value named like a frame or a header."""
    for folder in ("host", "sim", "cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in FRAMING or rel in INDEPENDENT:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)):
                    continue
                value = node.value
                name = value.id if isinstance(value, ast.Name) else getattr(value, "attr", "")
                bounds = [b for b in (node.slice.lower, node.slice.upper) if b is not None]
                if _FRAME_NAME.search(name) and bounds and all(_offset(b) for b in bounds):
                    yield rel, f"{rel}:{node.lineno}: {ast.unparse(node)}"


def test_frames_are_sliced_only_by_the_framing_code():
    if not (ROOT / "host" / "frames.py").is_file():
        _cannot_read("the source tree is not beside the tests")
    hits = [text for _, text in _numeric_slices()]
    assert hits == [], "\n".join(hits)


def test_the_slice_check_sees_a_numeric_slice():
    node = ast.parse("frame[36:38]").body[0].value
    assert _offset(node.slice.lower) and _offset(node.slice.upper)
    assert _FRAME_NAME.search("frame") and not _FRAME_NAME.search("tensors")
