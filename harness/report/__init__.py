"""Floor 6: run folders written and read (:mod:`.io`, :mod:`.comparison_io`), the published
JSON Schemas (:mod:`.schema`), and the renderers that all read the same records: plain text
(:mod:`.text`), JUnit XML (:mod:`.junit`), Markdown (:mod:`.markdown`, :mod:`.comparison_md`)
and HTML (:mod:`.html` for a run, :mod:`.html_compare` for a comparison, with the pictures of
:mod:`.gallery` and :mod:`.images` and the SVG plots of :mod:`.plots`)."""
