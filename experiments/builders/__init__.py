"""The builders moved into their agents' folders: ``algorithms/<agent>/builder.py``
(``from algorithms.dqn import DQNBuilder``). Importing an old module here raises an
ImportError naming its new place (``algorithms/_moved.py``)."""
