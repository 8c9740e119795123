"""Subcommands of the ``wanreduce`` CLI.

Each module listed in :data:`COMMANDS` has ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed ``argparse.Namespace`` and returning an exit code.
"""

COMMANDS = [
    "wanreduce.host.commands.pack",
    "wanreduce.host.commands.inspect",
    "wanreduce.host.commands.demo",
    "wanreduce.host.commands.schedule",
    "wanreduce.host.commands.sweep",
    "wanreduce.host.commands.rtl_add",
    "wanreduce.host.commands.sim_replay",
]
