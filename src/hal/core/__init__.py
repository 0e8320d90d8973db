"""Pure domain model: jobs, nodes, partitions, resources, states, reasons, clock, errors.

Owns the vocabulary every other plane speaks. Imports nothing from the rest of hal and does
no I/O.
"""
