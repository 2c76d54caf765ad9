"""``cleanflush audit -- COMMAND``: every autotuning pick the job was served without tuning (a
table a library ships or preloads, Triton's disk cache), tuned again clean and priced by two
timers that share no code.  docs/audit.md.

``served``    in the job's processes: the recorder (each served pick, with its call)
``libraries`` the records of the libraries whose tables the audit reads and corrects
``price``     in a process of its own, on the GPU: the clean re-tune and the two timers' prices
``graph``     the second timer: back-to-back launches in a CUDA graph over copies of the inputs
``judge``     plain Python over records: each entry's class, the headline
``tables``    reading a library's table (checked) and writing the corrected one
``run``       the audit: the job, the pricing process, the judging; ``report`` its text

This package's ``__init__`` imports nothing: the recorder is loaded in the job's processes.
"""
