"""Floor 6: run folders written and read (:mod:`.io`), the published JSON Schema
(:mod:`.schema`), and the renderers that all read the same records: plain text (:mod:`.text`),
JUnit XML (:mod:`.junit`) and Markdown (:mod:`.markdown`)."""
