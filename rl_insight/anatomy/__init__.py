"""A run's steps, plain data in and out: where each step's time went (:mod:`.rows`), the
engines' request statistics in it (:mod:`.requests`), why one step was slow
(:mod:`.explain`) and what changed over the run (:mod:`.changes`, :mod:`.association`).
No clock and no I/O: the server feeds these what arrived, the tests what they made."""
