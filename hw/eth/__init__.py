"""A gigabit Ethernet MAC over RGMII for ECP5 boards: DDR and delay cells (vendor primitives or their
behavioural models), the receive and transmit MACs, store-and-forward frame buffers, the clock-domain
crossings to the core's beats and MDIO management. :mod:`.mac` composes them; docs/board.md has the
picture."""
