"""Floor 4: what runs inside a worker process. Its main loop (:mod:`.main`), one attempt
(:mod:`.attempt`), isolation between attempts (:mod:`.isolation`, with the tables of settings it
puts back in :mod:`.knobs`, the import system's state in :mod:`.imports` and what it finds left
running in :mod:`.leftovers`), environment collection (:mod:`.envinfo`) and the typed protocol
it speaks with the manager (:mod:`.protocol`).

Import-light: importing this package imports nothing but the standard library.
"""
