"""The host layer: the model of the system, and the programs that run beside the gateware.

Above :mod:`wanreduce.spec`, without importing the gateware (the register map and the core's memory
rule come from the spec): the schedule and its cost model (:mod:`.schedule`, :mod:`.costmodel`,
:mod:`.lean`, :mod:`.pacing`), the golden aggregator (:mod:`.golden`) the RTL is checked against, the
WAN simulators (:mod:`.wan`, :mod:`.wan_lean`), packet framing and captures (:mod:`.frames`,
:mod:`.packet`, :mod:`.pcap`, :mod:`.emit`, :mod:`.replay`), the control driver (:mod:`.control`), real
sockets (:mod:`.transport`, :mod:`.aggd`) and training across sites (:mod:`.train`).
"""
