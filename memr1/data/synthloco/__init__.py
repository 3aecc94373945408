"""synthloco: a seeded synthetic benchmark in LoCoMo's nested schema, with gold memory operations.

Conversations between two speakers whose facts evolve (pets and hobbies that grow, moves and new
jobs, cancelled trips, repeats) so that every memory operation is needed, with questions of all
five LoCoMo categories. The files load with the real LoCoMo loader; the gold operations go to a
separate file.

Modules: ``world`` (config, presets, vocabulary), ``dates`` (session times, relative time),
``events`` (the story), ``templates`` and ``render`` (the text), ``gold`` (operations and banks,
and the gold-bank rules), ``qa`` (questions), ``generate`` (``generate_dataset``,
``write_dataset`` and the command line). The package does not import ``generate`` itself, so that
``python -m memr1.data.synthloco.generate`` runs it exactly once.
"""
