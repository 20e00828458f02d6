"""Floor 5: the manager side of the process boundary. The worker pool (:mod:`.pool`), one
attempt for a side and item (:mod:`.executor`), the order of work (:mod:`.schedule`), the
write-ahead journal (:mod:`.journal`), attempts -> case result (:mod:`.aggregate`, pure),
retries (:mod:`.retry`), and the thin loop that ties them together (:mod:`.run`)."""
