"""What runs ON the GPU host, next to the server: the benchmark client and A/B campaigns.

tunedeck packs this package, and the core modules it imports, into one zipapp
(:mod:`tunedeck.services.runtime`), uploads it to ``${TUNEDECK_HOME}/lib/`` and runs it
detached with the host's own Python (>= 3.9, standard library only; uvloop is
used when that interpreter already has it). Nothing is installed on the host and
nothing is written outside ``${TUNEDECK_HOME}``.

Every job has a folder ``${TUNEDECK_HOME}/<bench|ab>/<id>/`` (see
:mod:`tunedeck.hostside.jobfiles`); the laptop follows its ``events.jsonl`` by byte
offset and mirrors its results, so a dropped link or a closed laptop loses
nothing.
"""
