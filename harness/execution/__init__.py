"""Floor 5: the manager side of the process boundary. The worker pool (:mod:`.pool`), which
worker serves a side and platform (:mod:`.workers`), which device it owns (:mod:`.devices`),
what a side runs as on a platform, resolved once (:mod:`.resolution`), one attempt for a side
and item (:mod:`.executor`), the order of work (:mod:`.schedule`), the
write-ahead journal (:mod:`.journal`), attempts -> case result (:mod:`.aggregate`, pure),
retries (:mod:`.retry`), and the thin loop that ties them together (:mod:`.run`)."""
