"""How fast a run recovers from a killed rank (:mod:`.killed_rank`), with the parts
that kill their own process (:mod:`.faults`)."""
