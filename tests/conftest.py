"""The order the two pytest workers take the tests in."""


def pytest_collection_modifyitems(session, config, items):
    """The RTL tests first, one file's tests spread out; the rest in their order.

    On a cold build cache an RTL test takes up to a minute or two (its Verilator build) and most other
    tests take seconds. In file order the builds come last (``tests/sim``) and one worker runs the tail
    alone. First, and with the first test of every file before the second of any (so that the two workers
    start different builds instead of one waiting on the other's lock), they pack with the quick tests
    behind them. ``make test`` hands tests out one at a time (``--maxschedchunk 1``) so that the order
    holds across the workers.
    """
    rtl = [item for item in items if item.get_closest_marker("rtl")]
    by_file = {}
    for item in rtl:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    order, queues = [], list(by_file.values())
    while queues:
        order += [queue.pop(0) for queue in queues]
        queues = [queue for queue in queues if queue]
    items[:] = order + [item for item in items if not item.get_closest_marker("rtl")]
