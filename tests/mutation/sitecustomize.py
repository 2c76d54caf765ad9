"""Loaded in every child interpreter of a mutmut run (PYTHONPATH, see plugin.py): in the
"stats" pass, write each mutated function the child reaches to a file as it happens."""

import os

if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get("CLEANFLUSH_MUTMUT_HITS"):
    from mutmut.mutation import trampoline as _trampoline

    _path = os.path.join(os.environ["CLEANFLUSH_MUTMUT_HITS"], f"{os.getpid()}.txt")

    def _record(name, caller=None):  # mutmut's own needs its config, read from the cwd
        with open(_path, "a") as out:
            out.write(name + "\n")

    _trampoline.record_trampoline_hit = _record
