"""Floor 3: pinned references. A read-only store (:mod:`.store`) over a hash-verified manifest
(:mod:`.manifest`); :mod:`.bless` is the only writer, and :mod:`.rules` says what it refuses."""
