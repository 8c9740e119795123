"""The specification layer: the protocol, the register map, the addressing plan and the schedule file.

The bottom of the import order (spec <- hw <- host <- sim <- cli): standard library only, so the gateware,
the host model, the simulation and the command line all read the same definitions. Submodules:

* :mod:`.protocol`: wire constants, header layout, kinds, dtypes, drop codes in precedence order;
* :mod:`.regmap`: the control port's registers;
* :mod:`.addressing`: MACs and IPv4 addresses of hosts, aggregators and multicast groups;
* :mod:`.schedfile`: the schedule file's format, reading and checking;
* :mod:`.errors`: :class:`WanreduceError`, what every user-facing check raises.
"""
