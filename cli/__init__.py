"""The ``wanreduce`` command line: a thin layer over :mod:`wanreduce.host` and :mod:`wanreduce.sim`.

The top of the import order (spec <- hw <- host <- sim <- cli). Each module listed in :data:`COMMANDS` has
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking the parsed
``argparse.Namespace`` and returning an exit code.
"""

import argparse
import importlib
import importlib.metadata
import os
import sys
import warnings
from pathlib import Path

from ..spec.errors import WanreduceError, WanreduceWarning

__all__ = ["main", "build_parser", "version", "COMMANDS"]

COMMANDS = [
    "wanreduce.cli.pack",
    "wanreduce.cli.inspect",
    "wanreduce.cli.demo",
    "wanreduce.cli.demo_net",
    "wanreduce.cli.aggd",
    "wanreduce.cli.schedule",
    "wanreduce.cli.sweep",
    "wanreduce.cli.rtl_add",
    "wanreduce.cli.sim_replay",
    "wanreduce.cli.emit",
    "wanreduce.cli.replay",
    "wanreduce.cli.merge",
    "wanreduce.cli.unpack",
    "wanreduce.cli.verify",
    "wanreduce.cli.verilog",
    "wanreduce.cli.synth",
    "wanreduce.cli.bench",
    "wanreduce.cli.cache",
    "wanreduce.cli.train",
    "wanreduce.cli.figures",
    "wanreduce.cli.board",
    "wanreduce.cli.prove",
]


def version():
    """The installed distribution's version (``importlib.metadata``), or a note saying it is not installed."""
    try:
        return importlib.metadata.version("wanreduce")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line option errors (its own print the whole usage first), like every other error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _command_of(module):
    return module.rsplit(".", 1)[1].replace("_", "-")


def build_parser(commands=None):
    """The parser of ``wanreduce``, with the subcommands of ``commands`` (module names; default: all)."""
    parser = _Parser(
        prog="wanreduce",
        description="FPGA in-network aggregation for training across continents: packet tools, "
        "RTL checks and the WAN sync-schedule optimizer.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS if commands is None else commands:
        importlib.import_module(name).register(sub)
    return parser


def _parser_for(argv):
    """Only the named command's module is imported (the others pull in Amaranth, the simulators, torch),
    so that ``wanreduce cache --path`` answers at once; the full parser for help and errors."""
    first = next((a for a in argv if not a.startswith("-")), None)
    wanted = [m for m in COMMANDS if _command_of(m) == first]
    if wanted and argv and argv[0] == first:
        return build_parser(wanted)
    return build_parser()


def _command_parser(parser, command):
    """The subparser of ``command`` in ``parser``, for an error that names the command."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _one_line(command, show):
    """Warnings about the user's input are one line on stderr, like errors; others as Python shows them."""

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, WanreduceWarning):
            print(f"wanreduce {command}: warning: {message}", file=sys.stderr, flush=True)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        print(f"wanreduce {version()}")
        return 0
    parser = _parser_for(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse leaves a command's unknown options to the top parser, whose error names no command.
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line(args.command, warnings.showwarning)
            return int(args.func(args) or 0)
    except WanreduceError as exc:
        print(f"wanreduce {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"wanreduce {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `wanreduce inspect big.pcap | head` must not print a traceback.
        return 0
    except Exception as exc:
        # A bug, not bad input: one line and its own exit status, so a script can tell the two apart;
        # the traceback is there for whoever reports it.
        if os.environ.get("WANREDUCE_DEBUG"):
            raise
        where = exc.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        at = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where else ""
        print(
            f"wanreduce {args.command}: internal error: {type(exc).__name__}: {exc}{at} (a bug: rerun with "
            "WANREDUCE_DEBUG=1 for the traceback and report it)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
